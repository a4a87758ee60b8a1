"""Joining design attempts with evaluations (``spade.scoring.outcomes``): pool environments are played
but never scored for the designer; an attempt's novelty and repair as the score stage records."""

from __future__ import annotations

import pytest

from spade.config import ScoringConfig
from spade.records import DesignAttempt, EnvEvaluation
from spade.scoring.outcomes import design_flags, memory_records, outcomes, score


def _attempt(slot: int, *, accepted: bool, env_id: str | None = None, **more: object):
    return DesignAttempt(
        slot=slot,
        attempt=0,
        skill="logic",
        doc_id="d",
        messages=[],
        code="class AEnv: ...\n" if env_id else None,
        env_id=env_id,
        accepted=accepted,
        **({"failure_kind": None if accepted else "parse"} | more),  # type: ignore[arg-type]
    )


def _evaluation(env_id: str, win: float, regret: float, source: str = "designed"):
    """Four unhinted plays that won (return 1) or lost (0) at rate ``win``."""
    wins = round(4 * win)
    unhinted = [1.0] * wins + [0.0] * (4 - wins)
    return EnvEvaluation(env_id, "logic", [], unhinted, win, None, regret, 0, source=source)  # type: ignore[arg-type]


def test_pool_evaluations_are_not_the_designers():
    copy = _attempt(1, accepted=False, failure_kind="duplicate")
    attempts = [_attempt(0, accepted=True, env_id="env-a"), copy]
    evaluations = [_evaluation("env-a", 0.5, 0.15), _evaluation("env-p", 0.0, 1.0, "pool")]
    config = ScoringConfig(rejected_reward="graded")
    scored, ema = score(attempts, evaluations, config)
    # raw: blend(0.5, 0.15) = 1.0 and a copy -1.0; centred within logic: +1.0, -1.0
    assert [s.raw_reward for s in scored] == pytest.approx([1.0, -1.0])
    assert [s.reward for s in scored] == pytest.approx([1.0, -1.0])
    assert ema == pytest.approx({"logic": 0.5})  # the pool environment's win rate is not in it
    records = memory_records(attempts, evaluations, round_index=3)
    assert [r.env_id for r in records] == ["env-a"]  # pool environments stay out of memory


def test_design_flags_read_the_verdict_and_the_repair():
    novel_check = {"checks": [{"name": "novelty", "passed": True, "reason": "closest 0.4"}]}
    plain = _attempt(0, accepted=True, env_id="env-a", verdict={"checks": []})
    assert design_flags(plain) == {"novel": None, "repaired": False}  # no novelty check ran
    novel = _attempt(0, accepted=True, env_id="env-a", verdict=novel_check)
    assert design_flags(novel)["novel"] is True
    copy = {"checks": [{"name": "novelty", "passed": False, "reason": "a copy"}]}
    assert design_flags(_attempt(0, accepted=False, env_id="env-b", verdict=copy))["novel"] is False
    repaired = _attempt(
        0,
        accepted=True,
        env_id="env-c",
        verdict=novel_check,
        repair_messages=[
            {"role": "user", "content": "it failed"},
            {"role": "assistant", "content": "fixed"},
        ],
    )
    assert design_flags(repaired) == {"novel": True, "repaired": True}


def test_rejected_designs_carry_the_verifiers_progress_into_their_reward():
    """Two crashes of one round, at different depths: graded rewards tell them apart."""
    early = _attempt(0, accepted=False, failure_kind="crash", verdict={"progress": 0.25})
    late = _attempt(1, accepted=False, failure_kind="crash", verdict={"progress": 0.75})
    unparsed = _attempt(2, accepted=False)  # no verdict: no progress
    scored, _ = score([early, late, unparsed], [], ScoringConfig(rejected_reward="graded"))
    assert [s.outcome.progress for s in scored] == [0.25, 0.75, 0.0]
    # -(7 - 5 - 0.5 * progress) / 7 for the crashes, -6/7 for no code
    assert [s.raw_reward for s in scored] == pytest.approx([-1.875 / 7, -1.625 / 7, -6 / 7])


def test_two_cut_off_answers_differ_by_how_much_of_their_code_parses():
    """A round whose two answers both ran out of tokens still updates the designer."""
    env = "import re\n\n\nclass AEnv:\n    def f(self):\n        return 1\n"
    tail = _attempt(0, accepted=False, completion=f"```python\n{env}\nprint(AEnv().f(\n")
    mid = _attempt(1, accepted=False, completion="```python\n" + env.replace("1\n", "(1\n"))
    scored, _ = score([tail, mid], [], ScoringConfig(rejected_reward="graded"))
    assert scored[0].outcome.progress > scored[1].outcome.progress > 0.0
    assert scored[0].reward > 0.0 > scored[1].reward  # centred: non-zero advantages


def test_attempts_that_failed_on_our_side_are_left_out_of_rewards_and_memory():
    """An outage is no design: the others score as if it was never asked for."""
    good = _attempt(0, accepted=True, env_id="env-a")
    copy = _attempt(1, accepted=False, failure_kind="duplicate")
    outage = _attempt(2, accepted=False, failure_kind="inference", failure_reason="500")
    assert outage.failed and not good.failed and not copy.failed
    evaluations = [_evaluation("env-a", 0.5, 0.15)]
    config = ScoringConfig(rejected_reward="graded")
    with_outage, ema = score([good, outage, copy], evaluations, config)
    without, ema_without = score([good, copy], evaluations, config)
    assert [s.attempt for s in with_outage] == [good, copy]
    assert (
        [s.reward for s in with_outage] == [s.reward for s in without] == pytest.approx([1.0, -1.0])
    )
    assert ema == ema_without
    assert memory_records([good, outage, copy], evaluations, 0) == memory_records(
        [good, copy], evaluations, 0
    )
    with pytest.raises(ValueError, match="failed on the inference side"):
        outcomes([outage], [])


def test_a_designs_plateau_is_on_its_unhinted_mean_return():
    """Partial credit: every unhinted play ended at 0.5, so no play won (win rate 0) and the
    mean return is mid-plateau; the blend's plateau reads the mean (the reference's)."""
    partial = EnvEvaluation("env-a", "logic", [0.5] * 4, [0.5] * 4, 0.0, 0.0, 0.0, 0)
    attempt = _attempt(0, accepted=True, env_id="env-a")
    (scored,), _ = score([attempt], [partial], ScoringConfig(centre_per_skill=False))
    assert scored.outcome.mean_return == 0.5 and scored.outcome.win_rate == 0.0
    assert scored.raw_reward == pytest.approx(ScoringConfig().plateau_weight)


def test_memory_records_keep_the_mean_return_and_the_parent():
    spliced = _attempt(0, accepted=True, env_id="env-a", parent_id="number_hunt")
    written = _attempt(1, accepted=True, env_id="env-b")
    evaluations = [_evaluation("env-a", 0.25, 0.1), _evaluation("env-b", 0.0, 0.0)]
    a, b = memory_records([spliced, written], evaluations, round_index=2)
    assert (a.mean_return, a.parent_id) == (0.25, "number_hunt")  # one win in four plays
    assert (b.mean_return, b.parent_id) == (0.0, None)
    unplayed = EnvEvaluation("env-a", "logic", [], [], 0.0, None, 0.0, 0)  # type: ignore[arg-type]
    assert memory_records([spliced], [unplayed], 2)[0].mean_return is None


def test_player_checks_are_the_reasons_of_the_checks_a_player_meets_in_order():
    from spade.scoring.outcomes import player_checks

    checks = [
        {"name": "novelty", "passed": True, "reason": "closest 0.4"},
        {"name": "feasibility", "passed": True, "reason": "won"},
        {"name": "leaks_answer", "passed": True, "reason": "no reader wins"},
    ]
    att = _attempt(0, accepted=True, env_id="env-a", verdict={"checks": checks})
    assert player_checks(att) == {"leaks_answer": "no reader wins", "novelty": "closest 0.4"}
    assert list(player_checks(att)) == ["leaks_answer", "novelty"]  # PLAYER_CHECKS' order
    assert player_checks(_attempt(1, accepted=False)) == {}
