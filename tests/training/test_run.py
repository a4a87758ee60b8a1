"""``spade train``'s sample loading: the designer's advantages follow the scoring config."""

from __future__ import annotations

import json

import pytest

from spade.config import CampaignConfig
from spade.designer.designer import DesignAttempt
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
