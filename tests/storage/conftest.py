"""The store every storage test runs against: a local folder and an S3 bucket (moto)."""

from __future__ import annotations

import pytest

from spade.storage import ObjectStore


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> ObjectStore:
    if request.param == "local":
        return ObjectStore(str(tmp_path / "store"))
    bucket = request.getfixturevalue("s3_bucket")
    return ObjectStore(f"s3://{bucket.name}/prefix", bucket.storage_options)
