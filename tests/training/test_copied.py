"""Copy masking of designer answers: which tokens count as copied, and which samples lose them."""

from __future__ import annotations

import pytest

from spade.config import CampaignConfig
from spade.records import DesignAttempt
from spade.training.copied import copied_positions, mask_copied
from spade.training.run import designer_samples
from spade.training.samples import assign_advantages, completion_sample

PARENT = [50, 51, 52, 53, 54, 55, 56, 57]  # the parent's method, as the prompt shows it


def test_a_run_of_n_tokens_found_in_the_context_is_copied_and_shorter_runs_are_not():
    #          copied run of 4 ----------  changed  run of 3 (too short)
    tokens = [50, 51, 52, 53, 9, 55, 56, 57, 8]
    assert copied_positions(PARENT, tokens, 4) == [True] * 4 + [False] * 5
    assert copied_positions(PARENT, tokens, 3) == [True] * 4 + [False] + [True] * 3 + [False]
    # overlapping windows mark the whole run, not only each window's first token
    assert copied_positions(PARENT, PARENT, 4) == [True] * 8
    assert copied_positions(PARENT, [1, 2], 4) == [False, False]  # shorter than n
    with pytest.raises(ValueError, match="at least 1"):
        copied_positions(PARENT, tokens, 0)


def _two_answers():
    """Prompt = [1] + PARENT; a kept answer copying 4 parent tokens then writing 2 of its own,
    a rejected one copying the same 4 (rewards 1 and -1, so advantages +1 and -1)."""
    kept = completion_sample([1, *PARENT], [50, 51, 52, 53, 7, 8], [-0.5] * 6, 1.0, "g", unit="a")
    worse = completion_sample([1, *PARENT], [50, 51, 52, 53, 6], [-0.5] * 5, -1.0, "g", unit="b")
    return list(assign_advantages([kept, worse], "centred"))


def test_positive_masks_the_copied_tokens_of_better_answers_only():
    kept, worse = mask_copied(_two_answers(), "positive", 4)
    assert kept.loss_mask == [0] * 9 + [0, 0, 0, 0, 1, 1]  # trains what it changed
    assert kept.behaviour_logprobs[9:] == [0.0] * 4 + [-0.5, -0.5]  # masked: no log-prob
    assert kept.advantage == 1.0 and kept.input_ids[9:] == [50, 51, 52, 53, 7, 8]
    assert worse.loss_mask == [0] * 9 + [1] * 5  # still pushes down all it wrote


def test_all_masks_every_answer_and_off_leaves_them_as_they_were():
    samples = _two_answers()
    kept, worse = mask_copied(samples, "all", 4)
    assert kept.trained_tokens == 2 and worse.trained_tokens == 1
    assert [s.loss_mask for s in mask_copied(samples, "off", 4)] == [s.loss_mask for s in samples]


def test_masking_needs_advantages_and_a_known_mode():
    s = completion_sample([1, *PARENT], [50, 51], [-0.5, -0.5], 1.0, "g")
    with pytest.raises(ValueError, match="assign_advantages first"):
        mask_copied([s], "positive", 4)
    with pytest.raises(ValueError, match="not one of"):
        mask_copied([s], "sometimes", 4)  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "trained"), [("off", [6, 5]), ("positive", [2, 5])])
def test_designer_samples_mask_as_the_training_config_says(mode, trained):
    """The config reaches the samples a round and the designer bench train on."""
    cfg = CampaignConfig.model_validate(
        {"training": {"designer_copy_mask": mode, "designer_copy_ngram": 4}}
    )
    attempts = [
        DesignAttempt(slot=i, attempt=0, skill="logic", doc_id="d", messages=[],
                      prompt_token_ids=[1, *PARENT], token_ids=ids, logprobs=[-0.5] * len(ids))
        for i, ids in enumerate([[50, 51, 52, 53, 7, 8], [50, 51, 52, 53, 6]])
    ]  # fmt: skip
    samples = designer_samples(cfg, attempts, [1.0, -1.0])
    assert [s.trained_tokens for s in samples] == trained
    assert [s.advantage for s in samples] == [1.0, -1.0]
