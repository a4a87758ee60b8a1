"""``spade train``'s sample loading: the designer's advantages follow the scoring config."""

from __future__ import annotations

import json

import pytest

from spade.config import CampaignConfig
from spade.records import DesignAttempt, Trajectory, Turn
from spade.training.run import load_samples


def _scored_attempts(tmp_path):
    """Four scored attempts of two skills, as the scoring stage writes them (one JSON a line)."""
    rows = []
    for i, (skill, reward) in enumerate([("logic", 1.0), ("logic", 3.0), ("math", 10.0),
                                         ("math", 20.0)]):  # fmt: skip
        attempt = DesignAttempt(slot=i, attempt=0, skill=skill, doc_id="d", messages=[],
                                prompt_token_ids=[1, 2], token_ids=[3, 4],
                                logprobs=[-0.5, -0.5])  # fmt: skip
        rows.append(json.dumps(attempt.to_dict() | {"reward": reward}))
    path = tmp_path / "attempts.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize(
    ("centre_per_skill", "expected"),
    [(True, [-1.0, 1.0, -5.0, 5.0]), (False, [-7.5, -5.5, 1.5, 11.5])],
    ids=["per-skill", "whole-batch"],
)
def test_designer_advantages_respect_centre_per_skill(tmp_path, centre_per_skill, expected):
    cfg = CampaignConfig.model_validate({"scoring": {"centre_per_skill": centre_per_skill}})
    samples = load_samples(cfg, "designer", _scored_attempts(tmp_path))
    assert [s.group for s in samples] == ["logic", "logic", "math", "math"]
    assert [s.advantage for s in samples] == pytest.approx(expected)


def test_attempts_that_failed_on_our_side_are_no_samples(tmp_path):
    """A failed repair keeps its first answer's tokens and has no reward: it is left out, and
    the others' advantages are what they are without it."""
    path = _scored_attempts(tmp_path)
    failed = DesignAttempt(slot=9, attempt=0, skill="logic", doc_id="d", messages=[],
                           prompt_token_ids=[1, 2], token_ids=[5], logprobs=[-0.5],
                           failure_kind="inference", failure_reason="repair: 500")  # fmt: skip
    with path.open("a") as f:
        f.write(json.dumps(failed.to_dict() | {"reward": None}) + "\n")
    samples = load_samples(CampaignConfig(), "designer", path)
    assert [s.advantage for s in samples] == pytest.approx([-1.0, 1.0, -5.0, 5.0])


def test_each_role_trains_at_the_temperature_its_samples_were_drawn_at():
    from spade.training.run import sampling_temperature

    cfg = CampaignConfig.model_validate(
        {"evaluation": {"temperature": 0.8}, "designer": {"temperature": 0.6}}
    )
    assert sampling_temperature(cfg, "agent") == 0.8
    assert sampling_temperature(cfg, "designer") == 0.6


def _plays(tmp_path):
    """Two unhinted plays of one environment, returns 1 and 0, as `spade evaluate` writes them."""
    from spade.records import Trajectory, Turn

    rows = []
    for reward, completion in ((1.0, [40, 41, 42]), (0.0, [50, 51])):
        turn = Turn([1, 7, 9], completion, [-0.7] * len(completion), "t", "a", "o", reward,
                    True, False, "stop", 0.0, 0.0)  # fmt: skip
        play = Trajectory("env-a", 0, False, turns=[turn], status="terminated")
        rows.append(json.dumps(play.to_dict()))
    path = tmp_path / "trajectories.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_spade_train_chains_both_roles_on_one_model_and_one_optimizer(tmp_path):
    """An agent update then a designer update, each with the default checkpoint root: the
    designer's resumes the agent's checkpoint (its parent) and continues its optimizer, as the
    round's stages chain them; before, each role resumed only its own."""
    from spade.inference.checkpoints import load_checkpoint
    from spade.testing.scripted_designer import write_tiny_policy
    from spade.training.run import train_once

    policy = write_tiny_policy(tmp_path / "policy")
    cfg = CampaignConfig.model_validate(
        {
            "model": {"name_or_path": str(policy), "device": "cpu"},
            "storage": {"root": str(tmp_path / "store")},
            "training": {"lr": 1e-3},
        }
    )
    agent = train_once(cfg, "agent", _plays(tmp_path))
    designer = train_once(cfg, "designer", _scored_attempts(tmp_path))
    assert agent.metrics["optimizer_steps"] == designer.metrics["optimizer_steps"] == 1
    assert agent.resumed_from is None and designer.resumed_from == agent.checkpoint
    state = load_checkpoint(designer.checkpoint).optimizer_state
    assert state is not None and {int(s["step"]) for s in state["state"].values()} == {2}


def _play(env_id: str, reward: float, hinted: bool = False) -> Trajectory:
    turn = Turn([1, 2], [3], [-0.5], "t", "a", "o", reward, True, False, "stop", 0.0, 0.0)
    return Trajectory(env_id, 0, hinted, turns=[turn], status="terminated")


def test_a_matched_update_keeps_the_environments_with_a_gradient_first():
    from spade.training.run import matched_envs

    plays = [
        _play("flat-a", 0.0), _play("flat-a", 0.0),
        _play("spread", 0.0), _play("spread", 0.4),
        _play("flat-b", 0.2), _play("flat-b", 0.2), _play("flat-b", 1.0, hinted=True),
        _play("also", 1.0), _play("also", 0.5),
    ]  # fmt: skip
    assert matched_envs(plays, None, 0) == plays == matched_envs(plays, 4, 0)
    two = matched_envs(plays, 2, 0)
    assert {t.env_id for t in two} == {"spread", "also"}  # a hinted play is no gradient
    assert two == [t for t in plays if t.env_id in ("spread", "also")]  # the plays' order kept
    three = {t.env_id for t in matched_envs(plays, 3, 0)}
    assert {"spread", "also"} < three and three <= {"spread", "also", "flat-a", "flat-b"}
    picks = {next(t.env_id for t in matched_envs(plays, 3, s) if t.env_id.startswith("flat"))
             for s in range(20)}  # fmt: skip
    assert picks == {"flat-a", "flat-b"}  # the seed orders the flat ones


def test_agent_samples_train_on_the_matched_environments_only():
    from spade.training.run import agent_samples

    plays = [_play("flat", 0.0), _play("flat", 0.0), _play("spread", 0.0), _play("spread", 1.0)]
    cfg = CampaignConfig.model_validate({"training": {"agent_envs_per_update": 1}})
    assert {s.group for s in agent_samples(cfg, plays)} == {"spread"}
    assert {s.group for s in agent_samples(CampaignConfig(), plays)} == {"flat", "spread"}


def test_an_update_measuring_its_shift_reports_it_with_its_metrics(tmp_path):
    """``training.measure_shift``: the update's metrics (what the stage stores and ``spade
    status`` reads) carry how far it moved the policy; without it they carry nothing of it."""
    from spade.testing.scripted_designer import write_tiny_policy
    from spade.training.run import train_once

    policy = write_tiny_policy(tmp_path / "policy")
    for measure in (True, False):
        cfg = CampaignConfig.model_validate(
            {
                "model": {"name_or_path": str(policy), "device": "cpu"},
                "storage": {"root": str(tmp_path / f"store-{measure}")},
                "training": {"lr": 1e-3, "measure_shift": measure},
            }
        )
        metrics = train_once(cfg, "designer", _scored_attempts(tmp_path)).metrics
        shift = {k for k in metrics if k.startswith("shift_")}
        # (the four answers are the same tokens, so their advantages cancel: what the figures
        # are is tests/training/test_shift.py's business)
        assert shift == ({"shift_kl", "shift_up", "shift_down"} if measure else set())
