"""The novelty check: near-verbatim copies and behavioural copies of references are duplicates."""

import itertools

import pytest

from spade.config import VerifyConfig
from spade.verify import Reference, verify
from spade.verify.novelty import rank_references, similarity, source_tokens
from tests.verify.lookalikes import COPIES, EXAMPLES, VARIANTS
from tests.verify.test_verifier import GOOD

CODE_BREAKER = EXAMPLES["code_breaker"]
RENAMED = COPIES["renamed code_breaker"][1]
LETTERS = VARIANTS["letter code_breaker"][1]
MAX_TOKENS = VerifyConfig().similarity_max_tokens


def source_similarity(code: str, origin: str) -> float:
    return similarity(source_tokens(code, MAX_TOKENS), source_tokens(EXAMPLES[origin], MAX_TOKENS))


# GOOD's game written another way: other names, structure and constants, the same play.
CLONE = """
from spade.envs import TextEnv

LOW, HIGH, TRIES = 100, 999, 12


class HigherLowerEnv(TextEnv):
    def setup(self):
        self.target = self.rng.randint(LOW, HIGH)
        self.left = TRIES
        return f"Guess a number between {LOW} and {HIGH}; I say higher or lower. {TRIES} tries."

    def play(self, move):
        if not move.isdigit():
            return "numbers only", 0.0, False
        self.left -= 1
        guess = int(move)
        if guess == self.target:
            return "yes", 1.0, True
        if not self.left:
            return "out of tries", 0.0, True
        return ("lower" if guess > self.target else "higher"), 0.0, False

    def solution(self):
        return [f"\\\\boxed{{{self.target}}}"]
"""


def test_layout_comments_docstrings_and_renames_are_normalised_away():
    code = COPIES["re-commented code_breaker"][1]
    assert code != CODE_BREAKER and source_similarity(code, "code_breaker") == 1.0
    assert source_similarity(LETTERS, "code_breaker") < 1.0
    assert source_tokens(CODE_BREAKER, 50) == source_tokens(CODE_BREAKER, 10_000)[:50]


@pytest.mark.parametrize("name", COPIES)
def test_copies_in_disguise_reach_the_threshold(name):
    origin, code = COPIES[name]
    assert source_similarity(code, origin) >= VerifyConfig().max_similarity


@pytest.fixture(scope="module")
def closest_examples() -> float:
    """The highest similarity between two different bundled examples."""
    tokens = {k: source_tokens(v, MAX_TOKENS) for k, v in EXAMPLES.items()}
    return max(similarity(tokens[a], tokens[b]) for a, b in itertools.permutations(tokens, 2))


@pytest.mark.parametrize("name", VARIANTS)
def test_small_real_variants_stay_below_it_and_above_different_games(name, closest_examples):
    origin, code = VARIANTS[name]
    assert closest_examples < source_similarity(code, origin) < VerifyConfig().max_similarity


def test_ranking_keeps_the_exact_top_references():
    refs = [Reference(k, v) for k, v in EXAMPLES.items()]
    full = rank_references(LETTERS, refs, keep=len(refs), max_tokens=6000)
    top2 = rank_references(LETTERS, refs, keep=2, max_tokens=6000)
    assert top2.top == full.top[:2] and top2.compared == full.compared == len(refs)
    assert top2.top[0].reference.name == "code_breaker"
    exact = [similarity(source_tokens(LETTERS, 6000), source_tokens(r.code, 6000)) for r in refs]
    assert [s.similarity for s in full.top] == sorted(exact, reverse=True)


ALL_EXAMPLES = [Reference(k, v) for k, v in EXAMPLES.items()]


@pytest.mark.sandbox
@pytest.mark.parametrize("name", COPIES)
def test_a_copy_in_disguise_is_a_duplicate(name, policy):
    origin, code = COPIES[name]
    verdict = verify(code, references=ALL_EXAMPLES, policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "duplicate"
    assert verdict.failed_check == "novelty"
    similar = source_similarity(code, origin)
    assert verdict.failure.reason == (
        f"a near-verbatim copy of {origin!r}: source similarity {similar:.3f} >= 0.99"
    )
    # how far below a verbatim copy it lies, as a share of the way to the threshold
    assert verdict.similarity == similar and verdict.to_dict()["similarity"] == similar
    assert verdict.progress == pytest.approx(min(1.0, (1 - similar) / (1 - 0.99)))


@pytest.mark.sandbox
@pytest.mark.parametrize("name", VARIANTS)
def test_a_small_real_variant_is_novel(name, policy):
    origin, code = VARIANTS[name]
    verdict = verify(code, references=ALL_EXAMPLES, policy=policy)
    assert verdict.accepted, verdict.to_dict()
    reason = verdict.checks[-1].reason
    assert reason.startswith(f"closest of {len(ALL_EXAMPLES)}: {origin!r}, source similarity 0.9")
    similar = verdict.similarity  # the comparison printed is the one that holds
    assert similar is not None
    sign = "<" if similar < 0.99 else ">="
    assert f"source similarity {similar:.3f} {sign} 0.99" in reason
    assert f"plays differently from {origin!r} (seed 1234, solution play, action " in reason


@pytest.mark.sandbox
def test_a_design_that_plays_exactly_like_a_reference_is_a_duplicate(policy):
    verdict = verify(CLONE, references=[Reference("pick", GOOD)], policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "duplicate", verdict.to_dict()
    reason = verdict.failure.reason
    assert reason.startswith("plays exactly like 'pick': identical transcripts over 3 seeds x ")
    text = float(reason.rsplit("source similarity ", 1)[1].rstrip(")"))
    assert text < VerifyConfig().max_similarity  # the sources alone do not give it away
    assert verdict.progress == 1.0  # it reads differently: as far from a verbatim copy as can be
    # Without the side-by-side play it passes: the behaviour is what gives it away.
    assert verify(
        CLONE,
        references=[Reference("pick", GOOD)],
        config=VerifyConfig(behaviour_references=0),
        policy=policy,
    ).accepted


@pytest.mark.sandbox
def test_a_credit_rule_scoring_only_lost_games_differently_is_not_a_duplicate(policy):
    """code_breaker scores a game whose guesses ran out by its best guess; a rule paying twice
    that differs on every such game, but only there. The near miss played once never ran the
    guesses out, and the designer's credit rewrites of it were judged duplicates (-1, its
    lowest reward: docs/results/designer_learnability.md)."""
    parent = EXAMPLES["code_breaker"]
    rule = "return 0.5 * self.best / self.length"
    assert rule in parent
    doubled = parent.replace(rule, "return self.best / self.length")
    verdict = verify(doubled, references=[Reference("code_breaker", parent)], policy=policy)
    assert verdict.accepted, verdict.to_dict()
    assert "plays differently from 'code_breaker' (seed 1234, near-miss play" in (
        verdict.checks[-1].reason
    )


@pytest.mark.sandbox
def test_the_same_game_with_another_opening_is_a_duplicate(policy):
    """Every move answered alike, only the first observation reworded: the 0.5B coder's usual
    answer to "give it a new theme" (it changed the intro's wording and nothing else)."""
    reworded = CLONE.replace("I say higher or lower.", "I answer each guess: higher or lower.")
    assert reworded != CLONE
    verdict = verify(reworded, references=[Reference("pick", GOOD)], policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "duplicate", verdict.to_dict()
    assert verdict.failure.reason.startswith("plays exactly like 'pick': identical transcripts")
    assert verdict.failure.reason.endswith("; only its opening is worded differently")
    assert verdict.progress == 1.0  # it reads differently: not a near-verbatim copy


@pytest.mark.sandbox
def test_a_reference_whose_feedback_tells_more_is_not_a_duplicate(policy):
    far = '("higher" if n < self.secret else "lower")'
    assert far in GOOD
    other = GOOD.replace(far, f'({far} if abs(n - self.secret) > 100 else "close")')
    verdict = verify(CLONE, references=[Reference("pick", other)], policy=policy)
    assert verdict.accepted, verdict.to_dict()
    assert "plays differently from 'pick' (seed " in verdict.checks[-1].reason


@pytest.mark.sandbox
def test_the_same_feedback_worded_differently_is_a_duplicate(policy):
    """A reply reworded the same way every time ("yes!" for "yes", "too low" for "higher")
    tells the player what the reference's does: the observations correspond one to one."""
    other = GOOD.replace('return "yes", 1.0, True', 'return "yes!", 1.0, True')
    other = other.replace(
        '("higher" if n < self.secret else "lower")',
        '("too low" if n < self.secret else "too high")',
    )
    verdict = verify(CLONE, references=[Reference("pick", other)], policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "duplicate", verdict.to_dict()
    assert "its feedback is worded differently, one to one" in verdict.failure.reason


@pytest.mark.sandbox
def test_references_that_do_not_parse_or_load_are_skipped_with_a_note(policy):
    refs = [
        Reference("garbled", "def (:"),
        Reference("broken", "from spade.envs import TextEnv\nraise RuntimeError('no')\n"),
    ]
    verdict = verify(GOOD, references=refs, policy=policy)
    assert verdict.accepted, verdict.to_dict()
    reason = verdict.checks[-1].reason
    assert reason.startswith("closest of 1: 'broken', source similarity ")
    assert "reference 'garbled' skipped: its source does not parse" in reason
    assert "reference 'broken' skipped: it does not load (crash: RuntimeError: no)" in reason


@pytest.mark.sandbox
def test_without_references_nothing_is_compared(policy):
    verdict = verify(GOOD, policy=policy)
    assert verdict.checks[-1].name == "novelty" and verdict.checks[-1].passed
    assert verdict.checks[-1].reason == "no references to compare with"


@pytest.mark.attack
def test_source_too_deep_for_the_unparser_is_compared_as_written():
    """A 1,000-term sum parses, but ``ast.unparse`` recursed past the limit: RecursionError in
    the host's novelty check, outside every jail. Its tokens are now the source as written."""
    deep = "K = " + "+".join(["1"] * 1000) + "\n"
    tokens = source_tokens(deep, 5000)
    assert tokens.count("+") == 999
    ranking = rank_references(deep, [Reference("itself", deep)], keep=1, max_tokens=5000)
    assert ranking.top[0].similarity == 1.0


NUMBER_HUNT = EXAMPLES["number_hunt"]
# number_hunt retuned: another range and number of guesses by its constructor's defaults, the
# same rules (the 1.5B coder's one accepted edit was cargo_knapsack with 16 crates, not 8)
RETUNED = NUMBER_HUNT.replace(
    "top: int = 999, guesses: int = 10", "top: int = 5000, guesses: int = 13"
)


def test_reference_sizes_are_the_references_defaults_for_shared_parameters():
    from spade.verify.novelty import constructor_defaults, reference_sizes

    assert constructor_defaults(NUMBER_HUNT) == {"top": 999, "guesses": 10}
    assert reference_sizes(RETUNED, NUMBER_HUNT) == {"top": 999, "guesses": 10}
    assert reference_sizes(NUMBER_HUNT, NUMBER_HUNT) == {}  # nothing to resize
    assert reference_sizes(CODE_BREAKER, NUMBER_HUNT) == {}  # no shared parameter
    assert constructor_defaults("def broken(:") == {}


@pytest.mark.sandbox
def test_the_same_game_at_other_sizes_is_a_duplicate(policy):
    references = [Reference("number_hunt", NUMBER_HUNT)]
    config = VerifyConfig(max_similarity=1.0)  # the source check aside: behaviour alone
    verdict = verify(RETUNED, references=references, config=config, policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "duplicate", verdict.to_dict()
    assert verdict.failure.reason.startswith(
        "plays exactly like 'number_hunt' at its own sizes (top=999, guesses=10): identical"
    )
