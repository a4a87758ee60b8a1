"""Which instances an evaluation plays (new ones each round, the same ones on a re-run, hinted
plays on the unhinted plays' instances) and the paired regret those pairs give."""

from __future__ import annotations

import pytest

from spade.agent.evaluate import _evaluation, evaluation_jobs, instance_seeds, reusable
from spade.config import load_config
from spade.records import EnvEvaluation, EnvSpec, Trajectory, Turn

ENV = EnvSpec("env-a", "class E: ...", "logic", "a hint")
OTHER = EnvSpec("env-b", "class F: ...", "logic", "another hint")


def _seeds(jobs, hinted: bool) -> list[int]:
    return [j.seed for j in jobs if (j.hint is not None) == hinted]


def test_each_round_plays_instances_of_its_own_and_a_rerun_the_same_ones():
    cfg = load_config()
    r0, r1 = evaluation_jobs([ENV], cfg, 0), evaluation_jobs([ENV], cfg, 1)
    assert not set(_seeds(r0, False)) & set(_seeds(r1, False))  # fixed seeds 0..7 before
    # a resume or retry (in another process: a config loaded again) plays the same instances
    assert evaluation_jobs([ENV], load_config(), 0) == r0
    # other environments, campaign seeds and evaluation seeds draw other instances
    assert set(instance_seeds(cfg, ENV.env_id, 0)).isdisjoint(instance_seeds(cfg, OTHER.env_id, 0))
    for override in ({"seed": 1}, {"evaluation.seed": 1}):
        other = instance_seeds(load_config(overrides=override), ENV.env_id, 0)
        assert set(other).isdisjoint(_seeds(r0, False)), override
    assert all(0 <= j.seed < 2**32 for j in r0)


def test_without_a_round_the_instances_are_fixed_as_the_held_out_set_needs():
    cfg = load_config(overrides={"evaluation.seed": 5, "evaluation.unhinted_plays": 3})
    jobs = evaluation_jobs([ENV], cfg, None)
    assert _seeds(jobs, False) == [5, 6, 7]
    assert evaluation_jobs([ENV], load_config(overrides={"seed": 9, **_plays(3)}), None) == (
        evaluation_jobs([ENV], load_config(overrides=_plays(3)), None)
    )  # the campaign seed does not move them


def _plays(unhinted: int, hinted: int = 16) -> dict[str, object]:
    return {"evaluation.unhinted_plays": unhinted, "evaluation.hinted_plays": hinted}


def test_hinted_plays_go_round_the_unhinted_plays_instances():
    # 8 unhinted, 16 hinted (the reference's): each instance once unhinted and twice hinted
    jobs = evaluation_jobs([ENV], load_config(), 3)
    unhinted, hinted = _seeds(jobs, False), _seeds(jobs, True)
    assert len(set(unhinted)) == 8 and hinted == unhinted + unhinted
    # fewer hinted plays than unhinted: the first instances are shared
    jobs = evaluation_jobs([ENV], load_config(overrides=_plays(8, 4)), 3)
    assert _seeds(jobs, True) == _seeds(jobs, False)[:4]
    # no unhinted plays: the hinted ones have instances of their own
    jobs = evaluation_jobs([ENV], load_config(overrides=_plays(0, 3)), 3)
    assert len(set(_seeds(jobs, True))) == 3 and not _seeds(jobs, False)
    # no hint: no hinted plays
    plain = EnvSpec("env-c", "class G: ...", "logic", None)
    assert not _seeds(evaluation_jobs([plain], load_config(), 3), True)


def _play(job, ret: float, status: str = "terminated") -> Trajectory:
    turn = Turn([1], [2], [-0.1], "x", "x", "ok", ret, True, False, "stop", 0.0, 0.0)
    return Trajectory(
        job.env_id, job.seed, job.hint is not None, job.hint, turns=[turn], status=status
    )


def test_the_paired_regret_stands_beside_the_regret():
    """2 instances a, b; unhinted a 0, b 1; hinted a 1, b 1, a 0, and b's second hinted play
    failed on our side (left out). Regret over all plays: mean(1, 1, 0) - mean(0, 1) = 1/6.
    Paired, per instance: a (1 + 0) / 2 - 0 = 0.5, b 1 - 1 = 0 -> 0.25, interval [0, 0.5]."""
    cfg = load_config(overrides=_plays(2, 4))
    u_a, u_b, h_a, h_b, h_a2, h_b2 = evaluation_jobs([ENV], cfg, 0)
    assert (h_a.seed, h_b.seed, h_a2.seed, h_b2.seed) == (u_a.seed, u_b.seed, u_a.seed, u_b.seed)
    plays = [_play(u_a, 0.0), _play(u_b, 1.0), _play(h_a, 1.0), _play(h_b, 1.0)]
    plays += [_play(h_a2, 0.0), _play(h_b2, 0.0, "inference_failed")]
    ev = _evaluation(ENV, plays, cfg)
    assert ev.regret == pytest.approx(1 / 6) and ev.failed_plays == 1
    assert (ev.paired_regret, ev.paired_regret_interval, ev.paired_instances) == (
        0.25,
        [0.0, 0.5],
        2,
    )
    assert ev.summary()["paired_regret_interval"] == [0.0, 0.5]  # stored as JSON keeps it
    # without hinted plays there is nothing to pair
    alone = _evaluation(ENV, plays[:2], cfg)
    assert (alone.paired_regret, alone.paired_regret_interval, alone.paired_instances) == (
        None,
        None,
        0,
    )


def test_a_stored_play_is_reused_only_for_the_instance_it_played():
    cfg = load_config(overrides=_plays(2, 2))
    jobs = evaluation_jobs([ENV], cfg, 1)
    plays = {i: _play(job, 1.0) for i, job in enumerate(jobs)}
    assert reusable(jobs, plays) == plays
    stale = {i: _play(job, 1.0) for i, job in enumerate(evaluation_jobs([ENV], cfg, None))}
    assert reusable(jobs, stale) == {}  # stored when every round played seeds 0, 1
    assert reusable(jobs, {0: plays[2]}) == {}  # a hinted play is no unhinted one
    assert reusable(jobs, {9: plays[0]}) == {}  # no such job


def test_evaluations_stored_before_pairing_still_load():
    row = {  # an evaluations.jsonl row as the evaluate stage wrote it before
        "env_id": "env-a", "skill": "logic", "hinted_returns": [1.0], "unhinted_returns": [0.0],
        "win_rate": 0.0, "hinted_win_rate": 1.0, "regret": 1.0, "failed_plays": 0,
        "source": "designed", "env_failed_plays": 0,
    }  # fmt: skip
    ev = EnvEvaluation(**row)
    assert (ev.paired_regret, ev.paired_regret_interval, ev.paired_instances) == (None, None, 0)
    assert ev.summary() == row | {
        "paired_regret": None,
        "paired_regret_interval": None,
        "paired_instances": 0,
        "resumed_plays": 0,
    }
