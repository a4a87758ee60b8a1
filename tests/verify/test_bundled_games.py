"""Every bundled example and reference-pool game, verified once without references: no false
positive of the ``leaks_answer`` check (its answer is not read off its observations) nor of the
``perverse_credit`` check (its credit rewards the right thing). Two of the reference pool are
rejected before both, as they should be (a broken ledger, a fixed-instance game)."""

from pathlib import Path

import pytest

from spade.envs.examples import example_paths
from spade.verify import verify

pytestmark = pytest.mark.sandbox

POOL = Path(__file__).parents[1] / "fixtures" / "reference_pool" / "games"
REJECTED_EARLIER = ("game_broken_ledger", "game_fixed_lighthouses")


@pytest.mark.parametrize(
    "path", [*example_paths(), *sorted(POOL.glob("*.py"))], ids=lambda p: p.stem
)
def test_no_bundled_or_reference_game_leaks_its_answer_or_has_perverse_credit(path, policy):
    verdict = verify(path.read_text(), policy=policy)
    checks = {c.name: c for c in verdict.checks}
    if path.stem in REJECTED_EARLIER:
        assert "leaks_answer" not in checks and "perverse_credit" not in checks
        assert verdict.failed_check not in (None, "leaks_answer", "perverse_credit")
        return
    leaks, credit = checks.get("leaks_answer"), checks.get("perverse_credit")
    assert leaks is not None and leaks.passed, verdict.to_dict()
    assert leaks.reason.startswith("no reader wins"), leaks.reason
    assert credit is not None and credit.passed, verdict.to_dict()
