"""Shared fixtures: the bundled examples, and a host-leak check around the whole run."""

from __future__ import annotations

import atexit
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spade.envs.examples import example_paths
from spade.processes import free_port
from spade.sandbox.policy import SandboxPolicy, load_policy
from tests.leaks import HostSnapshot, own_leaks
from tests.prefect_db import configure_session, seeded_harness, unconfigure_session
from tests.xdist_schedule import ModuleScheduling, order


def pytest_configure(config: pytest.Config) -> None:
    configure_session()  # one migrated Prefect database for every worker (tests/prefect_db.py)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # one compute thread per worker (and its ranks and subprocesses): the workers already
        # fill the cores, and OpenMP threads of two workers spinning on two cores waste ~13%
        # (two torch-heavy modules side by side: 150 s of CPU, 131 s with one thread)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")


def pytest_unconfigure(config: pytest.Config) -> None:
    unconfigure_session()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest units first, by their measured seconds (``tests/xdist_schedule.py``): with
    ``-n``, the workers start on the long units; in one process it changes nothing but the
    order of the modules."""
    place = order([item.nodeid for item in items])
    items.sort(key=lambda item: place[item.nodeid])  # stable: a module's tests keep their order


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole modules as pytest-xdist's work units (``tests/xdist_schedule.py``)."""
    return ModuleScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def no_leftovers_after_suite(tmp_path_factory):
    """Every jail the suite starts must be gone at the end: processes, cgroups, mounts, dirs.

    The run's session folders live in a private TMPDIR, so jails of another run on this host
    (a second pytest, a benchmark, the demo) are told apart from ours (``own_leaks``); it is
    removed at exit unless something leaked (kept for a look). pytest's own tmp folders are
    placed before TMPDIR changes, under the system's temp folder, where pytest keeps only the
    last few runs' (inside the private TMPDIR every run's stayed: ~3.4 GB a run)."""
    tmp_path_factory.getbasetemp()
    root = Path(tempfile.mkdtemp(prefix="spade-tests-"))
    leaked: list[object] = []
    # at exit, after Prefect's test harness has removed its own temp folders in here (atexit
    # runs last-registered first, and the harness registers its cleanup after this)
    atexit.register(lambda: leaked or shutil.rmtree(root, ignore_errors=True))
    root.chmod(0o755)  # the jail's uid reads its session folder below it, as under /tmp
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(root))
        mp.setattr(tempfile, "tempdir", str(root))
        before = HostSnapshot.take()
        yield
        deadline = time.monotonic() + 5  # nsjail reaps and removes cgroups as it exits
        while (leaks := own_leaks(before, root)) and time.monotonic() < deadline:
            time.sleep(0.1)
    leaked.extend(leaks)  # kept for a look
    assert not leaks, leaks


@pytest.fixture(params=example_paths(), ids=lambda p: p.stem)
def example_path(request) -> Path:
    return request.param


@pytest.fixture(scope="session")
def policy() -> SandboxPolicy:
    """The sandbox policy in force (the checked-in one), loaded once: every jail names its
    policy, as a campaign passes its own. Tests change copies (``model_copy``), never it."""
    return load_policy()


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory) -> Path:
    """A tiny Llama policy folder (random weights, real tokenizer: ``write_tiny_policy``), made
    once per process: rounds and trainers load it and write their checkpoints elsewhere."""
    from spade.testing.scripted_designer import write_tiny_policy

    return write_tiny_policy(tmp_path_factory.mktemp("tiny-policy"))


@pytest.fixture(scope="session")
def smol_cache(pytestconfig, tmp_path_factory) -> Path:
    """Where the shipped SmolLM2 is converted once; it survives between runs in pytest's cache
    folder (the conversion takes ~30 s, a cached load ~0.3 s). A copy is keyed by the converter's
    code too (``converted_cache_dir``): after an edit to the converter the suite converts again."""
    cache = getattr(pytestconfig, "cache", None)
    return cache.mkdir("spade-models") if cache else tmp_path_factory.mktemp("spade-models")


@pytest.fixture
def smol_env(smol_cache, monkeypatch) -> Path:
    monkeypatch.setenv("SPADE_CACHE", str(smol_cache))
    return smol_cache


@pytest.fixture(scope="session")
def moto_endpoint():
    """A real S3 endpoint on loopback (moto's server), for the whole run."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@dataclass(frozen=True)
class S3Bucket:
    name: str
    client: Any  # boto3 S3 client on the endpoint
    endpoint: str
    storage_options: dict[str, Any]  # what fsspec/s3fs needs to reach it


@pytest.fixture
def s3_bucket(moto_endpoint, monkeypatch) -> S3Bucket:
    """A fresh bucket (no s3fs listing cache across tests) with dummy credentials."""
    import boto3

    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    name = f"spade-test-{random.randrange(10**9)}"
    client.create_bucket(Bucket=name)
    options = {"endpoint_url": moto_endpoint, "key": "testing", "secret": "testing"}
    return S3Bucket(name, client, moto_endpoint, options)


@pytest.fixture
def scripted_server():
    """The OpenAI stand-in answering as the scripted designer/hinter/agent."""
    from spade.testing.openai_server import FakeOpenAIServer
    from spade.testing.scripted_designer import ScriptedModel

    with FakeOpenAIServer(script=ScriptedModel()) as fake:
        yield fake


@pytest.fixture
def scripted_overrides(scripted_server, tmp_path) -> dict[str, object]:
    """Config overrides for a scripted round (see spade/testing/scripted_designer.py)."""
    from spade.testing.scripted_designer import round_overrides, write_corpus

    return round_overrides(scripted_server, write_corpus(tmp_path / "corpus.jsonl"))


@pytest.fixture(scope="session")
def prefect_server():
    """A temporary Prefect API (SQLite, started from a migrated copy: ``tests/prefect_db.py``)
    for this pytest process, one per xdist worker, started by the first module that asks for
    it; yields its URL. Analytics off: they make SQLite answer "database is locked". Tests
    tell their runs apart by id, never by counting what the server holds."""
    from prefect.settings import PREFECT_API_URL

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        with seeded_harness(startup_timeout=60):
            yield PREFECT_API_URL.value()


@pytest.fixture(scope="module")
def prefect_api(prefect_server, tmp_path_factory):
    """The process's temporary Prefect API (:func:`prefect_server`) for the requesting test
    module; yields its URL. Results of tasks run without a campaign's result storage go to the
    module's own folder, not ``~/.prefect/storage``: a record left there by another run with
    the same cache key (an earlier suite on this machine, an earlier module on this server)
    would answer a task the test means to run."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings

    storage = tmp_path_factory.mktemp("prefect-storage")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PREFECT_LOCAL_STORAGE_PATH", str(storage))  # and for child processes
        with temporary_settings(updates={PREFECT_LOCAL_STORAGE_PATH: storage}):
            yield prefect_server
