"""Objects another process writes into a folder this process has listed are read, not taken
for missing: s3fs caches folder listings, and a reader that listed a stage's folder before the
stage committed (a live progress view, the shrunk-preset test polling for a manifest) was told
"no object" for the manifest its next listing showed. The other writer is a second S3 client
(boto3) on the same endpoint, as another process would be."""

from __future__ import annotations

from spade.storage import ObjectStore


def test_a_key_written_by_another_client_after_a_listing_is_read(s3_bucket):
    store = ObjectStore(f"s3://{s3_bucket.name}/root", s3_bucket.storage_options)

    def put(key: str, body: bytes) -> None:  # another process's write
        s3_bucket.client.put_object(Bucket=s3_bucket.name, Key=f"root/{key}", Body=body)

    put("round/evaluate/plays/0.json", b"{}")
    assert store.list("round") == ["round/evaluate/plays/0.json"]  # the folder is now cached
    put("round/evaluate/manifest.json", b'{"status": "completed"}')
    assert "round/evaluate/manifest.json" in store.list("round")
    assert store.read_json("round/evaluate/manifest.json") == {"status": "completed"}
    put("round/evaluate/manifest.json", b'{"status": "completed", "again": true}')
    assert store.read_json("round/evaluate/manifest.json")["again"] is True  # a rewrite too
