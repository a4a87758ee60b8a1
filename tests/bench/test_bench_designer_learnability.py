"""The designer learnability check (bench/designer_learnability.py): its splits, reward and
test, and a ``--quick`` run end to end on the real chain (llama.cpp serving SmolLM2, splice
answers verified in the jail, a GRPO update of the designer, GGUF publishing)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from spade.config import CorpusConfig, ScoringConfig
from spade.designer.corpus import Corpus
from spade.inference.base import ChatRequest, Completion, SamplingParams
from spade.records import DesignAttempt
from tests.bench.runner import bench_module, run_bench


def _task() -> ModuleType:
    return bench_module("designer_learnability_task")


def test_the_held_out_split_shares_no_parent_pair_or_document_with_training():
    task = _task()
    corpus = Corpus.load(CorpusConfig(path="builtin:wiki"))
    train, held = task.documents(corpus, "train"), task.documents(corpus, "heldout")
    assert train and held and not {d.doc_id for d in train} & {d.doc_id for d in held}
    assert len(train) + len(held) == len(corpus)
    train_pairs = {(p, d) for p, _, d in task.pairs("train")}
    held_pairs = {(p, d) for p, _, d in task.pairs("heldout")}
    assert not {p for p, _ in train_pairs} & {p for p, _ in held_pairs}
    assert {d for _, d in train_pairs} == {d for _, d in held_pairs} == {"clue", "credit"}
    first = task.prompts(corpus, "heldout", 6, seed=0)
    assert first == task.prompts(corpus, "heldout", 6, seed=0)  # deterministic
    assert task.prompts(corpus, "heldout", 2, seed=0, start=4) == first[4:]
    assert {p.document.doc_id for p in first} <= {d.doc_id for d in held}
    assert {(p.parent, p.directive) for p in first} == held_pairs  # the pairs in turn


def test_the_documents_only_split_puts_every_parent_on_both_sides_and_no_document():
    task = _task()
    corpus = Corpus.load(CorpusConfig(path="builtin:wiki"))
    every = {(p, d) for side in ("train", "heldout") for p, _, d in task.pairs(side)}
    for side in ("train", "heldout"):
        assert {(p, d) for p, _, d in task.pairs(side, by="documents")} == every
    n = 2 * len(every)
    train = task.prompts(corpus, "train", n, seed=0, by="documents")
    held = task.prompts(corpus, "heldout", n, seed=0, by="documents")
    assert {(p.parent, p.directive) for p in held} == every  # every pair held out too
    assert not {p.document.doc_id for p in train} & {p.document.doc_id for p in held}
    assert task.prompts(corpus, "heldout", n, seed=0) != held  # the bench's own split differs
    with pytest.raises(ValueError, match="split by"):
        task.pairs("train", by="skills")


def _attempt(accepted: bool, kind: str | None, progress: float = 0.0) -> DesignAttempt:
    return DesignAttempt(
        slot=0,
        attempt=0,
        skill="s",
        doc_id="d",
        messages=[],
        accepted=accepted,
        failure_kind=kind,
        verdict={"progress": progress},
    )


def test_kept_designs_earn_1_and_rejections_the_campaigns_graded_reward():
    task, scoring = _task(), ScoringConfig(rejected_reward="graded")
    assert task.reward(_attempt(True, None), scoring) == 1.0
    crash, judged = _attempt(False, "crash", 0.5), _attempt(False, "leaks_answer")
    assert task.reward(crash, scoring) < task.reward(judged, scoring) < 0.0
    assert task.reward(_attempt(False, "syntax"), scoring) < task.reward(crash, scoring)
    assert not task.well_formed(_attempt(False, "contract")) and task.well_formed(crash)
    got = task.rates([_attempt(True, None), crash, _attempt(False, "syntax")])
    assert (got["n"], got["kept"], got["well_formed"]) == (3, 1, 2)
    assert got["kept_if_well_formed"] == 0.5


def test_copied_shares_count_the_answer_tokens_found_in_the_prompt_by_outcome():
    def att(kept: bool, prompt: list[int], tokens: list[int]) -> DesignAttempt:
        return DesignAttempt(slot=0, attempt=0, skill="s", doc_id="d", messages=[],
                             accepted=kept, prompt_token_ids=prompt, token_ids=tokens,
                             logprobs=[0.0] * len(tokens))  # fmt: skip

    parent = [1, 2, 3, 4]
    got = _task().copied_shares(
        [att(True, parent, [1, 2, 3, 9]), att(False, parent, [1, 2, 3, 4]),
         att(False, parent, [7, 8])], 3,
    )  # fmt: skip
    assert got == {"copied_kept": 0.75, "copied_rest": 4 / 6}
    assert _task().copied_shares([att(False, parent, [7])], 3)["copied_kept"] is None


def test_fisher_exact_is_the_two_sided_hypergeometric_test():
    task = _task()
    # 1 of 10 against 7 of 10: margins 8 kept of 20; the tables as or less likely than the seen
    tables = [a for a in range(0, 9) if math.comb(10, a) * math.comb(10, 8 - a) <= 10 * 120]
    want = sum(math.comb(10, a) * math.comb(10, 8 - a) for a in tables) / math.comb(20, 8)
    assert task.fisher_exact(1, 10, 7, 10) == pytest.approx(want)
    assert 0.015 < task.fisher_exact(1, 10, 7, 10) < 0.025  # the textbook value, 0.0198
    assert task.fisher_exact(3, 10, 3, 10) == pytest.approx(1.0)
    assert task.fisher_exact(0, 4, 0, 4) == 1.0


def test_mcnemar_exact_weighs_only_the_prompts_whose_outcome_changed():
    task = _task()
    # kept after only on 8 prompts, before only on 1, both on 5, neither on 10: the textbook
    # exact two-sided McNemar value, 2 * P(Binomial(9, 1/2) <= 1) = 20/512 = 0.039
    before = [False] * 8 + [True] + [True] * 5 + [False] * 10
    after = [True] * 8 + [False] + [True] * 5 + [False] * 10
    assert task.mcnemar_exact(before, after) == pytest.approx(20 / 512)
    assert task.mcnemar_exact(after, before) == pytest.approx(20 / 512)  # two-sided
    assert task.mcnemar_exact(before[:9], after[:9]) == pytest.approx(
        20 / 512
    )  # concordant: no say
    assert task.mcnemar_exact([True, False], [False, True]) == 1.0
    assert task.mcnemar_exact([True, True], [True, True]) == 1.0
    with pytest.raises(ValueError, match="length"):
        task.mcnemar_exact([True], [])


def test_mcnemar_power_is_the_rate_at_which_simulated_runs_find_a_rise():
    """The exact power against a simulation of the model it states (independent answers, kept
    with p0 before and p1 after, mcnemar_exact on the pairs, a rise at p < 0.05). 4000 runs:
    the simulated rate's standard error is at most 0.008, the tolerance 0.04 (5 of them)."""
    import random

    task, rng = _task(), random.Random(7)

    def simulated(n: int, p0: float, p1: float, runs: int = 4000) -> float:
        found = 0
        for _ in range(runs):
            before = [rng.random() < p0 for _ in range(n)]
            after = [rng.random() < p1 for _ in range(n)]
            found += sum(after) > sum(before) and task.mcnemar_exact(before, after) < 0.05
        return found / runs

    for n, p0, p1 in ((48, 0.15, 0.4), (24, 0.2, 0.6), (48, 0.2, 0.2)):
        assert task.mcnemar_power(n, p0, p1) == pytest.approx(simulated(n, p0, p1), abs=0.04)
    # an exact test's one-sided rejection rate under no change is at most alpha / 2
    assert task.mcnemar_power(48, 0.2, 0.2) <= 0.025
    assert task.mcnemar_power(10, 0.0, 0.0) == 0.0


def test_the_detectable_share_is_the_first_with_the_asked_power_and_falls_with_more_prompts():
    task = _task()
    share = task.detectable_share(48, 0.15)
    assert share is not None and 0.15 < share < 1.0
    assert task.mcnemar_power(48, 0.15, share) >= 0.8 > task.mcnemar_power(48, 0.15, share - 0.01)
    assert task.detectable_share(192, 0.15) < task.detectable_share(96, 0.15) < share
    assert task.detectable_share(2, 0.5) is None  # two prompts never reach p < 0.05


class _Asked:
    """The inference boundary: records the requests it is asked, answers each with ``ok``."""

    model_name = "recorded"

    def __init__(self) -> None:
        self.asked: list[ChatRequest] = []

    async def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        self.asked += requests
        return [Completion(text="ok") for _ in requests]

    def count_tokens(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> None:
        return None

    async def aclose(self) -> None:
        return None


def test_held_out_requests_are_seeded_by_what_they_ask_and_the_runs_seed():
    task = _task()
    a = ChatRequest([{"role": "user", "content": "a"}], SamplingParams(temperature=0.9))
    requests = [
        a,
        ChatRequest([{"role": "user", "content": "b"}]),
        dataclasses.replace(a, prefill="x"),
        a,
    ]
    asked, other = _Asked(), _Asked()
    asyncio.run(task.SeededBackend(asked, seed=0).complete(requests))
    asyncio.run(task.SeededBackend(other, seed=1).complete(requests[:1]))
    seeds = [r.params.seed for r in asked.asked]
    assert None not in seeds and seeds[0] == seeds[3] and len(set(seeds[:3])) == 3
    assert other.asked[0].params.seed != seeds[0]  # another run's seed, other draws
    assert asked.asked[0].params.temperature == 0.9 and asked.asked[2].prefill == "x"
    assert a.params.seed is None  # the caller's requests are not changed


@pytest.mark.slow  # ~2 min: a real update of SmolLM2 on verified splice answers, published
@pytest.mark.sandbox
@pytest.mark.timeout(900)  # the bench's own limit: beside two `make test` it took 8-10 min
def test_designer_learnability_quick_trains_publishes_and_scores_held_out_prompts(
    tmp_path: Path, smol_env: Path
) -> None:
    """One smoke run of the whole script: held-out points before and after one update, and the
    experiment flags reaching the update (copies masked, rejections flat)."""
    out = tmp_path / "designer_learnability.json"
    args = ("--quick", "--copy-mask", "positive", "--rejected", "flat")
    data = run_bench("designer_learnability.py", *args, out=out, timeout=900)
    points, steps = data["points"], data["steps"]
    assert [p["update"] for p in points] == [0, 1]
    for p in points:
        assert p["n"] + p["failed_requests"] == data["settings"]["heldout"] == len(p["outcomes"])
        for o in p["outcomes"]:  # each answer as it was judged: text, code taken, reason
            assert isinstance(o["answer"], str) and (o["kept"] or o["failed"] or o["reason"])
        assert 0 <= p["kept"] <= p["well_formed"] <= p["n"]
    assert [s["update"] for s in steps] == [1]
    step = steps[0]
    assert step["n"] == data["settings"]["prompts"] * data["settings"]["samples"]
    assert math.isfinite(step["mismatch_kl"]) and -1.0 <= step["reward"] <= 1.0
    assert step["shift_kl"] >= 0.0 and math.isfinite(step["shift_up"] + step["shift_down"])
    assert step["trained_tokens"] > 0
    flat = (step["kept"] - 0.5 * step["kinds"].get("timeout", 0)) / step["n"]  # the defaults'
    assert step["reward"] == pytest.approx(flat)  # 0 for a rejection, -0.5 for a timeout
    # every training answer as judged, by its prompt: what an update trained on can be read
    assert len(step["outcomes"]) == step["n"] + step["failed_requests"]
    assert {o["directive"] for o in step["outcomes"]} <= {"clue", "credit"}
    assert all(step[k] is None or 0.0 <= step[k] <= 1.0 for k in ("copied_kept", "copied_rest"))
    assert 0.0 <= data["p_value"] <= 1.0 and data["p_value"] == data["result"]["p_value"]
    pairs = [(b, a) for b, a in zip(*(p["outcomes"] for p in points), strict=True)
             if not (b["failed"] or a["failed"])]  # fmt: skip
    kept = [[b["kept"] for b, _ in pairs], [a["kept"] for _, a in pairs]]
    assert data["p_value"] == _task().mcnemar_exact(*kept)  # paired, failed requests left out
    assert 0.0 <= data["result"]["fisher_p"] <= 1.0
    assert data["result"]["paired"] == len(pairs)
    base_share = sum(kept[0]) / max(len(pairs), 1)
    want = _task().detectable_share(len(pairs), base_share) if pairs else None  # what a null
    assert data["result"]["detectable_share"] == want
    assert "partial" not in data  # the run's last write replaced the partial ones
    assert out.with_suffix(".png").stat().st_size > 0


def test_a_training_side_run_is_drawn_without_a_held_out_panel(tmp_path: Path) -> None:
    """``--heldout 0`` (no held-out point, so no p-value: ``main`` summarises only points):
    the figure still draws the updates. The script's whole run is the smoke test above."""
    bench = bench_module("designer_learnability")
    step = {"update": 1, "reward": -0.2, "kept_share": 0.25, "mismatch_kl": 1e-3, "shift_kl": 2e-3}
    bench.plot({"points": [], "steps": [step]}, tmp_path / "x.png")
    assert (tmp_path / "x.png").stat().st_size > 0


def test_prompt_centring_puts_each_prompts_answers_in_a_group_of_their_own():

    from spade.training.advantages import designer_estimator
    from spade.training.samples import assign_advantages, completion_sample

    task = _task()
    # one skill, two prompts (slots 0 and 1): prompt 0's answers score 1 and 0, prompt 1's 0, 0
    answers = [dataclasses.replace(_attempt(k, None), slot=s) for s, k in [(0, 1), (0, 0), (1, 0), (1, 0)]]  # fmt: skip
    rewards = [1.0, 0.0, 0.0, 0.0]
    for centre, want in [("prompt", [0.5, -0.5, 0.0, 0.0]), ("skill", [0.75, -0.25, -0.25, -0.25])]:
        grouped = task.grouped(answers, centre)
        samples = [
            completion_sample([1], [2], [-0.1], r, a.skill, unit=f"design{n}")
            for n, (a, r) in enumerate(zip(grouped, rewards, strict=True))
        ]
        assign_advantages(samples, designer_estimator(True))
        assert [s.advantage for s in samples] == want, centre
    assert [a.skill for a in answers] == ["s"] * 4  # the attempts themselves are not changed
    with pytest.raises(ValueError, match="centre"):
        task.grouped(answers, "batch")
