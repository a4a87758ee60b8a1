"""The verifier on the bundled examples and on small broken designs."""

import pytest
from pydantic import ValidationError

from spade.config import VerifyConfig
from spade.envs.examples import example_paths
from spade.verify import CHECKS, Reference, verify, verify_file

pytestmark = pytest.mark.sandbox

CHECK_NAMES = [name for name, _ in CHECKS]


def test_every_example_is_accepted_with_all_checks(example_path, policy):
    # The bundled examples are different games: each is novel against all the others.
    others = [Reference(p.stem, p.read_text()) for p in example_paths() if p != example_path]
    verdict = verify_file(example_path, references=others, policy=policy)
    assert verdict.accepted, verdict.to_dict()
    assert [c.name for c in verdict.checks] == CHECK_NAMES
    novelty = verdict.checks[-1].reason
    assert novelty.startswith(f"closest of {len(others)}: ") and "plays differently" in novelty
    assert verdict.skill and verdict.hint and verdict.solution_length >= 1
    data = verdict.to_dict()
    assert data["failure"] is None and all(c["reason"] for c in data["checks"])


GOOD = """
from spade.envs import TextEnv

class PickEnv(TextEnv):
    def setup(self):
        self.secret = self.rng.randint(100, 999)
        self.tries = 0
        return "Guess a number between 100 and 999; I say higher or lower. 12 tries."

    def play(self, move):
        if not move.isdigit():
            return "numbers only", 0.0, False
        self.tries += 1
        n = int(move)
        if n == self.secret:
            return "yes", 1.0, True
        if self.tries >= 12:
            return "out of tries", 0.0, True
        return ("higher" if n < self.secret else "lower"), 0.0, False

    def solution(self):
        return ["\\\\boxed{%d}" % self.secret]
"""


def test_a_valid_design_is_accepted(policy):
    verdict = verify(GOOD, policy=policy)
    assert verdict.accepted, verdict.to_dict()
    assert verdict.progress == 1.0 and verdict.similarity is None  # no references compared


def test_progress_is_the_share_of_checks_passed_before_the_failure(policy):
    """Graded designer rewards tell two failures of one kind apart by it."""
    early = verify(
        GOOD.replace("self.tries = 0", "self.tries = 0; _missing"), policy=policy
    )  # in reset
    late = verify(
        GOOD.replace("self.tries += 1", "self.tries += 1; _missing"), policy=policy
    )  # in play
    assert early.failure.kind == late.failure.kind == "crash"
    assert early.progress == CHECK_NAMES.index(early.failed_check) / len(CHECKS)
    assert late.progress == CHECK_NAMES.index(late.failed_check) / len(CHECKS)
    assert early.progress < late.progress
    assert (
        verify("class (", policy=policy).progress == 0.0
        and verify("class (", policy=policy).to_dict()["progress"] == 0.0
    )


def test_a_syntax_error_progresses_by_the_share_of_the_code_that_parses(policy):
    """Two syntax errors at different depths differ (graded rewards rank them)."""
    early = verify(
        GOOD.replace("self.tries = 0", "self.tries = = 0"), policy=policy
    )  # in the env class
    late = verify(GOOD + "\ndef broken(:\n    pass\n", policy=policy)  # after the whole class
    assert early.failure.kind == late.failure.kind == "syntax"
    assert 0.0 < early.progress < 0.5 < late.progress < 1.0


def test_first_failure_stops_the_run_and_is_recorded(policy):
    verdict = verify(GOOD.replace("import TextEnv", "import TextEnv\nimport os"), policy=policy)
    assert not verdict.accepted and verdict.failed_check == "import_policy"
    assert [c.name for c in verdict.checks] == ["parse", "import_policy"]
    assert verdict.to_dict()["failure"] == {
        "kind": "import_denied",
        "reason": "imports outside the allow-list: os (line 3)",
    }


def test_reward_range_is_configurable(policy):
    scaled = GOOD.replace('return "yes", 1.0, True', 'return "yes", 5.0, True')
    assert verify(scaled, policy=policy).failure.kind == "contract"
    assert verify(
        scaled, config=VerifyConfig(reward_max=5.0, success_threshold=1.0), policy=policy
    ).accepted


def test_missing_turn_bound_is_no_termination(policy):
    endless = GOOD.replace(
        'return "out of tries", 0.0, True', 'return "again", 0.0, False'
    ).replace(
        "class PickEnv(TextEnv):",
        "class PickEnv(TextEnv):\n    def __init__(self, **kw):\n        super().__init__(max_turns=10**6)",
    )
    verdict = verify(endless, policy=policy)
    assert verdict.failure.kind == "no_termination" and verdict.failed_check == "termination"


LUCKY = """
from spade.envs import TextEnv

class LuckyEnv(TextEnv):
    def setup(self):
        return "Say any number in \\\\boxed{} to win; anything else loses the turn."

    def play(self, move):
        if move.strip().isdigit():
            return "You win!", 1.0, True
        return "Not a number.", 0.0, False

    def solution(self):
        return ["\\\\boxed{7}"]
"""

EMPTY_WINS = """
class EmptyWinsEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns, self.turn = max_turns, 0

    def reset(self, seed=None):
        self.turn = 0
        return "Say nothing at all to win.", {}

    def step(self, action):
        self.turn += 1
        if action.strip() == "":
            return "Silence wins.", 1.0, True, False, {}
        return "Too loud.", 0.0, False, self.turn >= self.max_turns, {}

    def solution(self):
        return [""]
"""


def test_random_play_may_not_win_at_all_by_default(policy):
    assert VerifyConfig().max_random_win_rate == 0.0
    verdict = verify(LUCKY, policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "trivial", verdict.to_dict()
    assert verdict.failed_check == "non_triviality"
    assert verdict.failure.reason == "random actions reach the goal in 4/4 episodes"


def test_the_random_win_rate_bound_is_inclusive(policy):
    # LUCKY is one fixed instance too, and any number wins it (perverse credit: its answer is
    # never read): the seed-dependence check is off and perverse_credit waived to see this bound.
    lenient = VerifyConfig(max_random_win_rate=1.0, seed_probe_count=0, waive=["perverse_credit"])
    assert verify(LUCKY, config=lenient, policy=policy).accepted
    rejected = verify(LUCKY, config=VerifyConfig(max_random_win_rate=0.75), policy=policy)
    assert rejected.failed_check == "non_triviality"


@pytest.mark.parametrize("config", [VerifyConfig(), VerifyConfig(max_random_win_rate=1.0)])
def test_empty_actions_never_may_win(config, policy):
    verdict = verify(EMPTY_WINS, config=config, policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "trivial", verdict.to_dict()
    assert verdict.failure.reason.startswith("empty actions reach the goal")


def test_a_design_that_forgot_its_imports_is_accepted(policy):
    verdict = verify(GOOD.replace("from spade.envs import TextEnv\n", ""), policy=policy)
    assert verdict.accepted, verdict.to_dict()


QUIZ = """
class QuizEnv(TextEnv):
    def setup(self):
        self.tries = 0
        return "What is 17 * 23? Answer in \\\\boxed{}; three tries."

    def play(self, move):
        self.tries += 1
        if move.strip() == "391":
            return "correct", 1.0, True
        if self.tries >= 3:
            return "wrong, no tries left", 0.0, True
        return "wrong", 0.0, False

    def solution(self):
        return ["\\\\boxed{391}"]
"""


def test_a_quiz_with_one_fixed_answer_is_seed_independent(policy):
    verdict = verify(QUIZ, policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "seed_independent"
    assert verdict.failed_check == "seed_dependence" and verdict.checks[-2].passed
    assert verdict.failure.reason == (
        "seeds 1234, 1235, 1236 all give the same first observation "
        "'What is 17 * 23? Answer in \\\\boxed{}; three tries.' "
        "and the same solution ['\\\\boxed{391}']"
    )


def test_a_game_whose_secret_ignores_the_seed_is_seed_independent(policy):
    fixed = GOOD.replace("self.secret = self.rng.randint(100, 999)", "self.secret = 437")
    verdict = verify(fixed, config=VerifyConfig(seed=7, seed_probe_count=5), policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "seed_independent"
    assert verdict.failure.reason.startswith("seeds 7, 8, 9, 10, 11 all give the same")
    assert verdict.failure.reason.endswith("the same solution ['\\\\boxed{437}']")


# One answer behind varied text: the opening names the instance, the answer never changes.
DRESSED_QUIZ = QUIZ.replace(
    '    def setup(self):\n        self.tries = 0\n        return "What',
    "    def setup(self):\n        self.tries = 0\n"
    "        name = self.rng.choice(['Ada', 'Bo', 'Cy', 'Di', 'Ed', 'Flo'])\n"
    '        return f"Puzzle {self.rng.randint(1, 10**6)} for {name}. What',
).replace("Answer in \\\\boxed{}", "Answer in \\\\boxed{{}}")


def test_one_answer_behind_varied_openings_is_one_instance(policy):
    assert "Puzzle {self.rng" in DRESSED_QUIZ
    verdict = verify(DRESSED_QUIZ, policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "seed_independent"
    assert verdict.failed_check == "seed_dependence", verdict.to_dict()
    assert verdict.failure.reason == (
        "seeds 1234 to 1249 all have the same solution ['\\\\boxed{391}'] (3 distinct first"
        " observations of 3 probed): one instance, whatever the text around it"
    )


# Three answers: three probe seeds share one solution by chance (one in nine starting seeds),
# sixteen do not.
THREE_DOORS = """
class DoorsEnv(TextEnv):
    def setup(self):
        self.door = self.rng.choice(["red", "green", "blue"])
        self.tries = 0
        return "Three doors: red, green, blue. Name one in \\\\boxed{}; you get one try."

    def play(self, move):
        won = move.strip() == self.door
        return ("right" if won else "wrong"), (1.0 if won else 0.0), True

    def solution(self):
        return ["\\\\boxed{%s}" % self.door]
"""


def test_a_few_seeds_sharing_a_solution_by_chance_are_not_one_instance(policy):
    seed = next(s for s in range(1000, 2000) if len({_door(s + i) for i in range(3)}) == 1)
    verdict = verify(THREE_DOORS, config=VerifyConfig(seed=seed), policy=policy)
    reason = {c.name: c for c in verdict.checks}["seed_dependence"]
    assert reason.passed, verdict.to_dict()


def _door(seed: int) -> str:
    import random

    return random.Random(seed).choice(["red", "green", "blue"])


def test_seed_dependence_can_be_turned_off_but_not_probed_with_one_seed(policy):
    verdict = verify(QUIZ, config=VerifyConfig(seed_probe_count=0), policy=policy)
    assert verdict.accepted, verdict.to_dict()
    with pytest.raises(ValidationError, match="seed_probe_count"):
        VerifyConfig(seed_probe_count=1)


def test_a_seed_dependent_design_passes_with_the_evidence(policy):
    reason = verify(GOOD, policy=policy).checks[CHECK_NAMES.index("seed_dependence")].reason
    assert reason == (
        "seeds 1234, 1235, 1236: distinct first observations 1 of 3, distinct solutions 3 of 3;"
        " seed 1234's solution does not win them all"
    )


# The 0.5B coder's one accepted splice of a bench run, in small: the hidden number is drawn and
# solution() names it, but play() wins on one fixed move whatever the number is.
HOLLOW = GOOD.replace("        if n == self.secret:\n", "        if n == 500:\n").replace(
    'return ["\\\\boxed{%d}" % self.secret]', 'return ["%d" % self.secret, "500"]'
)


def test_a_game_whose_win_ignores_what_it_hides_is_seed_independent(policy):
    assert HOLLOW != GOOD and "n == 500" in HOLLOW and '"500"]' in HOLLOW
    verdict = verify(HOLLOW, policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "seed_independent"
    assert verdict.failed_check == "seed_dependence"
    assert verdict.failure.reason.endswith(
        "wins seeds 1235, 1236 too: what an instance hides does not decide it"
    )


TWO_TUPLE = GOOD.replace('return "numbers only", 0.0, False', 'return "numbers only", 0.0')


@pytest.mark.parametrize(
    ("code", "check", "kind"),
    [
        (TWO_TUPLE, "gate_hook_arity", "crash"),
        (GOOD.replace("self.secret = ", "self.hidden = "), "gate_self_attributes", "crash"),
    ],
)
def test_the_gate_rejects_before_the_jail_with_the_kind_the_jail_gives(policy, code, check, kind):
    gated = verify(code, policy=policy, gate=True)
    assert gated.failed_check == check and gated.failure is not None
    assert str(gated.failure.kind) == kind and len(gated.checks) == 1
    jailed = verify(code, policy=policy)  # what the jail says of the same design
    assert jailed.failure is not None and str(jailed.failure.kind) == kind


def test_the_gate_catches_a_renamed_copy_and_passes_a_valid_design(policy):
    ref = Reference("good", GOOD)
    copy = GOOD.replace("PickEnv", "RenamedPickEnv")
    gated = verify(copy, policy=policy, references=[ref], gate=True)
    assert gated.failed_check == "gate_near_copy" and gated.similarity is not None
    assert gated.progress < 0.5
    assert verify(GOOD, policy=policy, gate=True).accepted


def test_a_games_bare_solution_moves_are_replayed_boxed(policy):
    """solution() returning the moves themselves ([str(self.secret)]) is the reference play of
    the actions an agent would send: the jail boxes them (spade.envs.actions.box_moves)."""
    bare = GOOD.replace('return ["\\\\boxed{%d}" % self.secret]', "return [str(self.secret)]")
    assert bare != GOOD
    verdict = verify(bare, policy=policy)
    assert verdict.accepted, verdict.to_dict()
    assert all(a.startswith("\\boxed{") for a in verdict.solution)


def test_a_game_that_refuses_unreadable_moves_with_value_error_is_accepted(policy):
    """play reading the move with int() and no check first (small models' habit): the
    ValueError refuses the move (spade.envs.TextEnv.act), the agent is told why, and the
    design passes; a number as solution() is written out and boxed."""
    raw = GOOD.replace(
        '        if not move.isdigit():\n            return "numbers only", 0.0, False\n', ""
    )
    raw = raw.replace('return ["\\\\boxed{%d}" % self.secret]', "return [self.secret]")
    assert "isdigit" not in raw and "[self.secret]" in raw
    verdict = verify(raw, policy=policy)
    assert verdict.accepted, verdict.to_dict()
    assert verdict.solution[0].startswith("\\boxed{") and verdict.solution[0][7:-1].isdigit()
    broken = raw.replace("n = int(move)", "n = int(move) + len(self.missing)")
    rejected = verify(broken, policy=policy)  # an AttributeError is a bug, still a crash
    assert rejected.failure is not None and str(rejected.failure.kind) == "crash"


def test_gate_rejections_rank_by_where_the_jail_would_have_failed(policy):
    """Without a jail run, a round's gate rejections would all tie at progress 0 (a demo round
    of four gate crashes gave the designer equal rewards): a crash in solution ranks above one
    in play, above one in setup, as the jail's own progress does."""
    in_setup = GOOD.replace("self.tries = 0", "self.tries = self.start")
    in_play = GOOD.replace("self.tries += 1", "self.tries += self.step_size")
    in_solution = GOOD.replace("% self.secret]", "% self.answer]")
    progress = [
        verify(c, policy=policy, gate=True).progress for c in (in_setup, in_play, in_solution)
    ]
    assert 0 < progress[0] < progress[1] < progress[2] < 1


def test_gate_rejections_at_the_same_check_rank_by_the_offending_line(policy):
    early = GOOD.replace("if not move.isdigit():", "if self.strict and not move.isdigit():")
    late = GOOD.replace('return "yes", 1.0, True', "return self.cheer, 1.0, True")
    low, high = (verify(c, policy=policy, gate=True).progress for c in (early, late))
    assert low < high


def test_the_gate_grades_by_checks_the_verifier_runs():
    """The checks a gate rejection is graded against (the first to run a method in the jail)
    are the verifier's own: a renamed check fails here, not in a round's reward."""
    from spade.verify.verifier import _FIRST_CALLED_BY

    assert set(_FIRST_CALLED_BY.values()) | {"step_contract"} <= set(CHECK_NAMES)
    order = [CHECK_NAMES.index(_FIRST_CALLED_BY[m]) for m in ("module", "setup", "solution")]
    assert order == sorted(order)  # loading the class, then reset, then the solution's replay
