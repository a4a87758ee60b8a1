"""The reasoning-gym held-out suite: seeded hard-split items as jailed one-answer environments,
scored on the host by reasoning-gym's own scorers, which must never evaluate the agent's text.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from spade.benchmarks.base import HeldoutTask, get_suite, task_header
from spade.benchmarks.reasoning_gym import DEFAULT_DATASETS, REFUSED, SAFE_DATASETS, SUITE
from spade.config import HeldoutSuiteConfig
from spade.envs import extract_boxed
from spade.records import Status, Trajectory, Turn
from tests.benchmarks.scripted import gold_actions, play_scripted, play_shipped_model

NONSENSE = "\\boxed{zzz not an answer}"
# The longest gold answers (Tower of Hanoi, up to 10 disks) run to ~30k characters; the stand-in
# counts one token per character.
LONG_REPLIES = {"evaluation.max_tokens_per_turn": 40_000, "model.max_context_tokens": 65_536}


def config(size: int, seed: int, subsets: list[str] | None = None) -> HeldoutSuiteConfig:
    return HeldoutSuiteConfig(name="reasoning_gym", size=size, seed=seed, subsets=subsets or [])


def played(task: HeldoutTask, reply: str, status: Status = "terminated") -> Trajectory:
    """A one-turn play of ``task`` whose agent replied ``reply`` (what score() reads)."""
    action = "\\boxed{" + b + "}" if (b := extract_boxed(reply)) is not None else reply
    turn = Turn([], [], [], reply, action, "Answer recorded.", 0.0, True, False, "stop", 0.0, 0.0)
    return Trajectory(task.env_id, 0, False, turns=[turn], status=status)


def test_suite_is_registered_and_one_turn():
    assert get_suite("reasoning_gym") is SUITE
    assert SUITE.name == "reasoning_gym" and SUITE.default_max_turns == 1


def test_defaults_span_categories_and_are_all_audited():
    import reasoning_gym

    categories = set()
    for name in DEFAULT_DATASETS:
        assert name in SAFE_DATASETS and name not in REFUSED
        module = reasoning_gym.factory.DATASETS[name][0].__module__
        categories.add(module.split(".")[1])  # reasoning_gym.<category>.<dataset>
    assert {"arithmetic", "algebra", "logic", "algorithmic", "games"} <= categories
    for name, (why, hard) in SAFE_DATASETS.items():
        assert name in reasoning_gym.factory.DATASETS and why and hard, name
    assert not set(SAFE_DATASETS) & set(REFUSED)
    assert set(REFUSED) <= set(reasoning_gym.factory.DATASETS)  # the names are real ones


def test_unknown_and_unsafe_datasets_are_refused():
    with pytest.raises(ValueError, match=r"'nope'.*Valid datasets: .*basic_arithmetic"):
        SUITE.tasks(2, 0, ["nope"])
    with pytest.raises(ValueError, match=r"'countdown': .*parse_expr"):
        SUITE.tasks(2, 0, ["maze", "countdown"])
    with pytest.raises(ValueError, match=r"'n_queens': .*eval"):
        SUITE.tasks(1, 0, ["n_queens"])
    # A task forged for an unaudited dataset is refused before its scorer sees the answer.
    (real,) = SUITE.tasks(1, 0, ["basic_arithmetic"])
    forged = HeldoutTask(
        "reasoning_gym", "x", real.code, meta={**real.meta, "dataset": "countdown"}
    )
    with pytest.raises(ValueError, match="countdown"):
        SUITE.score(forged, played(forged, "\\boxed{__import__('os').system('true')}"))


def test_subset_is_deterministic_per_seed_and_spread_over_datasets():
    first = SUITE.tasks(14, 7, [])
    again = SUITE.tasks(14, 7, [])
    assert [(t.task_id, t.code, t.gold) for t in first] == [
        (t.task_id, t.code, t.gold) for t in again
    ]
    assert [t.meta["dataset"] for t in first] == [*DEFAULT_DATASETS, *DEFAULT_DATASETS[:2]]
    assert len({t.env_id for t in first}) == 14
    other = SUITE.tasks(14, 8, [])
    assert all(a.code != b.code for a, b in zip(first, other, strict=True))
    # Explicit subsets, repeats ignored; a smaller size is a prefix per dataset.
    picked = SUITE.tasks(5, 7, ["maze", "gcd", "maze"])
    assert [t.meta["dataset"] for t in picked] == ["maze", "gcd"] * 2 + ["maze"]
    assert [t.meta["index"] for t in picked] == [0, 0, 1, 1, 2]
    assert picked[0].code == next(t.code for t in first if t.meta["dataset"] == "maze")


def test_every_task_opens_with_its_header_and_boxes_its_gold():
    for task in SUITE.tasks(len(SAFE_DATASETS), 2, list(SAFE_DATASETS)):
        entry = task.meta["entry"]
        assert task.gold == ("\\boxed{" + entry["answer"] + "}",)
        assert extract_boxed(task.gold[0]) == entry["answer"].strip()  # braces survive
        tree = ast.parse(task.code)  # read, not run: the code runs only in the jail
        literals = {
            target.id: ast.literal_eval(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        prompt = literals["PROMPT"]
        assert prompt.split("\n", 1)[0] == task_header("reasoning_gym", task.task_id)
        assert entry["question"].strip() in prompt and "\\boxed{...}" in prompt
        assert literals["GOLD"] == entry["answer"]
        imports = [
            (n.module, [a.name for a in n.names])
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom)
        ]
        assert imports == [("spade.envs", ["TextEnv"])]
        assert not any(isinstance(n, ast.Import) for n in ast.walk(tree))


def test_host_scoring_uses_reasoning_gym_on_every_audited_dataset():
    """Gold scores 1, nonsense 0, no answer 0, and an unfinished play 0, per dataset."""
    for task in SUITE.tasks(len(SAFE_DATASETS), 3, list(SAFE_DATASETS)):
        name = task.meta["dataset"]
        assert SUITE.score(task, played(task, "So: " + task.gold[0])) == 1.0, name
        assert SUITE.score(task, played(task, NONSENSE)) == 0.0, name
        assert SUITE.score(task, played(task, "no box here")) == 0.0, name
        assert SUITE.score(task, played(task, task.gold[0], status="truncated")) == 0.0, name
    # The scorer, not the gold string, decides: an equal decimal with a trailing zero counts.
    (dec,) = SUITE.tasks(1, 3, ["decimal_arithmetic"])
    assert SUITE.score(dec, played(dec, "\\boxed{" + dec.meta["entry"]["answer"] + "0}")) == 1.0


# Scores hostile answers on every audited dataset with an audit hook that records any
# compile/exec (how eval, exec and sympy's parse_expr run text as code). Countdown, whose
# scorer uses parse_expr, is the positive control. In a subprocess: audit hooks cannot be removed.
_AUDIT_SCRIPT = """
import copy, json, sys
from spade.benchmarks.reasoning_gym import SAFE_DATASETS, SUITE, _dataset
seen, watching = [], [False]
def hook(event, args):
    if watching[0] and event in ("compile", "exec", "os.system", "subprocess.Popen"):
        seen.append(event)
sys.addaudithook(hook)
HOSTILE = ["__import__('os').system('true')", "1+1", "[[1, 2], [3, 4]]", "x**2 + C",
           "(lambda: 0)()", "A=1,B=2", "Move disk 1 from Peg 1 to Peg 3", "9" * 5000]
report = {}
for task in SUITE.tasks(len(SAFE_DATASETS), 4, list(SAFE_DATASETS)):
    m = task.meta
    ds = _dataset(m["dataset"], m["seed"], m["size"])
    ds.score_answer(m["entry"]["answer"], copy.deepcopy(m["entry"]))  # lazy imports first
    seen.clear()
    watching[0] = True
    for answer in HOSTILE:
        try:
            ds.score_answer(answer, copy.deepcopy(m["entry"]))
        except Exception:  # a crash is a wrong answer (score() maps it to 0); running code is not
            pass
    watching[0] = False
    report[m["dataset"]] = sorted(set(seen))
import reasoning_gym
control = reasoning_gym.create_dataset("countdown", size=1, seed=0)
watching[0] = True
seen.clear()
control.score_answer("1+1", control[0])
report["countdown (control)"] = sorted(set(seen))
print(json.dumps(report))
"""


def test_audited_scorers_never_compile_or_exec_the_answer():
    out = subprocess.run(
        [sys.executable, "-c", _AUDIT_SCRIPT], capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report.pop("countdown (control)"), "the audit hook failed to see parse_expr"
    assert set(report) == set(SAFE_DATASETS)
    assert {name: events for name, events in report.items() if events} == {}


@pytest.mark.sandbox
def test_perfect_policy_scores_one_on_every_default_dataset():
    tasks = SUITE.tasks(12, 5, [])
    result = play_scripted(config(12, 5), gold_actions(tasks), **LONG_REPLIES)
    assert [r["task_id"] for r in result.rows] == [t.task_id for t in tasks]
    assert {t.meta["dataset"] for t in tasks} == set(DEFAULT_DATASETS)
    assert [(r["score"], r["status"], r["failure"]) for r in result.rows] == [
        (1.0, "terminated", None)
    ] * 12
    assert result.score == 1.0


@pytest.mark.sandbox
def test_wrong_or_missing_answers_score_zero_and_equivalents_count():
    tasks = SUITE.tasks(6, 9, [])
    replies = {t.env_id: [NONSENSE] for t in tasks}
    replies[tasks[0].env_id] = ["I would rather not say."]  # no \boxed{}: the turn runs out
    dec = next(t for t in tasks if t.meta["dataset"] == "decimal_arithmetic")
    replies[dec.env_id] = ["\\boxed{" + dec.meta["entry"]["answer"] + "0}"]  # gold string + "0"
    result = play_scripted(config(6, 9), replies)
    scores = {r["task_id"]: r["score"] for r in result.rows}
    assert scores.pop(dec.task_id) == 1.0  # the env's exact match says 0; the scorer says 1
    assert set(scores.values()) == {0.0}
    assert result.rows[0]["status"] == "truncated"
    assert all(r["failure"] is None for r in result.rows)


@pytest.fixture
def one_torch_thread():
    """On a small shared CPU box torch's intra-op threads oversubscribe (seen here: 64 tokens
    in 150 s with 2 threads under load, 15 s with 1); one thread keeps the play bounded."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.sandbox
def test_smollm2_plays_two_items(smol_env, one_torch_thread):
    result = play_shipped_model(config(2, 0), **{"evaluation.max_tokens_per_turn": 64})
    assert len(result.rows) == 2 and len(result.transcripts) == 2
    assert all(0.0 <= r["score"] <= 1.0 and r["turns"] == 1 for r in result.rows)
    assert all(r["failure"] is None for r in result.rows)
    assert 0.0 <= result.score <= 1.0
