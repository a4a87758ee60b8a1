"""Environment pools in and out of the project: ``spade pool import`` reads a published pool
(the reference's layout, JSONL / parquet shards or a Hugging Face dataset folder, local or
``s3://``), checks its declared checksums, verifies every environment in the jail and stores
the accepted ones content-addressed (:mod:`spade.curriculum.stored`); ``spade pool export``
writes a campaign's accepted environments as such a pool. No Prefect here."""

from spade.pools.export import export_pool
from spade.pools.importer import ImportReport, import_pool
from spade.pools.sources import PoolSource, SourceEnv, read_source

__all__ = [
    "ImportReport",
    "PoolSource",
    "SourceEnv",
    "export_pool",
    "import_pool",
    "read_source",
]
