"""Task results are JSON naming only our own types: every kind a task returns round-trips, a
record naming another class or serializer is refused, and a pickle planted in the bucket is
never unpickled (the task runs again and overwrites it)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pickle
from pathlib import Path

import pytest
from prefect import flow, task

from flows.results import ResultSerializer, ResultsFolder, check_record
from flows.stages import PERSIST
from flows.storage import result_storage
from spade.config import load_config
from spade.designer.corpus import Document
from spade.errors import StorageError
from spade.pipeline.score import RoundScores
from spade.pipeline.train import TrainOutcome
from spade.records import (
    CheckResult,
    DesignAttempt,
    EnvEvaluation,
    EnvSpec,
    Failure,
    FailureKind,
    Trajectory,
    Turn,
    Verdict,
    WeightsRef,
)
from spade.scoring.outcomes import ScoredAttempt
from spade.scoring.rewards import DesignOutcome


def _examples() -> list[object]:
    turn = Turn([1, 2], [3], [-0.5], "go", "go", "ok", 1.0, True, False, "stop", 0.1, 0.2)
    trajectory = Trajectory("env-1", 7, hinted=True, hint="h", turns=[turn], status="terminated")
    attempt = DesignAttempt(0, 1, "logic", "doc-1", [{"role": "user", "content": "x"}], code="c")
    weights = WeightsRef("r0000-agent", "file:///ckpt", "lora")
    outcome = DesignOutcome(
        env_id="env-1", skill="logic", valid=True, win_rate=0.5, regret=0.25, mean_return=0.5
    )
    return [
        EnvEvaluation(
            "env-1",
            "logic",
            [1.0],
            [0.0, 1.0],
            0.5,
            1.0,
            0.5,
            0,
            [trajectory],
            paired_regret=0.5,
            paired_regret_interval=[0.0, 1.0],
            paired_instances=1,
        ),
        EnvSpec("env-1", "class E: ...", "logic", None, tool_use=True, source="pool"),
        attempt,
        (
            [attempt],
            [2, 3],
        ),  # settle's pair (comes back as a list)
        Verdict(
            checks=[CheckResult("parse", False, "bad", "syntax")],
            failure=Failure(FailureKind.CRASH, "boom"),
            solution=["a"],
        ),
        Document("doc-1", "text"),
        weights,
        TrainOutcome(weights, {"loss": 0.5, "steps": 1}, 4),
        RoundScores([ScoredAttempt(attempt, outcome, 0.1, 0.2, -0.5)], {"logic": 0.5}),
        {"memory": {"records": []}, "n": None},
        None,
    ]


def test_every_result_kind_round_trips_as_json():
    serializer = ResultSerializer()
    for value in _examples():
        blob = serializer.dumps(value)
        json.loads(blob)  # plain JSON
        back = serializer.loads(blob)
        expected = list(value) if isinstance(value, tuple) else value
        assert back == expected, type(value)


@pytest.mark.attack
def test_a_result_naming_another_class_is_refused_before_import():
    serializer = ResultSerializer()
    planted = json.dumps({"__class__": "os.system", "data": "touch /tmp/pwned"}).encode()
    with pytest.raises(ValueError, match=r"names class 'os\.system'"):
        serializer.loads(planted)
    nested = json.dumps([{"__class__": "subprocess.Popen", "data": {"args": ["id"]}}]).encode()
    with pytest.raises(ValueError, match=r"subprocess\.Popen"):
        serializer.loads(nested)
    # a foreign exception type comes back as text, without importing its module
    exc = serializer.loads(json.dumps({"__exc_type__": "evil.Boom", "message": "m"}).encode())
    assert isinstance(exc, RuntimeError) and str(exc) == "evil.Boom: m"
    # the record cannot swap in another JSON library or decoder: they are not read from it
    fields = ResultSerializer.model_validate({"type": "spade-json", "jsonlib": "pickle"})
    assert fields.loads(b"[1]") == [1]


class _Planted:
    """What an attacker's pickle runs when it is loaded: it writes a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path(self.marker).write_text, ("pwned",))


def _pickle_record(marker: Path) -> bytes:
    payload = base64.b64encode(pickle.dumps(_Planted(str(marker)))).decode()
    return json.dumps(
        {
            "metadata": {"serializer": {"type": "pickle", "picklelib": "pickle"}},
            "result": payload,
        }
    ).encode()


@pytest.mark.attack
def test_a_pickle_record_is_refused_by_the_results_storage(tmp_path):
    marker = tmp_path / "marker"
    with pytest.raises(StorageError, match="names serializer 'pickle'; only 'spade-json'"):
        check_record(_pickle_record(marker), "prefect-results/k")
    folder = ResultsFolder(basepath=str(tmp_path))
    (tmp_path / "k").write_bytes(_pickle_record(marker))
    with pytest.raises(StorageError, match="pickle"):
        folder.read_path("k", _sync=True)  # type: ignore[call-arg]
    assert not marker.exists()


@pytest.mark.attack
def test_a_planted_pickle_in_the_bucket_is_never_unpickled(prefect_api, tmp_path):
    """A cached task's record replaced by a pickle: the resume recomputes, the pickle never
    runs, and the record is JSON again."""
    cfg = load_config(overrides={"storage.root": str(tmp_path / "store")})
    marker = tmp_path / "marker"
    calls: list[int] = []

    @task(cache_key_fn=lambda *_: "planted-key", **PERSIST)
    def compute(x: int) -> WeightsRef:
        calls.append(x)
        return WeightsRef(f"v{x}")

    @flow
    async def run() -> WeightsRef:
        storage = await result_storage(cfg)
        return compute.with_options(result_storage=storage)(3)

    assert asyncio.run(run()) == WeightsRef("v3") and calls == [3]
    assert asyncio.run(run()) == WeightsRef("v3") and calls == [3]  # cached
    record = tmp_path / "store" / "prefect-results" / "planted-key"
    assert json.loads(record.read_bytes())["metadata"]["serializer"]["type"] == "spade-json"
    record.write_bytes(_pickle_record(marker))
    assert asyncio.run(run()) == WeightsRef("v3") and calls == [3, 3]  # recomputed
    assert not marker.exists()
    assert json.loads(record.read_bytes())["metadata"]["serializer"]["type"] == "spade-json"
    assert os.path.getsize(record) > 0
