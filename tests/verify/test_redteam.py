"""The red team (tests/verify/redteam.py) against the verifier: each design verified with its
parent as the reference, accepted exactly when a careful reviewer would keep it."""

import ast
from collections import Counter

import pytest

from spade.verify import Reference, verify
from tests.verify.redteam import DESIGNS, EXAMPLES, GOOD, KINDS

BY_NAME = {d.name: d for d in DESIGNS}


def test_every_design_parses_differs_from_its_parent_and_is_named_once():
    assert len(BY_NAME) == len(DESIGNS) >= 44
    for design in DESIGNS:
        ast.parse(design.code)
        assert design.code != EXAMPLES[design.parent], design.name
        assert design.kind in KINDS and design.expected in ("keep", "reject"), design.name
        assert (design.expected == "keep") == (design.kind == GOOD), design.name


def test_the_red_team_covers_every_kind_and_several_parents():
    kinds = Counter(d.kind for d in DESIGNS)
    assert [kinds[k] >= n for k, n in zip(KINDS, (9, 9, 5, 7, 14), strict=True)] == [True] * 5
    leak_parents = {d.parent for d in DESIGNS if d.kind == KINDS[0]}
    assert {"number_hunt", "code_breaker", "polynomial_probe", "sequence_oracle"} <= leak_parents
    assert {"switchboard", "order_fulfillment"} <= leak_parents


KNOWN_GAPS = {
    "hunt thresholds below one": (
        "its credit's branches compare a whole-number distance with 0.01 and 0.05, so it pays"
        " every miss 0: played, it is the stricter credit a reviewer keeps; only a reading of the"
        " code (branches no play reaches) tells the two apart, and no check reads it so"
    ),
}
"""Designs the verifier is known to judge otherwise than the reviewer, and why (strict: each
fails the run the day it is judged right, so the entry is removed)."""


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[n]))
        if n in KNOWN_GAPS
        else n
        for n in BY_NAME
    ],
)
def test_the_verifier_keeps_exactly_the_designs_a_reviewer_keeps(name, policy):
    design = BY_NAME[name]
    parent = [Reference(design.parent, EXAMPLES[design.parent])]
    verdict = verify(design.code, policy=policy, references=parent)
    failure = verdict.failure
    seen = "accepted" if failure is None else f"{verdict.failed_check}: {failure.reason}"
    assert verdict.accepted == (design.expected == "keep"), (
        f"{design.kind}, expected {design.expected} ({design.reason}); verdict {seen}"
    )
