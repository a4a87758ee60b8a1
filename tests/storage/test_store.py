"""spade.storage on a local folder and on a real S3 endpoint (moto server on loopback)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys

import pytest

from spade.errors import ConfigError, InvalidKeyError, ObjectCorruptError, StorageError
from spade.storage import (
    STAGES,
    CampaignStore,
    ObjectStore,
    RunLayout,
    StageManifest,
    blob_key,
    code_version,
    utc_now,
    validate_key,
)
from spade.storage.store import TMP_PREFIX


@pytest.fixture
def local_store(tmp_path) -> ObjectStore:
    return ObjectStore(str(tmp_path / "store"))


def test_bytes_and_json_round_trip(store):
    store.write_bytes("a/b/c.bin", b"\x00\x01data")
    store.write_json("a/meta.json", {"x": [1, 2.5, "é"], "y": None})
    assert store.read_bytes("a/b/c.bin") == b"\x00\x01data"
    assert store.read_json("a/meta.json") == {"x": [1, 2.5, "é"], "y": None}
    store.write_bytes("a/b/c.bin", b"replaced")
    assert store.read_bytes("a/b/c.bin") == b"replaced"
    assert store.exists("a/b/c.bin") and not store.exists("a/b") and not store.exists("nope")
    with pytest.raises(FileNotFoundError):
        store.read_bytes("nope")


def test_list_and_delete(store):
    for key in ["r/x/1", "r/x/2", "r/xy/3", "other"]:
        store.write_bytes(key, b"k")
    assert store.list() == ["other", "r/x/1", "r/x/2", "r/xy/3"]
    assert store.list("r/x") == ["r/x/1", "r/x/2"]  # a folder prefix, not a string prefix
    assert store.list("r/x/1") == ["r/x/1"]
    assert store.list("missing") == []
    assert store.delete("r/x") == ["r/x/1", "r/x/2"]
    assert store.list() == ["other", "r/xy/3"]
    assert store.delete("missing") == []
    with pytest.raises(ValueError, match="non-empty"):
        store.delete("")


def test_url_opens_with_fsspec(store):
    import fsspec

    store.write_bytes("dir/k.txt", b"hello")
    url = store.url("dir/k.txt")
    assert url.startswith("file://" if store.local else "s3://")
    with fsspec.open(url, "rb", **store.storage_options) as f:
        assert f.read() == b"hello"


def test_check_passes_and_leaves_nothing(store):
    store.check()
    assert store.list() == []


def test_check_on_missing_bucket_is_a_storage_error(s3_bucket):
    store = ObjectStore(f"s3://{s3_bucket.name}-absent", s3_bucket.storage_options)
    with pytest.raises(StorageError, match="not usable"):
        store.check()


def test_json_refuses_nan(local_store):
    with pytest.raises(ValueError):
        local_store.write_json("x.json", {"v": float("nan")})
    assert local_store.list() == []


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "non-empty"),
        ("/abs/key", "absolute"),
        ("a/../b", r"'\.\.'"),
        ("a//b", "empty"),
        ("a/b/", "empty"),
        ("./a", "empty"),
        ("a\\b", "backslash"),
        ("a/*.json", "glob"),
        ("a/\nb", "control"),
        (f"a/{TMP_PREFIX}x", "reserved"),
    ],
)
def test_bad_keys_are_value_errors(local_store, key, why):
    with pytest.raises(ValueError, match=why):
        validate_key(key)
    with pytest.raises(ValueError):
        local_store.write_bytes(key, b"x")
    with pytest.raises(ValueError):
        local_store.read_bytes(key)


def test_local_write_is_atomic(local_store, monkeypatch):
    """A torn temp file is neither listed nor read as the key; a failed write leaves nothing."""
    local_store.write_bytes("k/v", b"old")
    folder = os.path.join(local_store.root_path, "k")
    with open(os.path.join(folder, f"{TMP_PREFIX}dead-v"), "wb") as f:
        f.write(b"half of a ne")  # what a SIGKILL mid-write leaves behind
    assert local_store.list() == ["k/v"]
    assert local_store.read_bytes("k/v") == b"old"

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(StorageError, match=r"cannot write file://.*/k/v: OSError\('disk gone'\)"):
        local_store.write_bytes("k/v", b"new")
    monkeypatch.undo()
    assert local_store.read_bytes("k/v") == b"old"
    assert sorted(os.listdir(folder)) == [f"{TMP_PREFIX}dead-v", "v"]  # no new temp file
    assert local_store.delete("k") == ["k/v"] and not os.path.exists(folder)


def test_blobs_are_idempotent_and_verified(store):
    data = b"class FooEnv:\n    pass\n"
    digest, written = store.ensure_blob(data)
    assert digest == hashlib.sha256(data).hexdigest() and written
    assert store.ensure_blob(data) == (digest, False)  # second write detected and skipped
    assert store.put_blob(data) == digest
    assert store.list("blobs") == [f"blobs/sha256/{digest[:2]}/{digest}"]
    assert store.has_blob(digest) and store.get_blob(digest) == data

    store.write_bytes(blob_key(digest), b"class BarEnv:\n    pass\n")  # same size, tampered
    with pytest.raises(StorageError, match="corrupt"):
        store.get_blob(digest)
    store.write_bytes(blob_key(digest), b"torn")  # wrong size: put_blob repairs it
    assert store.ensure_blob(data) == (digest, True)
    assert store.get_blob(digest) == data

    missing = hashlib.sha256(b"never stored").hexdigest()
    assert not store.has_blob(missing)
    with pytest.raises(FileNotFoundError):
        store.get_blob(missing)
    with pytest.raises(ValueError, match="sha256"):
        store.get_blob("ABC")


def test_layout_keys_and_validation():
    layout = RunLayout("c-1")
    assert layout.round_prefix(3) == "campaign/c-1/round-0003"
    assert layout.round_prefix(12345) == "campaign/c-1/round-12345"
    assert layout.stage_prefix(0, "verify") == "campaign/c-1/round-0000/verify"
    assert layout.stage_key(0, "design", "d/0.py") == "campaign/c-1/round-0000/design/d/0.py"
    assert layout.stages == STAGES and STAGES[0] == "sample_documents"
    with pytest.raises(ValueError, match="unknown stage 'designs'"):
        layout.stage_prefix(0, "designs")
    with pytest.raises(ValueError, match="round"):
        layout.round_prefix(-1)
    with pytest.raises(ValueError, match="campaign id"):
        RunLayout("../x")
    with pytest.raises(ValueError):
        layout.stage_key(0, "design", "../escape")
    extended = RunLayout("c", extra_stages=["distill"])
    assert extended.stages[-1] == "distill" and extended.stage_prefix(1, "distill")
    with pytest.raises(ValueError, match="stage name"):
        RunLayout("c", extra_stages=["Bad-Name"])


def _manifest(round: int, stage: str, **kw) -> StageManifest:
    return StageManifest(
        stage=stage,
        round=round,
        inputs={"docs": "a" * 64},
        outputs={"designs": f"campaign/c/round-{round:04d}/{stage}/designs.jsonl"},
        config_hash="cfg",
        code_version="code",
        started=utc_now(),
        finished=utc_now(),
        seconds=1.5,
        **kw,
    )


def test_manifest_round_trip_and_resume(store):
    camp = CampaignStore(store, "c")
    assert camp.last_completed() is None and camp.rounds() == []
    m = _manifest(0, "design")
    key = camp.write_stage_manifest(m)
    assert key == "campaign/c/round-0000/design/manifest.json"
    assert camp.read_stage_manifest(0, "design") == m
    assert camp.read_stage_manifest(0, "verify") is None

    camp.write_stage_manifest(_manifest(0, "sample_documents"))
    camp.write_stage_manifest(_manifest(0, "verify", status="failed"))
    # outputs written, manifest not yet: interrupted, so not completed
    store.write_bytes(camp.layout.stage_key(0, "hint", "hints.jsonl"), b"{}\n")
    assert camp.completed_stages(0) == ["sample_documents", "design"]
    assert camp.pending_stages(0, ["design", "verify", "hint"]) == ["verify", "hint"]
    assert camp.last_completed() == (0, "design")

    store.write_bytes(camp.layout.stage_key(1, "sample_documents", "docs.jsonl"), b"")
    assert camp.rounds() == [0, 1]
    assert camp.last_completed() == (0, "design")  # round 1 has no committed stage yet
    camp.write_stage_manifest(_manifest(1, "sample_documents"))
    assert camp.last_completed() == (1, "sample_documents")


def test_bad_manifests_read_as_absent(local_store, caplog):
    camp = CampaignStore(local_store, RunLayout("c"))
    key = camp.layout.manifest_key(0, "score")
    for raw in [b"{torn", b"[]", json.dumps({"format": 1, "round": 0}).encode()]:
        local_store.write_bytes(key, raw)
        with caplog.at_level(logging.WARNING, logger="spade.storage.layout"):
            assert camp.read_stage_manifest(0, "score") is None
        assert "manifest" in caplog.text
        caplog.clear()
    local_store.write_json(key, {**_manifest(0, "score").to_json(), "extra": 1})
    assert camp.read_stage_manifest(0, "score") is None
    local_store.write_json(key, _manifest(0, "hint").to_json())  # wrong stage at this key
    assert camp.read_stage_manifest(0, "score") is None
    assert camp.completed_stages(0) == []
    with pytest.raises(ValueError, match="status"):
        _manifest(0, "score", status="done")


def test_code_version(tmp_path, monkeypatch):
    v = code_version("spade.storage.layout")
    assert len(v) == 16 and v == code_version("spade.storage.layout", "spade.storage.layout")
    assert code_version("spade.storage.layout", "spade.storage.version") != v

    src = tmp_path / "stage_mod.py"
    src.write_text("def run():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = code_version("stage_mod")
    assert "stage_mod" not in sys.modules  # read, never imported
    src.write_text("def run():\n    return 2\n")
    assert code_version("stage_mod") != before
    with pytest.raises(ValueError, match="no Python source"):
        code_version("sys")
    with pytest.raises(ValueError, match="no module"):
        code_version("nowhere_at_all.sub")
    with pytest.raises(ValueError):
        code_version()


def test_bad_store_data_and_ids_are_storage_errors():
    """What crosses the store's boundary fails as StorageError (and still as ValueError):
    a stored manifest that is not one, a campaign id or key the layout does not take."""
    good = _manifest(0, "score").to_json()
    for bad in ([], {**good, "format": 0}, {**good, "extra": 1}, {**good, "status": "done"}):
        with pytest.raises(ObjectCorruptError):
            StageManifest.from_json(bad)
    for call in (lambda: RunLayout("../x"), lambda: validate_key("a/../b"), lambda: blob_key("AB")):
        with pytest.raises(InvalidKeyError) as exc:
            call()
        assert isinstance(exc.value, StorageError) and isinstance(exc.value, ValueError)
    with pytest.raises(ConfigError, match="not empty"):  # a --store "" or storage.root
        ObjectStore("")
