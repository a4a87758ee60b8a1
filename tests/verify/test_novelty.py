"""The novelty check: near-verbatim copies and behavioural copies of references are duplicates."""

import itertools

import pytest

from spade.config import VerifyConfig
from spade.sandbox import JailedSession
from spade.verify import Reference, verify
from spade.verify.novelty import rank_references, similarity, source_tokens
from spade.verify.probes import near_misses
from spade.verify.wording import Wording, unechoed
from tests.verify.lookalikes import ADDED, COPIES, EXAMPLES, REWORDED, VARIANTS, edited
from tests.verify.test_verifier import GOOD

CODE_BREAKER = EXAMPLES["code_breaker"]
RENAMED = COPIES["renamed code_breaker"][1]
LETTERS = VARIANTS["letter code_breaker"][1]
CONFIG = VerifyConfig()
MAX_TOKENS = CONFIG.similarity_max_tokens


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
    # the probe seeds, then as many more before it is called a copy
    seeds = len(CONFIG.probe_seeds) + CONFIG.behaviour_confirm_seeds
    assert reason.startswith(
        f"plays exactly like 'pick': identical transcripts over {seeds} seeds x "
    )
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
    """code_breaker scores a game whose guesses ran out by its best guess; a rule paying half
    that differs on every such game, but only there. The near miss played once never ran the
    guesses out, and the designer's credit rewrites of it were judged duplicates (-1, its
    lowest reward: docs/results/designer_learnability.md). (Half, not twice: a miss paid more
    than the parent pays it is perverse_credit's to reject.)"""
    parent = EXAMPLES["code_breaker"]
    rule = "return 0.5 * self.best / self.length"
    assert rule in parent
    halved = parent.replace(rule, "return self.best / self.length / 4")
    verdict = verify(halved, references=[Reference("code_breaker", parent)], policy=policy)
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


def test_a_move_repeated_back_is_masked_where_both_games_repeat_it():
    said = unechoed("No: Ana does not own the cat.", "Nope, Ana has no CAT.", "ask Ana cat")
    assert said == ("No: <move> does not own the <move>.", "Nope, <move> has no <move>.")
    # a guess is masked wherever it is repeated; a word only one game repeats is kept
    assert unechoed("Too low.", "higher than 500", "500") == ("Too low.", "higher than <move>")
    assert unechoed("037 is low", "higher than 37", "037") == (
        "<move> is low",
        "higher than <move>",
    )
    assert unechoed("Walk a step.", "Move with N.", "step") == ("Walk a step.", "Move with N.")
    assert unechoed("You walk east.", "East it is.", "E") == ("You walk east.", "East it is.")


def _seen(wording: Wording, pairs: list[tuple[str, str]]) -> str:
    for turn, (mine, theirs) in enumerate(pairs, 1):
        assert wording.matches(mine, theirs)
        wording.record(mine, theirs, turn, "E", f"turn {turn}")
    return wording.new_number()


def test_a_number_the_reference_does_not_show_is_new_information():
    """Observations that never recur map one to one trivially; their numbers are evidence."""
    rooms = [(0, 1, 4), (1, 1, 3), (1, 2, 4), (2, 2, 1)]  # row, column, steps to the exit
    distance = [(f"At {r},{c}; exit {d} away.", f"At row {r}, col {c}.") for r, c, d in rooms]
    found = _seen(Wording(), distance)
    assert found.startswith("turn 2: its observation 'At 1,1; exit 3 away.' shows the number 3")
    # the same numbers reworded, counted from 1, or as moves used rather than left: no news
    one_based = [(f"Room {r + 1}-{c + 1}, {9 - t} used.", f"At row {r}, col {c}, {t} left.")
                 for t, (r, c, _) in enumerate(rooms)]  # fmt: skip
    assert _seen(Wording(), one_based) == ""
    assert _seen(Wording(), distance[:1]) == ""  # one step: no evidence either way


def test_near_misses_move_each_digit_both_ways_last_move_first():
    assert near_misses(["\\boxed{537}"], 12) == [
        [f"\\boxed{{{n}}}"] for n in (538, 536, 547, 527, 637, 437)
    ]
    probe_then_code = near_misses(["\\boxed{0123}", "\\boxed{3210}"], 12)
    assert len(probe_then_code) == 12 and probe_then_code[0] == ["\\boxed{0123}", "\\boxed{3211}"]
    assert probe_then_code[-4][0] == "\\boxed{0124}"  # then the probe's digits
    assert near_misses(["\\boxed{N}"], 12) == []


VERIFIER_SEEDS = (1234, 7, 99, 2024)


@pytest.mark.sandbox
@pytest.mark.parametrize("seed", VERIFIER_SEEDS)
@pytest.mark.parametrize("name", ADDED)
def test_a_clue_that_tells_more_than_its_parents_is_novel_on_every_verifier_seed(
    name, seed, policy
):
    """Each was a duplicate on some of these seeds when three seeds decided: what the clue
    adds was constant there, or followed the old clue one to one."""
    origin, code = ADDED[name]
    references = [Reference(origin, EXAMPLES[origin])]
    verdict = verify(code, references=references, config=VerifyConfig(seed=seed), policy=policy)
    assert verdict.accepted, verdict.to_dict()
    assert f"plays differently from {origin!r} (seed " in verdict.checks[-1].reason


@pytest.mark.sandbox
@pytest.mark.parametrize("seed", VERIFIER_SEEDS)
@pytest.mark.parametrize("name", REWORDED)
def test_a_clue_reworded_one_to_one_is_a_duplicate_on_every_verifier_seed(name, seed, policy):
    origin, code = REWORDED[name]
    references = [Reference(origin, EXAMPLES[origin])]
    config = VerifyConfig(seed=seed)
    verdict = verify(code, references=references, config=config, policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "duplicate", verdict.to_dict()
    seeds = len(config.probe_seeds) + config.behaviour_confirm_seeds
    assert verdict.failure.reason.startswith(
        f"plays exactly like {origin!r}: identical transcripts over {seeds} seeds x "
    )
    assert verdict.failure.reason.endswith("worded differently, one to one (the same clues)")


@pytest.mark.sandbox
def test_ownership_riddles_clue_answers_the_questions_its_solution_asks(policy):
    """Its ``clue`` (what the splice's ``clue`` directive rewrites) once wrote the opening's
    clues and nothing else: every rewrite of it played as its parent after the opening, a
    duplicate whatever it said. It now answers each question, and the solution asks some."""
    code = EXAMPLES["ownership_riddle"]
    with JailedSession(code, policy=policy) as session:
        for seed in VERIFIER_SEEDS:
            session.reset(seed)
            *asks, answer = session.solution()
            assert asks and all(a.startswith("\\boxed{ask ") for a in asks), (seed, asks)
            replies = [session.step(a)[0] for a in asks]
            assert all(r.startswith(("Yes: ", "No: ")) for r in replies), replies
            assert session.step(answer)[1:3] == (1.0, True)


@pytest.mark.sandbox
def test_ownership_riddle_with_only_its_opening_reworded_is_a_duplicate(policy):
    statement = 'return f"{name[p]} does not own the {pet[x]}.", lambda s: s[p] != x'
    reworded = edited(
        "ownership_riddle",
        (statement, statement.replace("does not own the", "is not the owner of the")),
    )
    references = [Reference("ownership_riddle", EXAMPLES["ownership_riddle"])]
    config = VerifyConfig(max_similarity=1.0)  # the source check aside: behaviour alone
    verdict = verify(reworded, references=references, config=config, policy=policy)
    assert verdict.failure is not None and verdict.failure.kind == "duplicate", verdict.to_dict()
    assert verdict.failure.reason.endswith("; only its opening is worded differently")
