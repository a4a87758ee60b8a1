"""Attacks on the host around the jail (issue 12): what a design sends back over the channel,
and what it reaches past the import policy. The designs are ``attacks/host/*.py``.

The import allow-list and the static checks are defence in depth: ``object.__subclasses__()``
reaches the os module in four lines under the checked-in policy, and the jail is what contains
it. Whatever a design sends back, the host gets a classified failure, never an exception.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from spade.records import FailureKind
from spade.sandbox import JailedSession
from spade.sandbox.gym import SandboxedTextEnv
from spade.verify import verify
from tests.sandbox.attack_kit import (
    FAST_POLICY,
    assert_caller_healthy,
    attack,
    expect_failure,
    host_view,
    jailed,
)

K = FailureKind


def host_attack(name: str, **subs: object) -> str:
    return attack(f"host/{name}", **subs)


def host_traceback(output: str) -> bool:
    """Whether ``output`` holds a traceback through host code (ours or a library's), as
    opposed to the design's own traceback from inside the jail, which the CLI shows."""
    frames = [ln for ln in output.splitlines() if ln.strip().startswith('File "')]
    return any("/opt/spade/" not in ln and "/code/" not in ln for ln in frames)


# -- the channel: a design rewrites the jail server's encoder ---------------------------------


@pytest.mark.sandbox
@pytest.mark.attack
def test_a_reply_nested_100000_deep_is_a_protocol_failure_not_a_host_crash():
    """The design reaches the server's json module (past the checked-in policy) and nests its
    reply 100,000 deep; the host's json.loads raised RecursionError, caught by nothing."""
    with jailed(host_attack("swap_encoder", depth=100_000), FAST_POLICY) as session:
        failure = expect_failure(session.reset, 1)
        assert failure.failure.kind is K.PROTOCOL and failure.fatal
        assert "deeper than 64" in failure.failure.reason
        assert not session.alive
    assert_caller_healthy()


@pytest.mark.sandbox
@pytest.mark.attack
def test_verify_rejects_the_deep_reply_as_data():
    verdict = verify(host_attack("swap_encoder", depth=100_000), policy=FAST_POLICY)
    assert verdict.failure is not None and verdict.failure.kind is K.PROTOCOL
    assert verdict.failed_check == "reset_contract"
    passed = [c.name for c in verdict.checks if c.passed]
    assert "import_policy" in passed  # the static check does not see the walk: not a boundary


@pytest.mark.sandbox
@pytest.mark.attack
def test_env_check_prints_no_traceback_for_what_designs_did(tmp_path):
    """``spade env check`` on the deep reply and on reasons that are rich markup (``[/]``):
    both are verdicts in the table, and nothing prints a traceback."""
    deep = tmp_path / "deep_env.py"
    deep.write_text(host_attack("swap_encoder", depth=100_000))
    markup = tmp_path / "markup_env.py"
    markup.write_text(host_attack("markup_reason"))
    out = subprocess.run(
        [sys.executable, "-m", "spade.cli", "env", "check", str(deep), str(markup)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr and not host_traceback(
        out.stdout + out.stderr
    )
    assert "protocol" in out.stdout and "[/] closes nothing" in out.stdout
    assert "0/2 accepted" in out.stdout


# -- the import policy is not a boundary: the jail contains what the walk reaches -------------


@pytest.mark.sandbox
@pytest.mark.attack
def test_the_object_graph_walk_reaches_os_under_the_checked_in_policy():
    """The finding itself: with the runtime import guard on, the design holds the os module."""
    code = host_attack("reach_os_globals", harm="(lambda g: g['getcwd']())", path="/none")
    with jailed(code, FAST_POLICY) as s:
        obs, _ = s.reset(1)
    assert obs.startswith("reached os: /")


@pytest.mark.sandbox
@pytest.mark.attack
@pytest.mark.parametrize(
    ("harm", "kind"),
    [("read_shadow", K.FS_DENIED), ("write_outside", K.FS_DENIED), ("open_socket", K.NET_DENIED)],
)
def test_the_jail_contains_what_the_walk_reaches(harm, kind):
    target = Path(f"/spade-pwn-{uuid.uuid4().hex}")
    code = host_attack("reach_os_globals", harm=harm, path=target)
    with jailed(code, FAST_POLICY) as session:
        failure = expect_failure(session.reset, 1)
        seen = host_view(session, failure)
    assert failure.failure.kind is kind, failure.failure
    assert not target.exists()
    shadow = Path("/etc/shadow")
    if shadow.exists():
        first = shadow.read_text().split(":", 1)[0]  # "root": the first account's name
        assert f"{first}:" not in seen
    assert_caller_healthy()


# -- results of the wrong value during play ----------------------------------------------------


@pytest.mark.sandbox
@pytest.mark.attack
@pytest.mark.parametrize(
    ("reward", "says"),
    [("10**400", "outside"), ("float('nan')", "finite"), ("5.0", "outside [-1, 1]")],
)
def test_step_rewards_are_checked_on_every_reply(reward, says):
    with jailed(host_attack("bad_reward", reward=reward), FAST_POLICY) as session:
        session.reset(1)
        failure = expect_failure(session.step, "\\boxed{x}")
    assert failure.failure.kind is K.CONTRACT and says in failure.failure.reason


@pytest.mark.sandbox
@pytest.mark.attack
def test_the_reward_range_is_the_sessions():
    code = host_attack("bad_reward", reward="5.0")
    with JailedSession(code, policy=FAST_POLICY, reward_range=(-10.0, 10.0)) as session:
        session.reset(1)
        assert session.step("\\boxed{x}")[1] == 5.0


@pytest.mark.sandbox
@pytest.mark.attack
def test_gym_adapter_ends_the_episode_on_a_reward_out_of_range():
    env = SandboxedTextEnv(host_attack("bad_reward", reward="10**400"), policy=FAST_POLICY)
    try:
        env.reset(seed=1)
        obs, reward, terminated, truncated, info = env.step("\\boxed{x}")
    finally:
        env.close()
    assert (obs, reward, terminated, truncated) == ("", 0.0, False, True)
    assert info["failure"]["kind"] == "contract"


# -- tool schemas ------------------------------------------------------------------------------


@pytest.mark.sandbox
@pytest.mark.attack
def test_verify_rejects_a_tool_schema_that_is_not_json_schema():
    verdict = verify(host_attack("bad_tool_schema", calls=0), policy=FAST_POLICY)
    assert verdict.failure is not None and verdict.failure.kind is K.CONTRACT
    assert verdict.failed_check == "tool_schemas"
    assert (
        "'look'" in verdict.failure.reason and "not a valid JSON Schema" in verdict.failure.reason
    )


@pytest.mark.sandbox
@pytest.mark.attack
def test_schemas_are_checked_again_on_every_tools_reply():
    """Valid for the verifier's call, then not: the session rejects the later answer, so the
    agent's prompt is never built from it."""
    with jailed(host_attack("bad_tool_schema", calls=1), FAST_POLICY) as session:
        assert session.info is not None and session.info.tool_use
        assert session.tools()[0]["function"]["name"] == "look"
        failure = expect_failure(session.tools)
    assert failure.failure.kind is K.CONTRACT and not failure.fatal
    assert "not a valid JSON Schema" in failure.failure.reason


# -- host code that parses design source ------------------------------------------------------

ABSURD_NESTING = {
    "unary minus": "x = " + "-" * 100_000 + "1\n",  # MemoryError: the parser's stack overflows
    "not": "x = " + "not " * 100_000 + "1\n",
    "parentheses": "x = " + "(" * 300 + ")" * 300 + "\n",  # SyntaxError: too many nested
}


@pytest.mark.attack
@pytest.mark.parametrize("code", ABSURD_NESTING.values(), ids=ABSURD_NESTING.keys())
def test_host_parsers_of_design_source_survive_absurd_nesting(code):
    """They caught only (SyntaxError, ValueError); a design nested this deep raised MemoryError
    (or RecursionError) in the host. Now each gives its answer for code that does not parse."""
    from spade.curriculum.memory import read_declarations
    from spade.designer.inherit import inherit_missing
    from spade.designer.prompts import module_level_names

    design = 'skill = "spatial"\n' + code
    assert read_declarations(design) == {"skill": "spatial"}
    assert module_level_names(design) == []
    assert inherit_missing(design, "K = 1\n") == (design, [])
    assert inherit_missing("class XEnv:\n    k = K\n", design) == ("class XEnv:\n    k = K\n", [])


# -- the same checks during a rollout ---------------------------------------------------------


def _rollout(job, **settings):
    import asyncio

    from spade.agent import RolloutSettings, run_episodes
    from spade.config import InferenceConfig
    from spade.inference.openai import OpenAIBackend
    from spade.testing.openai_server import FakeOpenAIServer

    async def go(url: str, model: str):
        cfg = InferenceConfig(backend="openai", base_url=url, max_retries=0, request_timeout_s=5)
        backend = OpenAIBackend(cfg, model)
        try:
            return await run_episodes(
                backend, [job], RolloutSettings(**settings), policy=FAST_POLICY
            )
        finally:
            await backend.aclose()

    with FakeOpenAIServer(script=lambda r: "\\boxed{x}") as server:
        return asyncio.run(go(server.url, server.model))[0]


@pytest.mark.sandbox
@pytest.mark.attack
def test_rollout_checks_rewards_in_the_verifiers_range():
    from spade.agent import EpisodeJob

    job = EpisodeJob("r", host_attack("bad_reward", reward="5.0"), seed=1)
    failed = _rollout(job)
    assert failed.status == "env_failed" and failed.failure is not None
    assert failed.failure["kind"] == "contract" and "outside [-1, 1]" in failed.failure["reason"]
    played = _rollout(job, reward_range=(-10.0, 10.0))
    assert played.status == "terminated" and played.turns[-1].reward == 5.0


@pytest.mark.sandbox
@pytest.mark.attack
def test_rollout_of_a_bad_tool_schema_is_an_env_failure_not_a_crash():
    """The prompt was built from the schemas outside the rollout's try: AttributeError."""
    from spade.agent import EpisodeJob

    job = EpisodeJob("t", host_attack("bad_tool_schema", calls=0), seed=1, tool_use=True)
    traj = _rollout(job)
    assert traj.status == "env_failed" and traj.failure is not None
    assert traj.failure["kind"] == "contract" and "JSON Schema" in traj.failure["reason"]


@pytest.mark.sandbox
@pytest.mark.attack
@pytest.mark.parametrize(("seed", "shown"), [("1", "[/] closes nothing"), ("2", "[/] a step")])
def test_env_play_shows_design_text_as_plain_text(tmp_path, seed, shown):
    design = tmp_path / "markup_env.py"
    design.write_text(host_attack("markup_reason"))
    out = subprocess.run(
        [sys.executable, "-m", "spade.cli", "env", "play", str(design), "--seed", seed],
        capture_output=True,
        text=True,
        input="\\boxed{x}\n",
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert not host_traceback(out.stdout + out.stderr)  # the design's own one is shown
    assert "[/] [bold" in out.stdout and shown in out.stdout + out.stderr
    if seed == "2":
        assert "[/] an observation that closes nothing" in out.stdout
