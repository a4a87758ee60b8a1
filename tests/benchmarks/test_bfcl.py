"""The BFCL v4 multi-turn held-out suite (spade/benchmarks/bfcl*.py).

The environments run in the jail (tests marked ``sandbox``) and are played through the real
rollout, sandbox and scoring code, by scripted policies (the OpenAI stand-in) or SmolLM2. Their
verdicts are compared with bfcl-eval's own ``multi_turn_checker`` run on the host, which
``eval``s call strings: only ones built here from bfcl-eval's ground truth, never model text.
"""

from __future__ import annotations

import ast
import json
import random
import re
import subprocess
import uuid
from typing import Any

import pytest
from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
    multi_turn_checker,
    response_checker,
    state_checker,
)
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

from spade.benchmarks import bfcl_runtime
from spade.benchmarks.base import get_suite
from spade.benchmarks.bfcl import DEFAULT_MAX_TURNS, SUITE, entry_task, ground_truth
from spade.benchmarks.bfcl_data import CATEGORIES, api_source, load_entries
from spade.benchmarks.bfcl_mpmath import MpmathShim
from spade.benchmarks.bfcl_runtime import (
    execute_call,
    gold_replies,
    method_table,
    missing_results,
    state_mismatch,
    tool_call_text,
)
from spade.config import HeldoutSuiteConfig
from spade.sandbox.policy import load_policy
from spade.sandbox.session import JailedSession
from tests.benchmarks.scripted import gold_actions, play_scripted, play_shipped_model

SC = HeldoutSuiteConfig(name="bfcl_multi_turn", size=4, seed=0)
API_CLASSES = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)


def call_string(name: str, args: dict[str, Any]) -> str:
    """A call as BFCL's decoder writes a model's function call (``name(k=repr(v),...)``)."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in args.items())})"


def bfcl_verdict(entry: dict[str, Any], turns: list[list[tuple[str, dict[str, Any]]]]) -> bool:
    """bfcl-eval's verdict on a play making ``turns`` (one step per turn with calls)."""
    decoded = [[[call_string(n, a) for n, a in turn]] if turn else [] for turn in turns]
    model = f"spade_test_{uuid.uuid4().hex}"  # BFCL caches instances per model name and entry
    return multi_turn_checker(decoded, entry["ground_truth"], entry, "", model)["valid"]


def replies(turns: list[list[tuple[str, dict[str, Any]]]]) -> list[str]:
    """The replies making ``turns``: each turn's calls in one reply, then an answer."""
    return gold_replies(turns)


RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


def play_in_jail(code: str, actions: list[str]) -> tuple[float, list[str]]:
    """The play's reward and every tool response shown, in order."""
    shown: list[str] = []
    with JailedSession(code, policy=load_policy(), env_kwargs={"max_turns": 40}) as session:
        session.reset(0)
        for action in actions:
            observation, reward, terminated, truncated, _ = session.step(action)
            shown += RESPONSE.findall(observation)
            if terminated or truncated:
                return reward, shown
    return 0.0, shown


def variants(truth: list[list[tuple[str, dict[str, Any]]]]) -> dict[str, list[list[Any]]]:
    """The ground truth, and plays that deviate from it in its first turn with calls."""
    k = next(i for i, turn in enumerate(truth) if turn)

    def change(turn: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
        return [*truth[:k], turn, *truth[k + 1 :]]

    out = {
        "gold": truth,
        "skip": change([]),
        "drop_last": change(truth[k][:-1]),
        "repeat": change(truth[k] + truth[k]),
        "reverse": change(truth[k][::-1]),
    }
    for j, (name, args) in enumerate(truth[k]):
        key = next((key for key, value in args.items() if isinstance(value, str)), None)
        if key is not None:
            wrong = (name, {**args, key: "spade_wrong"})
            out["wrong_arg"] = change([*truth[k][:j], wrong, *truth[k][j + 1 :]])
            break
    return out


def test_subsets_are_seeded_and_validated():
    first = SUITE.tasks(4, 0, [])
    assert [t.task_id for t in first] == [t.task_id for t in SUITE.tasks(4, 0, ["base"])]
    assert first == SUITE.tasks(4, 0, ["multi_turn_base"])  # code and gold too
    assert [t.task_id for t in SUITE.tasks(4, 1, [])] != [t.task_id for t in first]
    assert len(SUITE.tasks(10_000, 0, [])) == 200
    both = SUITE.tasks(10_000, 0, ["miss_param", "multi_turn_base", "base"])
    assert len(both) == 400 and len({t.task_id for t in both}) == 400
    with pytest.raises(ValueError, match="valid: multi_turn_base"):
        SUITE.tasks(1, 0, ["composite"])
    assert get_suite("bfcl_multi_turn") is SUITE and SUITE.default_max_turns == DEFAULT_MAX_TURNS


def test_every_entry_becomes_a_task_whose_gold_fits():
    for category in CATEGORIES:
        for task in SUITE.tasks(10_000, 0, [category]):
            assert task.tool_use and task.env_id == f"bfcl_multi_turn/{task.task_id}"
            assert len(task.gold) <= DEFAULT_MAX_TURNS
            assert task.gold[-1] == "<answer>done</answer>"
            assert f"[task bfcl_multi_turn/{task.task_id}]" in task.code


def test_api_sources_only_import_what_the_jail_allows():
    policy = load_policy().imports
    for class_name in API_CLASSES:
        source, _, _ = api_source(class_name)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                assert all(policy.allows(a.name) for a in node.names), class_name
            elif isinstance(node, ast.ImportFrom):
                assert node.module and policy.allows(node.module), class_name


def test_task_code_compiles_under_the_jails_python():
    task = SUITE.tasks(1, 0, ["long_context"])[0]
    done = subprocess.run(
        ["/usr/bin/python3.11", "-c", "import sys; compile(sys.stdin.read(), 'env.py', 'exec')"],
        input=task.code,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_runtime_constants_are_bfcls():
    assert bfcl_runtime.MAXIMUM_STEP_LIMIT == MAXIMUM_STEP_LIMIT
    assert "kill" in bfcl_runtime.BLOCKED_CALLS and len(bfcl_runtime.BLOCKED_CALLS) == 8


def test_mpmath_stand_in_prints_what_mpmath_prints():
    mpmath = pytest.importorskip("mpmath")
    rng = random.Random(0)
    cases = [(20, 10, 2), (3287.0, 6.0, 4), (36.0, 6.0, 4), (630.0, 10, 5), (980.0, 20, 10)]
    for _ in range(300):
        value = rng.choice(
            [rng.randint(2, 10**6), rng.uniform(1e-9, 1e6), 10 ** rng.randint(-20, 30)]
        )
        cases.append(
            (value, rng.choice([2, 10, 6.0, rng.uniform(1.1, 100), 0.5]), rng.randint(1, 40))
        )
    for value, base, precision in cases:
        mpmath.mp.dps = precision
        shim = MpmathShim()
        shim.mp.dps = precision
        expected = repr(mpmath.log(value) / mpmath.log(base))
        assert repr(shim.log(value) / shim.log(base)) == expected, (value, base, precision)


def test_embedded_checks_agree_with_bfcl_on_bfcl_instances():
    """The runtime's dispatch, rendering, state and response checks, on instances BFCL built
    and drove itself (host only; the calls are bfcl-eval's ground truth and fixed strings)."""
    entry = load_entries("multi_turn_base")[0]  # GorillaFileSystem + TwitterAPI
    config, involved = entry["initial_config"], entry["involved_classes"]

    def run(calls: list[str]) -> tuple[list[str], dict[str, Any]]:
        model = f"spade_test_{uuid.uuid4().hex}"
        return execute_multi_turn_func_call(calls, config, involved, model, entry["id"])

    truth_results, truth = run(entry["ground_truth"][0])
    same_results, same = run(entry["ground_truth"][0])
    other_results, other = run(["cd(folder='document')", "mkdir(dir_name='tmp')"])
    for model_instances in (same, other):
        agree = state_checker(model_instances, truth)["valid"]
        assert agree == (state_mismatch(model_instances, truth) is None)
    assert state_mismatch(same, truth) is None
    assert state_mismatch(other, truth) == ("GorillaFileSystem", ["root"])
    for model_results in (same_results, other_results, []):
        agree = response_checker(model_results, truth_results, 0)["valid"]
        assert agree == (not missing_results(model_results, truth_results))
    # Dispatch and rendering: the runtime's results on fresh BFCL instances are BFCL's.
    _, fresh = run([])
    table = method_table(fresh)
    calls = [*ground_truth(entry)[0], ("cd", {"nope": 1}), ("no_such_tool", {}), ("kill", {})]
    ours = [execute_call(table, name, args) for name, args in calls]
    theirs, _ = run([call_string(n, a) for n, a in calls])
    assert ours == theirs


@pytest.mark.sandbox
def test_gold_scores_one_and_wrong_plays_score_zero():
    tasks = SUITE.tasks(SC.size, SC.seed, SC.subsets)
    assert len({c for t in tasks for c in t.meta["involved_classes"]}) >= 4
    gold = play_scripted(SC, gold_actions(tasks))
    assert [r["score"] for r in gold.rows] == [1.0] * len(tasks), gold.rows
    assert all(r["status"] == "terminated" and r["failure"] is None for r in gold.rows)
    assert all(r["turns"] == len(t.gold) for r, t in zip(gold.rows, tasks, strict=True))
    first = gold.transcripts[0]["messages"]
    assert first[1]["content"].startswith(f"[task bfcl_multi_turn/{tasks[0].task_id}]\n")
    assert "<tool_response>" in first[3]["content"]

    quitter = play_scripted(SC, {t.env_id: ["<answer>done</answer>"] for t in tasks})
    assert [r["score"] for r in quitter.rows] == [0.0] * len(tasks)
    assert all(r["failure"] is None for r in quitter.rows), quitter.rows  # scored, not failed

    def wrong_argument(task: Any) -> list[str]:
        """The gold play with the first string argument of its first call changed."""
        actions = list(task.gold)
        i = next(i for i, a in enumerate(actions) if a.startswith("<tool_call>"))
        bodies = re.findall(r"<tool_call>(.*?)</tool_call>", actions[i])
        for j, body in enumerate(bodies):
            call = json.loads(body)
            key = next((k for k, v in call["arguments"].items() if isinstance(v, str)), None)
            if key is not None:
                call["arguments"][key] = "spade_wrong"
                bodies[j] = json.dumps(call)
                break
        actions[i] = "\n".join(f"<tool_call>{b}</tool_call>" for b in bodies)
        assert actions[i] != task.gold[i]
        return actions

    wrong = play_scripted(SC, {t.env_id: wrong_argument(t) for t in tasks})
    assert [r["score"] for r in wrong.rows] == [0.0] * len(tasks)
    assert all(r["failure"] is None for r in wrong.rows), wrong.rows


@pytest.mark.sandbox
def test_other_categories_gold_scores_one():
    sc = HeldoutSuiteConfig(
        name="bfcl_multi_turn", size=6, seed=1, subsets=["miss_func", "miss_param", "long_context"]
    )
    tasks = SUITE.tasks(sc.size, sc.seed, sc.subsets)
    assert {t.meta["category"] for t in tasks} == set(CATEGORIES[1:])
    result = play_scripted(sc, gold_actions(tasks))
    assert [r["score"] for r in result.rows] == [1.0] * len(tasks), result.rows
    for task, transcript in zip(tasks, result.transcripts, strict=True):
        if task.meta["category"] == "multi_turn_miss_func":  # the withheld function's turn
            texts = [m["content"] for m in transcript["messages"] if m["role"] == "user"]
            assert any("I have updated some more functions" in t for t in texts)


@pytest.mark.sandbox
def test_results_read_as_bfcl_records_them():
    """What the agent reads is BFCL's result text, mpmath's digits included: the ground truth
    of this entry writes the logarithm's printed digits into a file."""
    entry = load_entries("multi_turn_long_context")[32]
    first, second = entry["ground_truth"]
    assert second[-1] == "echo(content='4.51947',file_name='result.txt')"
    model = f"spade_test_{uuid.uuid4().hex}"
    config, involved = entry["initial_config"], entry["involved_classes"]
    results, _ = execute_multi_turn_func_call(
        first + second, config, involved, model, entry["id"], long_context=True
    )
    assert results[len(first)] == "{'result': mpf('4.51947')}"
    task = entry_task(entry, "multi_turn_long_context")
    assert play_in_jail(task.code, list(task.gold))[1] == results


@pytest.mark.sandbox
def test_a_reply_shows_a_bounded_amount_of_results():
    """30 long-context transaction histories (~84k characters each) in one reply stay far
    below the jail's 1 MB message limit; the session lives on."""
    entries = load_entries("multi_turn_long_context")
    entry = next(e for e in entries if e["involved_classes"] == ["TradingBot"])
    task = entry_task(entry, "multi_turn_long_context")
    call = tool_call_text("get_transaction_history", {})
    with JailedSession(task.code, policy=load_policy(), env_kwargs={"max_turns": 40}) as session:
        session.reset(0)
        assert len(session.step(call)[0]) > 80_000
        observation, _, terminated, _, _ = session.step("\n".join([call] * 30))
        assert observation.count("<tool_response>") == 30 and observation.endswith(
            "[cut]\n</tool_response>"
        )
        assert len(observation) < bfcl_runtime.MAX_SHOWN_CHARS + 2_000 and not terminated
        assert session.step("<answer>done</answer>")[0].startswith("Request 1 was not carried out")


@pytest.mark.sandbox
def test_env_verdicts_agree_with_bfcl_multi_turn_checker():
    """Gold and deviating plays of entries covering every API class and category: the jailed
    environment's reward is 1.0 exactly when bfcl-eval's checker accepts the same calls, and
    the gold play reads the results BFCL's execution returns. (Not guaranteed for every entry:
    the jail's Python 3.11 sums floats without 3.12's compensation, so one MathAPI result in
    multi_turn_base_47 differs in its last digit from a 3.12 host's.)"""
    entries = [(e, "multi_turn_base") for e in load_entries("multi_turn_base")]
    chosen = {c: next(e for e in entries if c in e[0]["involved_classes"]) for c in API_CLASSES}
    picks = list({e[0]["id"]: e for e in chosen.values()}.values())
    picks += [(load_entries(c)[3], c) for c in CATEGORIES[1:]]
    verdicts = []
    for entry, category in picks:
        task = entry_task(entry, category)
        calls = [call for turn in entry["ground_truth"] for call in turn]
        model = f"spade_test_{uuid.uuid4().hex}"
        long_context = category == "multi_turn_long_context"
        config, involved = entry["initial_config"], entry["involved_classes"]
        results, _ = execute_multi_turn_func_call(
            calls, config, involved, model, entry["id"], long_context
        )
        for name, turns in variants(ground_truth(entry)).items():
            expected = bfcl_verdict(entry, turns)
            reward, shown = play_in_jail(task.code, replies(turns))
            assert reward == (1.0 if expected else 0.0), (entry["id"], name, expected)
            assert name != "gold" or shown == results, entry["id"]
            verdicts.append(expected)
    assert True in verdicts and False in verdicts and len(verdicts) >= 40


@pytest.mark.sandbox
def test_smollm2_plays_a_task_through_play_suite(smol_env):
    """The shipped model through the heldout stage's path. Greedy, so the play (and its time:
    one short reply per turn, 3 at most) does not vary from run to run."""
    sc = HeldoutSuiteConfig(name="bfcl_multi_turn", size=1, seed=6, max_turns=3)
    overrides = {"evaluation.max_tokens_per_turn": 64, "evaluation.temperature": 0.0}
    result = play_shipped_model(sc, **overrides)
    (row,) = result.rows  # the smallest tool list of the base set: TradingBot alone
    assert row["task_id"] == "multi_turn_base_146" and 0.0 <= row["score"] <= 1.0
    assert row["failure"] is None and 1 <= row["turns"] <= 3, row
    messages = result.transcripts[0]["messages"]
    assert messages[1]["content"].startswith("[task bfcl_multi_turn/multi_turn_base_146]\n")
    assert messages[2]["role"] == "assistant"
