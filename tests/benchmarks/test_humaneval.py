"""The HumanEval suite: code extraction, the seeded subset, the step/time guard, and plays in the
jail (scripted through the OpenAI stand-in, and once with the shipped SmolLM2)."""

from __future__ import annotations

import pytest

from spade.benchmarks import humaneval as he
from spade.benchmarks.base import get_suite, task_header
from spade.benchmarks.runner import SuiteResult
from spade.config import HeldoutSuiteConfig
from tests.benchmarks.scripted import gold_actions, play_scripted, play_shipped_model

# Canonical solutions that import (collections, math/random/copy, random/string with a helper
# from the prompt, re, hashlib) and the slowest one (HumanEval/75, ~4.5M loop ticks).
WITH_IMPORTS = ["HumanEval/26", "HumanEval/32", "HumanEval/38", "HumanEval/91", "HumanEval/162"]
SLOWEST = "HumanEval/75"
# The stand-in counts a token per character: room for the longest gold answer (~2,000).
ROOM = {"evaluation.max_tokens_per_turn": 4096}


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```\nDone."


def body_answer(task_id: str, body: str) -> str:
    """An answer made of the prompt (imports, stub, helpers) and ``body`` as the completion."""
    return fenced(he.problems()[task_id]["prompt"] + body)


def last_observation(result: SuiteResult, task_id: str) -> str:
    (messages,) = [t["messages"] for t in result.transcripts if t["task_id"] == task_id]
    return str(messages[-1]["content"])


def env_for(task_id: str, max_turns: int = 1) -> he.HumanEvalEnv:
    """The generated environment class, built on the host: only for trusted answers (the gold
    solutions and the hand-written wrong ones below)."""
    namespace: dict[str, object] = {"__name__": "design"}
    exec(compile(he.task(task_id).code, "env.py", "exec"), namespace)
    env = namespace["TaskEnv"]
    assert isinstance(env, type)
    instance: he.HumanEvalEnv = env(max_turns=max_turns)
    return instance


# -- host-side units -----------------------------------------------------------------------


def test_suite_is_registered_with_pass_at_1() -> None:
    suite = get_suite("humaneval")
    assert suite is he.SUITE and suite.name == "humaneval" and suite.default_max_turns == 1
    assert len(he.problems()) == 164


def test_extract_code_edge_cases() -> None:
    ep = "add"
    assert he.extract_code("I think the answer is x + y.", ep) is None  # no fence, no code
    bare = "def add(x, y):\n    return x + y\n"
    assert he.extract_code(bare, ep) == bare  # no fence, but the function itself
    several = (
        "```python\nimport math\n```\nthen\n```py\ndef add(x, y):\n    return x + y\n```\n"
        "Usage:\n```\nprint(add(1, 2))\n```"
    )
    assert he.extract_code(several, ep) == "def add(x, y):\n    return x + y\n"  # defines it
    no_def = "```\n    return 1\n```\n```python\n    return x + y\n```"
    assert he.extract_code(no_def, ep) == "    return x + y\n"  # else the last block
    cut = "```python\ndef add(x, y):\n    return x +"  # reply cut at the token limit
    assert he.extract_code(cut, ep) == "def add(x, y):\n    return x +"
    boxed = "\\boxed{def add(x, y):\n    return {0: x + y}[0]}"
    assert he.extract_code(boxed, ep) == "def add(x, y):\n    return {0: x + y}[0]\n"
    assert he.extract_code("\\boxed{```python\ndef add(x, y): return 3\n```}", ep) == (
        "def add(x, y): return 3\n"
    )


def test_a_whole_function_may_use_the_prompts_helpers() -> None:
    prompt = he.problems()["HumanEval/38"]["prompt"]
    whole = "def decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n"
    assert he.build_program(prompt, whole, "decode_cyclic") == prompt + "\n\n" + whole
    assert he.build_program(prompt, "    return s\n", "decode_cyclic") == prompt + "    return s\n"
    env = env_for("HumanEval/38")
    env.reset(seed=0)
    assert env.step(fenced(whole))[1:3] == (1.0, True)


def test_subset_is_seeded_and_subsets_name_tasks() -> None:
    first = [t.task_id for t in he.SUITE.tasks(5, 3, [])]
    assert first == [t.task_id for t in he.SUITE.tasks(5, 3, [])]
    assert first != [t.task_id for t in he.SUITE.tasks(5, 4, [])]
    assert len(set(first)) == 5 and first == sorted(first, key=lambda t: int(t.split("/")[1]))
    assert len(he.SUITE.tasks(1000, 0, [])) == 164
    named = he.SUITE.tasks(10, 0, ["HumanEval/7", "12", "7"])
    assert [t.task_id for t in named] == ["HumanEval/7", "HumanEval/12"]
    with pytest.raises(ValueError, match="HumanEval/999"):
        he.SUITE.tasks(1, 0, ["HumanEval/999"])


def test_every_gold_passes_and_wrong_bodies_fail() -> None:
    """All 164 problems on the host, with trusted code only: the observation starts with the
    task line, the canonical solution passes within the guard, a ``return None`` body fails."""
    for task in he.SUITE.tasks(164, 0, []):
        env = env_for(task.task_id)
        obs, _ = env.reset(seed=0)
        assert obs.startswith(task_header("humaneval", task.task_id) + "\n")
        assert task.gold == tuple(env.solution())
        obs, reward, terminated, truncated, _ = env.step(task.gold[0])
        assert (reward, terminated, truncated) == (1.0, True, False), (task.task_id, obs)
        env.reset(seed=0)
        obs, reward, terminated, _, _ = env.step(body_answer(task.task_id, "    return None\n"))
        assert (reward, terminated) == (0.0, True) and obs.startswith("The tests failed"), obs


def test_the_guard_ends_endless_loops_even_when_they_swallow_it() -> None:
    for program in (
        "while True:\n    pass\n",
        "def f():\n    return f() + f()\nwhile True:\n    try:\n        f()\n"
        "    except BaseException:\n        pass\n",
        "def spin():\n    n = 0\n    while True:\n        n += 1\n",
    ):
        error = he.run_check(program, "def check(c):\n    c()\n", "spin", 0.3)
        assert error is not None and error.startswith("timed out"), error  # it came back


def test_failure_summary_names_the_failing_assert_and_retries_are_offered() -> None:
    env = env_for("HumanEval/0", max_turns=2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(body_answer("HumanEval/0", "    return 1\n"))
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert "AssertionError at: assert candidate(" in obs and "answer again" in obs
    obs, reward, terminated, _, _ = env.step("no code this time")
    assert (reward, terminated) == (0.0, True) and "no code found" in obs
    env.reset(seed=0)
    obs, *_ = env.step(fenced("def has_close_elements(:\n"))
    assert "SyntaxError" in obs


# -- in the jail -----------------------------------------------------------------------------


@pytest.mark.sandbox
def test_gold_scores_one_on_a_seeded_subset() -> None:
    sc = HeldoutSuiteConfig(name="humaneval", size=5, seed=11)
    tasks = he.SUITE.tasks(5, 11, [])
    result = play_scripted(sc, gold_actions(tasks), **ROOM)
    assert [r["task_id"] for r in result.rows] == [t.task_id for t in tasks]
    assert all(r["score"] == 1.0 and r["failure"] is None for r in result.rows), result.rows
    assert result.score == 1.0


@pytest.mark.sandbox
def test_gold_with_imports_and_the_slowest_solution_pass_in_the_jail() -> None:
    names = [*WITH_IMPORTS, SLOWEST]
    sc = HeldoutSuiteConfig(name="humaneval", size=len(names), subsets=names)
    result = play_scripted(sc, gold_actions(he.SUITE.tasks(len(names), 0, names)), **ROOM)
    assert {r["task_id"] for r in result.rows} == set(names)
    assert all(r["score"] == 1.0 and r["status"] == "terminated" for r in result.rows), result.rows


@pytest.mark.sandbox
def test_wrong_answers_score_zero_and_only_the_jail_runs_them() -> None:
    answers = {
        "HumanEval/0": body_answer("HumanEval/0", "    return None\n"),
        "HumanEval/2": body_answer("HumanEval/2", "    while True:\n        pass\n"),
        "HumanEval/4": "I do not know how to write this.",
        # The agent's program is under the design's import guard: the session ends.
        "HumanEval/7": body_answer("HumanEval/7", "    import os\n    return os.listdir('/')\n"),
        # A hang in C code the step budget cannot reach: the jail's call timeout ends it.
        "HumanEval/13": body_answer("HumanEval/13", "    return sum(range(10**13))\n"),
    }
    sc = HeldoutSuiteConfig(name="humaneval", size=len(answers), subsets=list(answers))
    result = play_scripted(sc, {f"humaneval/{k}": [v] for k, v in answers.items()}, **ROOM)
    rows = {r["task_id"]: r for r in result.rows}
    assert all(r["score"] == 0.0 for r in rows.values()) and result.score == 0.0
    for tid, needle in (
        ("HumanEval/0", "The tests failed"),
        ("HumanEval/2", "timed out"),
        ("HumanEval/4", "no code found"),
    ):
        assert rows[tid]["status"] == "terminated" and rows[tid]["failure"] is None
        assert needle in last_observation(result, tid)
    assert rows["HumanEval/7"]["status"] == "env_failed"
    assert rows["HumanEval/7"]["failure"]["kind"] == "import_denied"
    assert "os" in rows["HumanEval/7"]["failure"]["reason"]
    assert rows["HumanEval/13"]["status"] == "env_failed"
    assert rows["HumanEval/13"]["failure"]["kind"] == "timeout"


@pytest.mark.sandbox
@pytest.mark.slow  # the shipped model through play_suite: tests/benchmarks/test_reasoning_gym.py
def test_two_tasks_with_smollm2(smol_env) -> None:
    """The real path with the shipped 135M model on CPU: it completes and scores in [0, 1]."""
    sc = HeldoutSuiteConfig(name="humaneval", size=2, seed=0)
    result = play_shipped_model(sc, **{"evaluation.max_tokens_per_turn": 64})
    assert len(result.rows) == 2 and all(0.0 <= r["score"] <= 1.0 for r in result.rows)
    assert all(r["turns"] == 1 or r["failure"] is not None for r in result.rows), result.rows
    assert all(len(t["messages"]) >= 3 for t in result.transcripts)


@pytest.mark.sandbox
@pytest.mark.slow
def test_every_gold_passes_in_the_jail() -> None:
    """All 164 canonical solutions under the jail's import guard and Python 3.11 (~20 s).
    Retries absorb the stand-in's refused connections when 64 episodes ask at once."""
    sc = HeldoutSuiteConfig(name="humaneval", size=164)
    tasks = he.SUITE.tasks(164, 0, [])
    result = play_scripted(sc, gold_actions(tasks), **ROOM, **{"inference.max_retries": 3})
    assert len(result.rows) == 164
    assert [r for r in result.rows if r["score"] != 1.0] == []
