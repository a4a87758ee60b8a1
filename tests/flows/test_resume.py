"""Killing a campaign mid-round (SIGKILL, while its environments are being played) and resuming
it loses nothing and duplicates nothing in the object store; a stage whose code changed is
recomputed, one whose code did not comes back from the cache.

Both runs use the checked-in sandbox policy with roomy wall-clock limits: the comparison needs
the same verdicts and plays from both. On a loaded machine (two suites on 2 cores) the
uninterrupted run once made 3 agent requests against the resume's 83: the same three designs
accepted, each evaluation over after ~17 s, no agent update; most likely the 15 s jail start
limit failed its plays."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from flows.campaign import campaign_flow
from spade.config import load_config
from spade.pipeline import keys
from spade.pipeline.campaign import round_complete
from spade.pipeline.record import campaign_store
from spade.testing.openai_server import FakeOpenAIServer
from spade.testing.scripted_designer import (
    ScriptedModel,
    round_overrides,
    tiny_policy_overrides,
    write_corpus,
    write_tiny_policy,
)
from tests.integration.prefect_live import REPO_ROOT

pytestmark = pytest.mark.sandbox
CID = "killed"
RUN_KEY = "SPADE_RESUME_TEST_RUN"  # the killed child sends its value as its API key


def _roomy_sandbox(path: Path) -> Path:
    """The checked-in sandbox policy with wall-clock limits no load reaches (what it checks is
    not how fast a jail starts)."""
    policy = yaml.safe_load((REPO_ROOT / "infra" / "sandbox.yaml").read_text())
    policy["limits"] |= {"start_timeout_s": 300, "call_timeout_s": 120}
    path.write_text(yaml.safe_dump(policy))
    return path


def _config(server, tmp_path, root):
    tmp_path.mkdir(parents=True, exist_ok=True)
    overrides = round_overrides(server, write_corpus(tmp_path / "corpus.jsonl"))
    return load_config(
        overrides={
            **overrides,
            "name": "resume",
            "storage.root": str(root),
            "inference.api_key_env": RUN_KEY,
            "run.rounds": 2,  # the killed run asks for 1: its resume must not run a second
            # one file for both runs (both roots are in the test's folder)
            "sandbox.policy_path": str(_roomy_sandbox(root.parent / "sandbox.yaml")),
            **tiny_policy_overrides(write_tiny_policy(tmp_path / "policy")),
        }
    )


def _kinds(server, killed: bool = False) -> dict[str, int]:
    """Requests the stand-in answered, by role (designer, hint writer, agent), of the killed
    child (``killed``: sent with its API key) or of this process. Told apart by the key, not by
    when they were counted: a request the child sent whole just before the SIGKILL can be read
    from the socket after the kill (a loaded machine), and was once counted as the resume's."""
    out = {"design": 0, "hint": 0, "play": 0}
    for r in server.requests:
        if r.path != "/v1/chat/completions" or not isinstance(r.body, dict):
            continue  # a body the SIGKILL tore mid-send is refused (400), not answered
        auth = {k.lower(): v for k, v in r.headers.items()}.get("authorization")
        if (auth == "Bearer killed") != killed:
            continue
        system = r.body["messages"][0].get("content") or ""
        kind = "design" if system.startswith("You write correct") else "play"
        out["hint" if system.startswith("You coach") else kind] += 1
    return out


def _campaign_keys(cfg) -> set[str]:
    return set(campaign_store(cfg, CID).store.list(""))


request_cleanup: list[Path] = []


@pytest.fixture(autouse=True)
def _remove_private_tmp():
    yield
    while request_cleanup:
        shutil.rmtree(request_cleanup.pop(), ignore_errors=True)


def _kill_during_evaluate(cfg, api_url: str, tmp_path) -> dict[str, tuple[int, int]]:
    config_file = tmp_path / "config.json"
    config_file.write_text(cfg.model_dump_json())
    # a SIGKILL leaves its jails' session folders behind: the child keeps them in a private,
    # world-traversable TMPDIR (like /tmp) that this test removes
    private_tmp = Path(tempfile.mkdtemp(prefix="spade-killed-"))
    private_tmp.chmod(0o755)
    request_cleanup.append(private_tmp)
    env = {
        **os.environ,
        "PREFECT_API_URL": api_url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "TMPDIR": str(private_tmp),
        RUN_KEY: "killed",
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.flows.resume_driver", str(config_file), CID, "1"],
        cwd=REPO_ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cs = campaign_store(cfg, CID)
    summaries = cs.layout.stage_prefix(0, "evaluate") + "/envs"
    deadline = time.monotonic() + 240
    try:  # kill as soon as the first play is stored (plays are stored as they finish)
        while not any("/plays/" in k for k in cs.store.list(summaries)):
            assert child.poll() is None, f"the campaign ended early ({child.returncode})"
            assert time.monotonic() < deadline, "evaluate never started"
            time.sleep(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert "evaluate" not in cs.completed_stages(0)
    return _stored_plays(cs)


def _stored_plays(cs) -> dict[str, tuple[int, int]]:
    """Each stored play's key and file identity (inode, mtime): an object written again (an
    atomic replace) gets a new one."""
    keys = [k for k in cs.store.list(cs.layout.stage_prefix(0, "evaluate")) if "/plays/" in k]
    stats = {k: Path(cs.store.root_path, k).stat() for k in keys}
    return {k: (st.st_ino, st.st_mtime_ns) for k, st in stats.items()}


def test_sigkill_mid_round_then_resume(prefect_api, tmp_path, monkeypatch):
    monkeypatch.delenv(RUN_KEY, raising=False)  # this process's requests carry no key
    with FakeOpenAIServer(script=ScriptedModel()) as server:
        cfg = _config(server, tmp_path, tmp_path / "store")
        stored = _kill_during_evaluate(cfg, prefect_api, tmp_path)
        # the hint stage's code "changed" (one more module in its closure); design's did not
        monkeypatch.setitem(
            keys.STAGE_ENTRIES,
            "hint",
            (*keys.STAGE_ENTRIES["hint"], "spade.scoring.outcomes:score"),
        )
        keys.clear_caches()
        # a resume (no round count given) continues what the killed run was asked for: 1 round,
        # not the config's 2
        status = asyncio.run(campaign_flow(config=cfg, campaign_id=CID))
        killed, resumed = _kinds(server, killed=True), _kinds(server)
    assert round_complete(campaign_store(cfg, CID), 0)
    assert campaign_store(cfg, CID).rounds() == [0] and status["target_rounds"] == 1
    assert killed["design"] > 0 and resumed["design"] == 0  # cached: not asked again
    assert killed["hint"] > 0 and resumed["hint"] > 0  # its code changed: recomputed
    # the plays stored before the kill were reused, untouched, the others played: the kill can
    # come after the last play was stored (a fast machine), then the resume plays nothing
    every_play = _stored_plays(campaign_store(cfg, CID))
    assert stored and stored.items() <= every_play.items()
    if stored.keys() < every_play.keys():
        assert resumed["play"] > 0
    else:
        assert resumed["play"] == 0

    # the same round, uninterrupted, in a fresh store: exactly the same objects
    monkeypatch.undo()
    keys.clear_caches()
    with FakeOpenAIServer(script=ScriptedModel()) as server:
        clean = _config(server, tmp_path / "clean", tmp_path / "clean-store")
        asyncio.run(campaign_flow(config=clean, campaign_id=CID, rounds=1))
        clean_plays = _kinds(server)["play"]
    assert resumed["play"] < clean_plays  # finished plays were not played again
    resumed_keys, clean_keys = _campaign_keys(cfg), _campaign_keys(clean)
    results = [k for k in resumed_keys if k.startswith("prefect-results/")]
    clean_results = [k for k in clean_keys if k.startswith("prefect-results/")]
    assert {k for k in resumed_keys if not k.startswith("prefect-results/")} == {
        k for k in clean_keys if not k.startswith("prefect-results/")
    }
    # one result per cached task run; the killed run's leftovers were reused, not duplicated
    # (the hint stage's recomputation added its new records)
    assert len(results) <= len(clean_results) + 2
