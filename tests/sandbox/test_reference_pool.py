"""The reference's environments in the jail: the fixture pool verifies, its tool-use envs play
without importing their base, numpy runs, and numpy does not widen the jail."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import uuid
from fractions import Fraction
from pathlib import Path

import pytest

from spade.agent import EpisodeJob, RolloutSettings, run_episodes
from spade.config import InferenceConfig
from spade.inference.openai import OpenAIBackend
from spade.pysource import parse_module
from spade.records import FailureKind
from spade.sandbox import EnvFailure, JailedSession
from spade.testing.openai_server import FakeOpenAIServer
from spade.verify import verify_file
from spade.verify.static import import_violations, module_table
from tests.sandbox.attack_kit import REPO, with_changes

pytestmark = pytest.mark.sandbox

POOL = REPO / "tests" / "fixtures" / "reference_pool"
GAMES = POOL / "games"

# file -> (the check that fails, its failure kind, the start of its reason); None: accepted
EXPECTED: dict[str, tuple[str, FailureKind, str] | None] = {
    "game_file_organiser.py": None,
    "game_inventory_audit.py": None,
    "game_modular_chain.py": None,
    "game_matrix_walks.py": None,
    "game_fraction_sum.py": None,
    "game_fixed_lighthouses.py": (
        "seed_dependence",
        FailureKind.SEED_INDEPENDENT,
        "seeds 1234, 1235, 1236 all give the same first observation",
    ),
    "game_broken_ledger.py": (
        "class_found",
        FailureKind.CRASH,
        "AttributeError: 'BrokenLedgerEnv' object has no attribute 'opening_balance'",
    ),
}


def test_the_pool_is_laid_out_as_the_reference_lays_out_its_pools():
    games = sorted(p.name for p in GAMES.glob("game_*.py"))
    assert games == sorted(EXPECTED)
    manifest = [json.loads(line) for line in (POOL / "manifest.jsonl").read_text().splitlines()]
    assert sorted(Path(row["path"]).name for row in manifest) == games
    for row in manifest:
        assert hashlib.sha256((POOL / row["path"]).read_bytes()).hexdigest() == row["sha256"]
        assert row["game_id"] == Path(row["path"]).stem
    # checksums.sha256 is `sha256sum -c` input: "<hex>  <path relative to the pool>"
    listed = {}
    for line in (POOL / "checksums.sha256").read_text().splitlines():
        digest, path = line.split("  ", 1)
        listed[path] = digest
    assert set(listed) == {f"games/{g}" for g in games} | {"manifest.jsonl"}
    for path, digest in listed.items():
        assert hashlib.sha256((POOL / path).read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_fixture_gets_its_verdict_in_the_jail(name, policy):
    verdict = verify_file(GAMES / name, policy=policy)
    expected = EXPECTED[name]
    if expected is None:
        assert verdict.accepted, verdict.failure
        assert all(c.passed for c in verdict.checks) and verdict.checks[-1].name == "novelty"
        return
    check, kind, reason = expected
    assert verdict.failure is not None and verdict.failure.kind is kind
    assert verdict.failure.reason.startswith(reason)
    failed = [c.name for c in verdict.checks if not c.passed]
    assert failed == [check] and verdict.checks[-1].name == check  # the only one, and it stops


def _play_solution(session: JailedSession, seed: int) -> tuple[str, list[tuple]]:
    first, _ = session.reset(seed)
    return first, [session.step(action) for action in session.solution()]


def test_a_reference_tool_use_env_plays_without_importing_its_base(policy):
    code = (GAMES / "game_file_organiser.py").read_text()
    assert "import ToolUseBaseEnv" not in code
    with JailedSession(code, policy=policy, env_kwargs={"max_turns": 25}) as s:
        assert s.info is not None and s.info.tool_use and s.info.class_name == "FileOrganiserEnv"
        assert {t["function"]["name"] for t in s.tools()} == {
            "pwd",
            "ls",
            "cd",
            "mkdir",
            "mv",
            "rm",
        }
        first, steps = _play_solution(s, 5)
    assert first.startswith("Open the ") and "project folder" in first
    assert "[STEP 1 DONE. NEXT] Make a folder called 'archive' in it." in steps[0][0]
    assert "[ALL STEPS DONE]" in steps[-2][0]
    assert steps[-1][1:4] == (1.0, True, False)


def _opened_without(policy, game: str, modules: tuple[str, ...]):
    """The failure of opening ``game`` in a jail whose allow-list lacks ``modules``."""
    allow = [a for a in policy.imports.allow if a not in modules]
    code = (GAMES / f"{game}.py").read_text()
    with (
        pytest.raises(EnvFailure) as exc,
        JailedSession(code, policy=with_changes(policy, allow=allow)),
    ):
        pass
    return exc.value.failure


def test_without_the_compat_binding_it_fails_as_it_did_before(policy):
    # A policy that does not allow spade.envs binds none of it: the reference's design meets
    # the NameError every reference tool-use environment met before the compat module.
    failure = _opened_without(policy, "game_file_organiser", ("spade.envs", "tool_use_base_env"))
    assert failure.kind is FailureKind.CRASH
    assert failure.reason == "NameError: name 'ToolUseBaseEnv' is not defined"


def test_numpy_runs_in_the_jail_and_its_scalars_reach_the_host_as_numbers(policy):
    code = (GAMES / "game_matrix_walks.py").read_text()
    with JailedSession(code, policy=policy) as s:
        first, steps = _play_solution(s, 11)
        (answer,) = s.solution()
    assert first.startswith("A directed graph on nodes 0..") and "->" in first
    assert answer.startswith("\\boxed{") and int(answer[7:-1]) > 150  # np.int64 became an int
    assert steps == [("Correct!", 1.0, True, False, {})]


def test_math_verify_judges_equivalent_answers_in_the_jail(policy):
    code = (GAMES / "game_fraction_sum.py").read_text()
    with JailedSession(code, policy=policy) as s:
        s.reset(4)
        (unreduced,) = s.solution()
        num, den = (int(x) for x in unreduced.removeprefix("\\boxed{").removesuffix("}").split("/"))
        lowest = Fraction(num, den)
        assert lowest.denominator != den  # the fixture's answer is not in lowest terms
        replies = []
        for answer in (
            f"{lowest.numerator}/{lowest.denominator}",
            f"\\frac{{{lowest.numerator}}}{{{lowest.denominator}}}",
            f"{lowest.numerator + 1}/{lowest.denominator}",
        ):
            s.reset(4)
            replies.append(s.step("\\boxed{" + answer + "}")[:3])
    assert replies == [("Correct!", 1.0, True), ("Correct!", 1.0, True), ("Wrong.", 0.0, False)]


def test_numpy_outside_the_allow_list_is_an_import_denial(policy):
    failure = _opened_without(policy, "game_matrix_walks", ("numpy",))
    assert failure.kind is FailureKind.IMPORT_DENIED


# numpy hands a design file I/O (fromfile, save) and ctypes (ctypeslib.load_library): the
# policy's checks do not stop these, so the jail must. Each step reports what happened.
NUMPY_ESCAPES = """
import numpy as np


class NumpyEscapeEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        kind, _, arg = action.partition(" ")
        try:
            if kind == "read":
                out = "read " + np.fromfile(arg, dtype=np.uint8)[:40].tobytes().decode("latin-1")
            elif kind == "write":
                np.save(arg, np.arange(3))
                out = "wrote " + str(np.load(arg).sum())
            else:
                libc_dir, port, marker = arg.split(" ")
                libc = np.ctypeslib.load_library("libc.so.6", libc_dir)
                rc = libc.system(("echo escaped > " + marker).encode())
                fd = libc.socket(2, 1, 0)
                addr = np.zeros(16, dtype=np.uint8)
                addr[:8] = [2, 0, int(port) >> 8, int(port) & 255, 127, 0, 0, 1]
                connected = libc.connect(fd, addr.ctypes._as_parameter_, 16)
                out = "libc system=%d connect=%d" % (rc, connected)
        except Exception as exc:
            out = "%s: %s" % (type(exc).__name__, exc)
        return out, 0.0, False, False, {}

    def solution(self):
        return ["read /dev/null"]
"""


def _libc_dir() -> str:
    for d in ("/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64"):
        if (Path(d) / "libc.so.6").exists():
            return d
    pytest.skip("no libc.so.6 in a known directory")


def test_numpy_does_not_widen_the_jail(policy, tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except TimeoutError:  # nobody yet: look again until the test ends
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    marker = tmp_path / f"escaped-{uuid.uuid4().hex}"
    jail_tmp_name = f"np-{uuid.uuid4().hex}.npy"
    try:
        with JailedSession(NUMPY_ESCAPES, policy=policy) as s:
            s.reset(0)
            shadow = s.step("read /etc/shadow")[0]
            checkout = s.step(f"read {REPO / 'pyproject.toml'}")[0]
            outside = s.step(f"write {tmp_path / 'out.npy'}")[0]
            code_dir = s.step("write /code/pwn.npy")[0]
            private = s.step(f"write /tmp/{jail_tmp_name}")[0]
            libc = s.step(f"libc {_libc_dir()} {port} {marker}")[0]
    finally:
        stop.set()
        thread.join()
        listener.close()
    for out in (shadow, checkout, outside, code_dir):
        assert out.startswith(("FileNotFoundError", "OSError", "PermissionError")), out
    assert private == "wrote 3"  # the jail's own tmpfs works ...
    assert not (Path("/tmp") / jail_tmp_name).exists()  # ... and is not the host's /tmp
    assert not (tmp_path / "out.npy").exists() and not marker.exists()
    system_rc, connect_rc = (int(part.split("=")[1]) for part in libc.split()[1:])
    assert libc.startswith("libc ") and system_rc != 0 and connect_rc == -1, libc
    assert accepted == []


def test_numpy_holds_ctypes_and_both_layers_deny_it(policy):
    code = NUMPY_ESCAPES.replace(
        'elif kind == "write":',
        'elif kind == "ctypes":\n                out = str(np.ctypeslib.ctypes)\n            elif kind == "write":',
    )
    assert import_violations(parse_module(code), policy.imports, module_table(policy)) == [
        "numpy.ctypeslib.ctypes (line 18): the module 'ctypes', not allowed"
    ]
    with JailedSession(code, policy=policy) as s:
        s.reset(0)
        with pytest.raises(EnvFailure) as exc:
            s.step("ctypes")
    assert exc.value.failure.kind is FailureKind.IMPORT_DENIED
    assert exc.value.failure.reason == "imports outside the allow-list: numpy.ctypeslib.ctypes"


def test_rollouts_play_a_reference_env_through_our_contract(policy):
    code = (GAMES / "game_file_organiser.py").read_text()
    with JailedSession(code, policy=policy) as s:
        s.reset(9)
        actions = s.solution()

    def reply(body: dict) -> str:  # the reference play, one action per assistant turn
        done = sum(m["role"] == "assistant" for m in body["messages"])
        return actions[done]

    async def go(server: FakeOpenAIServer) -> list:
        cfg = InferenceConfig(backend="openai", base_url=server.url, max_retries=0)
        backend = OpenAIBackend(cfg, server.model)
        try:
            job = EpisodeJob("organiser", code, 9, hint="cd first", tool_use=True)
            return await run_episodes(backend, [job], RolloutSettings(), policy=policy)
        finally:
            await backend.aclose()

    with FakeOpenAIServer(script=reply) as server:
        (t,) = asyncio.run(go(server))
        first = next(r.body for r in server.requests if r.path.endswith("/chat/completions"))
    assert {tool["function"]["name"] for tool in first["tools"]} == {
        "pwd", "ls", "cd", "mkdir", "mv", "rm"
    }  # fmt: skip
    assert first["messages"][1]["content"].endswith("\n\nHINT: cd first")
    assert t.status == "terminated" and len(t.turns) == len(actions)
    assert t.episode_return() == 1.0
