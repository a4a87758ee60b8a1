"""Store failures name the object; manifests record each output's size and sha256, and a
missing or corrupt output of a committed stage is found (locally and on S3)."""

from __future__ import annotations

import hashlib

import pytest

import tests.fakes.flaky_fs  # noqa: F401  (registers flaky://)
from spade.config import load_config
from spade.errors import ObjectCorruptError, ObjectMissingError, StorageError
from spade.pipeline.campaign import first_incomplete_round, round_complete, start_campaign
from spade.pipeline.context import RoundContext
from spade.pipeline.record import StageRecord, campaign_store, read_jsonl
from spade.storage import STAGES, ObjectStore, blob_key
from tests.fakes.flaky_fs import FlakyFS


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path) -> tuple[str, dict]:
    if request.param == "local":
        return str(tmp_path / "store"), {}
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket.name}/prefix", bucket.storage_options


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    FlakyFS.reset()


@pytest.mark.attack
def test_every_store_failure_is_a_storage_error_naming_the_object(tmp_path):
    store = ObjectStore(f"flaky://local{tmp_path}/store")
    fault = FlakyFS.fail("*/round-0000/score/ema.json")
    key = "campaign/c/round-0000/score/ema.json"
    with pytest.raises(StorageError, match=f"cannot write flaky://local{tmp_path}/store/{key}"):
        store.write_json(key, {"logic": 0.5})
    assert fault.failed == [f"{tmp_path}/store/{key}"]
    store.write_json(key, {"logic": 0.5})  # transient: the next write goes through
    assert store.read_json(key) == {"logic": 0.5}

    store.write_bytes("t.json", b'{"half": ')
    with pytest.raises(ObjectCorruptError, match=r"flaky://.*/t\.json is not valid JSON"):
        store.read_json("t.json")
    with pytest.raises(ObjectMissingError, match=r"no object flaky://.*/absent\.json") as err:
        store.read_json("absent.json")
    assert isinstance(err.value, FileNotFoundError)  # callers that expect "absent" still work


@pytest.mark.attack
def test_a_truncated_jsonl_names_the_object_and_line(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    cs.store.write_bytes("rows.jsonl", b'{"a": 1}\n{"b": 2}\n{"c": ')
    with pytest.raises(ObjectCorruptError, match=r"file://.*/rows\.jsonl line 3 is not JSON"):
        read_jsonl(cs, "rows.jsonl")


@pytest.mark.attack
def test_ensure_blob_rewrites_a_tampered_blob_of_the_right_size(root):
    store = ObjectStore(*root)
    data = b"class FooEnv:\n    pass\n"
    digest = store.put_blob(data)
    store.write_bytes(blob_key(digest), b"class BarEnv:\n    pass\n")  # same size
    assert store.ensure_blob(data) == (digest, True)
    assert store.get_blob(digest) == data


def _commit(cfg, stage: str, r: int = 0) -> StageRecord:
    rec = StageRecord(RoundContext.open(cfg, "c", r), stage)
    rec.write_jsonl("rows.jsonl", [{"i": i} for i in range(3)])
    rec.write_json("state.json", {"stage": stage})
    rec.write_blob("code/env", f"class {stage.title()}Env: ...".encode())
    rec.commit()
    return rec


@pytest.mark.attack
def test_manifests_record_size_and_sha256_and_resume_finds_what_broke(root):
    cfg = load_config(overrides={"storage.root": root[0], "storage.storage_options": root[1]})
    cs = start_campaign(campaign_store(cfg, "c"), cfg)
    for stage in STAGES:
        _commit(cfg, stage)
    manifest = cs.read_stage_manifest(0, "score")
    assert manifest is not None
    rows = cs.store.read_bytes(cs.layout.stage_key(0, "score", "rows.jsonl"))
    assert manifest.files["rows.jsonl"] == {
        "key": cs.layout.stage_key(0, "score", "rows.jsonl"),
        "size": len(rows),
        "sha256": hashlib.sha256(rows).hexdigest(),
    }
    assert manifest.files["code/env"]["key"] == blob_key(manifest.outputs["code/env"])
    assert cs.unverified_stages(0) == {} and first_incomplete_round(cs) == 1

    # truncate one output, delete another: exactly those stages are reported, by object
    key = cs.layout.stage_key(0, "score", "rows.jsonl")
    cs.store.write_bytes(key, rows[:-5])
    gone = cs.layout.stage_key(0, "memory", "state.json")
    cs.store.delete(gone)
    reports: list[str] = []
    assert round_complete(cs, 0)  # the manifests are there ...
    assert first_incomplete_round(cs, report=reports.append) == 0  # ... but it is redone
    bad = cs.unverified_stages(0)
    assert set(bad) == {"score", "memory"}
    assert bad["score"] == [
        f"corrupt {cs.store.url(key)}: {len(rows) - 5} bytes, sha256"
        f" {hashlib.sha256(rows[:-5]).hexdigest()[:12]}, the manifest recorded {len(rows)}"
        f" bytes, sha256 {hashlib.sha256(rows).hexdigest()[:12]}"
    ]
    assert bad["memory"] == [f"missing {cs.store.url(gone)}"]
    assert len(reports) == 2 and cs.store.url(gone) in reports[1]
    assert cs.verify_stage(0, "score", under="state") == []  # a task's share: only its names

    assert cs.repairs(0, "score") == 0
    assert cs.repairs(0, "score", bump=True) == 1 == cs.repairs(0, "score")
    assert cs.repairs(0, "score", "envs/e1/") == 0  # counted per scope
    _commit(cfg, "score")
    _commit(cfg, "memory")  # recomputed: verified again
    assert cs.unverified_stages(0) == {} and first_incomplete_round(cs) == 1


def test_a_stage_output_written_by_another_task_is_recorded_by_content(tmp_path):
    """The evaluate stage names its mapped tasks' objects by key: read back at commit."""
    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    rec = StageRecord(RoundContext.open(cfg, "c", 0), "evaluate")
    key = rec.key("envs/e1/summary.json")
    rec.cs.store.write_json(key, {"env_id": "e1"})
    rec.outputs["envs/e1/summary.json"] = key
    rec.outputs["checkpoint"] = "file:///elsewhere/ckpt"  # a URL: its own manifest checks it
    rec.outputs["local_checkpoint"] = "/elsewhere/ckpt"  # a local store's checkpoint folder
    manifest = rec.commit()
    data = rec.cs.store.read_bytes(key)
    assert manifest.files == {
        "envs/e1/summary.json": {
            "key": key,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    }
