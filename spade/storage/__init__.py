"""The artifact layer: an fsspec object store, content-addressed blobs, the campaign / round /
stage layout and the per-stage manifests that make a stage resumable. No Prefect here."""

from spade.storage.layout import (
    MANIFEST,
    STAGES,
    CampaignStore,
    RunLayout,
    StageManifest,
    utc_now,
)
from spade.storage.store import ObjectStore, atomic_write, blob_key, validate_key
from spade.storage.version import code_version

__all__ = [
    "MANIFEST",
    "STAGES",
    "CampaignStore",
    "ObjectStore",
    "RunLayout",
    "StageManifest",
    "atomic_write",
    "blob_key",
    "code_version",
    "utc_now",
    "validate_key",
]
