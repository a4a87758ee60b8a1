"""Waived checks (``VerifyConfig.waive``): the check still runs and its failure stays in the
verdict, marked waived; the checks after it run; only its own judgement is waived."""

from typing import get_args

import pytest
from pydantic import ValidationError

from spade.config import VerifyConfig
from spade.config.verify import WaivableCheck
from spade.envs.examples import example_paths
from spade.verify import CHECKS, Reference, verify
from spade.verify.verifier import WAIVABLE
from tests.verify.test_verifier import CHECK_NAMES, QUIZ

EXAMPLES = {p.stem: p for p in example_paths()}


def test_the_waivable_checks_are_named_checks_and_nothing_else_is_waivable():
    assert set(get_args(WaivableCheck)) == set(WAIVABLE) <= {name for name, _ in CHECKS}
    assert VerifyConfig(waive=["seed_dependence", "novelty"]).waive == [
        "seed_dependence",
        "novelty",
    ]
    for bad in (["feasibility"], ["parse"], ["seed-dependence"]):
        with pytest.raises(ValidationError, match="waive"):
            VerifyConfig(waive=bad)


@pytest.mark.sandbox
def test_a_fixed_instance_is_accepted_with_seed_dependence_waived_and_reported(policy):
    strict = verify(QUIZ, policy=policy)
    assert not strict.accepted and strict.failed_check == "seed_dependence"
    stop = CHECK_NAMES.index("seed_dependence") + 1
    assert [c.name for c in strict.checks] == CHECK_NAMES[:stop]  # stopped there

    verdict = verify(QUIZ, config=VerifyConfig(waive=["seed_dependence"]), policy=policy)
    assert verdict.accepted and verdict.failure is None and verdict.failed_check is None
    assert [c.name for c in verdict.checks] == CHECK_NAMES  # novelty ran after it
    waived = verdict.checks[stop - 1]
    assert (waived.name, waived.passed, waived.waived) == ("seed_dependence", False, True)
    assert waived.kind == "seed_independent" and waived.reason == strict.failure.reason
    assert verdict.waived == ["seed_dependence"] and verdict.progress == 1.0
    data = verdict.to_dict()
    assert data["accepted"] and data["checks"][stop - 1]["waived"] is True
    assert "waived" not in data["checks"][0]


@pytest.mark.sandbox
def test_a_copy_is_accepted_with_novelty_waived_but_not_with_the_other_waiver(policy):
    code = EXAMPLES["number_hunt"].read_text()
    refs = [Reference("number_hunt", code)]
    other = verify(
        code, config=VerifyConfig(waive=["seed_dependence"]), policy=policy, references=refs
    )
    assert not other.accepted and other.failure and other.failure.kind == "duplicate"
    verdict = verify(code, config=VerifyConfig(waive=["novelty"]), policy=policy, references=refs)
    assert verdict.accepted and verdict.waived == ["novelty"]
    assert "near-verbatim copy of 'number_hunt'" in verdict.checks[-1].reason
