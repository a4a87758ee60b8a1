"""The novelty check: near-verbatim copies and behavioural copies of references are duplicates."""

import itertools

import pytest

from spade.envs.examples import example_paths
from spade.verify import Reference, VerifyConfig, verify
from spade.verify.novelty import rank_references, similarity, source_tokens
from tests.verify.test_verifier import GOOD

EXAMPLES = {p.stem: p.read_text() for p in example_paths()}
CODE_BREAKER = EXAMPLES["code_breaker"]


def edited(code: str, *changes: tuple[str, str]) -> str:
    for old, new in changes:
        assert old in code, f"the example changed: {old!r} is gone"
        code = code.replace(old, new)
    return code


# A renamed copy: the class, attributes and prose renamed, comments added, code untouched.
RENAMED = edited(
    CODE_BREAKER,
    ("CodeBreakerEnv", "VaultCrackerEnv"),
    ("self.code", "self.combination"),
    ("self.best", "self.top"),
    ("self.used", "self.tries_so_far"),
    ("Code breaker (logical deduction)", "Vault cracker"),
    ("        self.length = length\n", "        self.length = length  # digits in the code\n\n"),
)
# A small real variant: a code of letters A-H instead of digits.
LETTERS = edited(
    CODE_BREAKER,
    ("CodeBreakerEnv", "LetterLockEnv"),
    ('"0123456789"', '"ABCDEFGH"'),
    ("distinct digits (0-9)", "distinct letters (A-H)"),
    ("\\\\boxed{{0123}}", "\\\\boxed{{ABCD}}"),
    ("not guess.isdigit()", 'not set(guess) <= set("ABCDEFGH")'),
    ('guess = move.replace(" ", "")', 'guess = move.replace(" ", "").upper()'),
    ("give {self.length} distinct digits", "give {self.length} distinct letters A-H"),
    ("how many digits", "how many letters"),
)

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
    tokens = source_tokens(CODE_BREAKER, 10_000)
    assert similarity(tokens, source_tokens(RENAMED, 10_000)) == 1.0
    assert similarity(tokens, source_tokens(LETTERS, 10_000)) < 1.0
    assert source_tokens(CODE_BREAKER, 50) == tokens[:50]


def test_bundled_examples_are_far_apart_and_copies_are_not():
    cfg = VerifyConfig()
    tokens = {k: source_tokens(v, cfg.similarity_max_tokens) for k, v in EXAMPLES.items()}
    closest = max(similarity(tokens[a], tokens[b]) for a, b in itertools.permutations(tokens, 2))
    letters = similarity(source_tokens(LETTERS, cfg.similarity_max_tokens), tokens["code_breaker"])
    assert closest < letters < cfg.max_similarity


def test_ranking_keeps_the_exact_top_references():
    refs = [Reference(k, v) for k, v in EXAMPLES.items()]
    full = rank_references(LETTERS, refs, keep=len(refs), max_tokens=6000)
    top2 = rank_references(LETTERS, refs, keep=2, max_tokens=6000)
    assert top2.top == full.top[:2] and top2.compared == full.compared == len(refs)
    assert top2.top[0].reference.name == "code_breaker"
    exact = [similarity(source_tokens(LETTERS, 6000), source_tokens(r.code, 6000)) for r in refs]
    assert [s.similarity for s in full.top] == sorted(exact, reverse=True)


@pytest.mark.sandbox
def test_a_renamed_copy_is_a_duplicate():
    refs = [Reference(k, v) for k, v in EXAMPLES.items()]
    verdict = verify(RENAMED, references=refs)
    assert verdict.failure is not None and verdict.failure.kind == "duplicate"
    assert verdict.failed_check == "novelty"
    assert verdict.failure.reason == (
        "a near-verbatim copy of 'code_breaker': source similarity 1.000 >= 0.99"
    )


@pytest.mark.sandbox
def test_a_small_real_variant_is_novel():
    refs = [Reference(k, v) for k, v in EXAMPLES.items()]
    verdict = verify(LETTERS, references=refs)
    assert verdict.accepted, verdict.to_dict()
    reason = verdict.checks[-1].reason
    assert reason.startswith("closest of 9: 'code_breaker', source similarity 0.9")
    assert "plays differently from 'code_breaker' (seed 1234, solution play: first" in reason


@pytest.mark.sandbox
def test_a_design_that_plays_exactly_like_a_reference_is_a_duplicate():
    verdict = verify(CLONE, references=[Reference("pick", GOOD)])
    assert verdict.failure is not None and verdict.failure.kind == "duplicate", verdict.to_dict()
    reason = verdict.failure.reason
    assert reason.startswith("plays exactly like 'pick': identical transcripts over 3 seeds x ")
    text = float(reason.rsplit("source similarity ", 1)[1].rstrip(")"))
    assert text < VerifyConfig().max_similarity  # the sources alone do not give it away
    # Without the side-by-side play it passes: the behaviour is what gives it away.
    assert verify(
        CLONE, references=[Reference("pick", GOOD)], config=VerifyConfig(behaviour_references=0)
    ).accepted


@pytest.mark.sandbox
def test_a_reference_that_differs_in_one_reply_is_not_a_duplicate():
    other = GOOD.replace('return "yes", 1.0, True', 'return "yes!", 1.0, True')
    verdict = verify(CLONE, references=[Reference("pick", other)])
    assert verdict.accepted, verdict.to_dict()
    assert "plays differently from 'pick' (seed 1234, solution play, action 1: results" in (
        verdict.checks[-1].reason
    )


@pytest.mark.sandbox
def test_references_that_do_not_parse_or_load_are_skipped_with_a_note():
    refs = [
        Reference("garbled", "def (:"),
        Reference("broken", "from spade.envs import TextEnv\nraise RuntimeError('no')\n"),
    ]
    verdict = verify(GOOD, references=refs)
    assert verdict.accepted, verdict.to_dict()
    reason = verdict.checks[-1].reason
    assert reason.startswith("closest of 1: 'broken', source similarity ")
    assert "reference 'garbled' skipped: its source does not parse" in reason
    assert "reference 'broken' skipped: it does not load (crash: RuntimeError: no)" in reason


@pytest.mark.sandbox
def test_without_references_nothing_is_compared():
    verdict = verify(GOOD)
    assert verdict.checks[-1].name == "novelty" and verdict.checks[-1].passed
    assert verdict.checks[-1].reason == "no references to compare with"
