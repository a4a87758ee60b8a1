"""The ``leaks_answer`` check: a game whose observations give the answer away is won by
reading, not by playing (issues 34 and 49). Learning readers fit a simple function from what
they see (the task text, the tool schemas, the answer to one probe) to the answer on some seeds
and play it on others. Each design here rewrites a bundled example as the designer would, with
the answer given away in another form or place; each must be rejected by a reader naming the
function it found. Every bundled and reference-pool game must pass, read by the same readers."""

from pathlib import Path

import pytest

from spade.config import VerifyConfig
from spade.envs.examples import example_paths
from spade.verify import Reference, verify
from spade.verify.places import TASK, Slot, features, in_words, template
from spade.verify.readers import fit, needed
from tests.verify.lookalikes import EXAMPLES, edited

pytestmark = pytest.mark.sandbox

POOL = Path(__file__).parents[1] / "fixtures" / "reference_pool" / "games"
REJECTED_EARLIER = ("game_broken_ledger", "game_fixed_lighthouses")

HUNT = EXAMPLES["number_hunt"]
CLUE = 'return f"My number is {direction} than {guess}."'
# the 0.5B coder's clue splice of number_hunt (issue 34): the clue names the hidden number
LEAKY_HUNT = HUNT.replace(
    CLUE,
    'return f"So {guess} is your guess? Not quite what I had in mind, my friend. Let me tell'
    " you a story while you think: once upon a time a traveller walked the long road from the"
    " hills down to the sea, counting the stones along the way and singing to the birds, and"
    ' when the sun went down I thought it was around around {self.number}, give or take."',
)

OPENING_END = 'f" {self.guesses} guesses."'
USED = "        self.used = 0\n"
SPLIT = (USED, USED + "        self.other = self.rng.randint(1, self.number)\n")  # a second value
SPELL = '''
_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "- - twenty thirty forty fifty sixty seventy eighty ninety".split()


def spell(n: int) -> str:
    """``n`` (1 to 999) in words."""
    words = []
    if n >= 100:
        words += [_ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10])
        n %= 10
    if n:
        words.append(_ONES[n])
    return " ".join(words)


class NumberHuntEnv'''


def opening(hint: str, *more: tuple[str, str]) -> str:
    """number_hunt with ``hint`` (an f-string's body) added to its task text."""
    return edited("number_hunt", *more, (OPENING_END, f'f" {{self.guesses}} guesses. {hint}"'))


def clue(hint: str) -> str:
    """number_hunt with ``hint`` added to the clue after every wrong guess."""
    told = f'return f"My number is {{direction}} than {{guess}}; {hint}."'
    return edited("number_hunt", (CLUE, told))


ORDER_ANSWER_ONLY = (  # order_fulfillment where the right total alone wins
    """        checks = [self.orders[self.target]["status"] == "shipped"]
        for sku, qty in sorted(items.items()):
            start = _REFILL if sku in self.short else self.original[sku]
            checks.append(self.products[sku]["stock"] == start - qty)
""",
    "        checks = []\n",
)
SCHEMA_LEAK = """    def tools(self) -> list:
        out = super().tools()
        total = getattr(self, "total", 0)
        out[0]["function"]["description"] += f" (Total due today: {total // 100}.{total % 100:02d}.)"
        return out

    def view(self, sku: str) -> dict:"""

# name -> (parent, design, what the reason must name)
LEAKS = {
    "plus a constant": (
        "number_hunt",
        opening("Hint: my number is 17 more than {self.number - 17}."),
        "plus 17",
    ),
    "times a constant": (
        "number_hunt",
        opening("Hint: twice my number is {2 * self.number}."),
        "times 1/2",
    ),
    "a constant minus it": (
        "number_hunt",
        opening("Hint: 1000 minus my number is {1000 - self.number}."),
        "subtracted from 1000",
    ),
    "a digit written after it": (
        "number_hunt",
        opening("Hint: my number with a 7 written after it is {self.number}7."),
        "divided by, rounded down, 10",
    ),
    "digits reversed": (
        "number_hunt",
        opening("Hint: my number backwards reads {str(self.number)[::-1]}."),
        "reversed",
    ),
    "in hexadecimal": (
        "number_hunt",
        opening("Hint: in hexadecimal my number is {self.number:x}."),
        "read in base 16",
    ),
    "in binary": (
        "number_hunt",
        opening("Hint: in binary my number is {self.number:b}."),
        "read in base 2",
    ),
    "in words": (
        "number_hunt",
        opening("Hint: my number is {spell(self.number)}.", ("\n\nclass NumberHuntEnv", SPELL)),
        "number in words",
    ),
    "its digits listed": (
        "number_hunt",
        opening("Hint: its digits are {', '.join(str(self.number))}."),
        "run of digits",
    ),
    "a sum of two values": (
        "number_hunt",
        opening("Hint: my number is {self.number - self.other} more than {self.other}.", SPLIT),
        "the sum of",
    ),
    "a sum and a product": (
        "number_hunt",
        opening(
            "Hint: my number and a smaller one add up to {self.number + self.other} and"
            " multiply to {self.number * self.other}.",
            SPLIT,
        ),
        "a root of",
    ),
    "a sum and a difference": (
        "number_hunt",
        opening(
            "Hint: my number and another add up to {self.number + self.other}; their"
            " difference is {self.number - self.other}.",
            SPLIT,
        ),
        "half the sum of",
    ),
    "deep in the task text": (
        "number_hunt",
        opening("{'Think carefully before you guess. ' * 400}(Psst: it is {self.number}.)"),
        "the number after 'is' of the task text",
    ),
    "after one probe, reversed": (
        "number_hunt",
        clue("read backwards, mine is {str(self.number)[::-1]}"),
        "reversed",
    ),
    "after one probe, plus a constant": (
        "number_hunt",
        clue("add 250 to {self.number - 250} and you have it"),
        "plus 250",
    ),
    "an anagram of each word": (
        "ownership_riddle",
        edited(
            "ownership_riddle",
            (
                'lines = "\\n".join(f"- {c}" for c in clues)',
                'lines = "\\n".join(f"- {c}" for c in clues) + "\\nScrambled pets: " + ", ".join('
                "f\"{self.people[p]} {''.join(sorted(self.pets[x]))}\" for p, x in enumerate(hidden))",
            ),
            (
                "self.hidden = self.rng.choice(perms)",
                "self.hidden = hidden = self.rng.choice(perms)",
            ),
        ),
        "unscrambled",
    ),
    "in a tool's JSON result": (
        "order_fulfillment",
        edited(
            "order_fulfillment",
            ORDER_ANSWER_ONLY,
            (
                'return {"order_id": oid, "status": order["status"], "items": items}',
                "total = self.total / 100 if oid == self.target else None\n"
                '        return {"order_id": oid, "status": order["status"], "items": items,'
                ' "total": total}',
            ),
        ),
        "of the first move of the solution",
    ),
    "in the task text, with the actions it dictates": (
        "order_fulfillment",
        edited(
            "order_fulfillment",
            ("rng.sample(sorted(items), rng.randint(1, 2))", "rng.sample(sorted(items), 1)"),
            (
                'f"Order {self.target} must ship today.',
                'f"(Desk note: {self.total} cents in all; low stock: {self.short[0]}.) "\n'
                '            f"Order {self.target} must ship today.',
            ),
        ),
        "times 1/100, after the solution's moves before its answer",
    ),
    "in the tool schemas": (
        "order_fulfillment",
        edited(
            "order_fulfillment",
            ORDER_ANSWER_ONLY,
            ("    def view(self, sku: str) -> dict:", SCHEMA_LEAK),
        ),
        "of the tool schemas",
    ),
}


def test_a_function_must_hold_on_all_fit_seeds_but_one_in_eight():
    assert [needed(n) for n in (1, 4, 7, 8, 16)] == [1, 4, 7, 7, 14]


def test_values_are_found_by_place_in_every_form():
    seen = features(TASK, "It is four hundred and seventeen; digits 4, 1, 7; code 0x1a3, c-a-t.")
    assert seen[(TASK, "number in words", "#1")] == "417"
    assert seen[(TASK, "run of digits", "after 'digits'")] == "417"
    assert seen[(TASK, "word", "after 'code'")] == "0x1a3"
    assert seen[(TASK, "run of letters", "#-1")] == "cat"
    assert in_words("four one seven") == "417" and in_words("twenty-one") == "21"
    assert features(TASK, "pay TX-100002")[(TASK, "number", "#1")] == "100002"


def test_the_answer_is_cut_into_its_changing_slots():
    form, values = template(["\\boxed{answer 1, -2, 0, 7}", "\\boxed{answer -3, 5, 0, 2}"])
    assert values == [["1", "-2", "7"], ["-3", "5", "2"]]
    assert form.fill(["4", "4", "4"]) == "\\boxed{answer 4, 4, 0, 4}"
    form, values = template(["<answer>12.50</answer>", "<answer>3.05</answer>"])
    assert form.slots == (Slot(2),) and form.fill(["1.00"]) == "<answer>1.00</answer>"
    form, values = template(["\\boxed{load 1, 4}", "\\boxed{load 2, 3, 5}"])
    assert values == [["1, 4"], ["2, 3, 5"]] and form.slots == (Slot(None),)
    assert template(["<answer>done</answer>"] * 3) is None


def test_a_fitted_function_must_hold_on_the_fit_seeds():
    numbers = [123, 456, 789, 321, 654, 987, 135, 246]
    seen = [
        {(TASK, "number", "#1"): str(n + 17), (TASK, "word", "#2"): str(n % 7)} for n in numbers
    ]
    answers = [f"\\boxed{{{n}}}" for n in numbers]
    readers, _ = fit(seen, answers, [[]] * 8, [])
    assert readers and readers[0].describe() == "the number #1 of the task text minus 17"
    assert readers[0].move({(TASK, "number", "#1"): "517"}, []) == "\\boxed{500}"
    shuffled = answers[1:] + answers[:1]  # the values no longer give the answer
    assert fit(seen, shuffled, [[]] * 8, [])[0] == []


def test_a_clue_that_prints_the_number_leaks_the_answer(policy):
    assert LEAKY_HUNT != HUNT
    verdict = verify(LEAKY_HUNT, policy=policy)
    assert verdict.failed_check == "leaks_answer", verdict.to_dict()
    assert verdict.failure is not None and verdict.failure.kind == "leaks_answer"
    assert verdict.failure.reason.startswith("a reader wins 8 of 8 seeds"), verdict.failure.reason


@pytest.mark.parametrize("name", list(LEAKS))
def test_the_answer_in_another_form_or_place_is_read(name, policy):
    parent, code, function = LEAKS[name]
    # other checks may reject some of these too (the scrambled pets repeat the task text to
    # ``informative``): waived here, this asks what the readers find
    config = VerifyConfig(waive=["seed_dependence", "informative"])
    references = [Reference(parent, EXAMPLES[parent])]
    verdict = verify(code, config=config, policy=policy, references=references)
    assert verdict.failed_check == "leaks_answer", verdict.to_dict()
    assert verdict.failure is not None
    assert function in verdict.failure.reason, verdict.failure.reason


def test_a_variant_of_a_parent_that_leaks_is_not_blamed_for_it(policy):
    variant = LEAKY_HUNT.replace("I thought it was around", "I had guessed around")
    parent = Reference("leaky_hunt", LEAKY_HUNT)
    verdict = verify(variant, policy=policy, references=[parent])
    leaks = next(c for c in verdict.checks if c.name == "leaks_answer")
    assert leaks.passed and "the leak is the parent's" in leaks.reason, leaks.reason


@pytest.mark.parametrize(
    "path", [*example_paths(), *sorted(POOL.glob("*.py"))], ids=lambda p: p.stem
)
def test_no_bundled_or_reference_game_is_read(path, policy):
    verdict = verify(path.read_text(), policy=policy)
    leaks = next((c for c in verdict.checks if c.name == "leaks_answer"), None)
    if path.stem in REJECTED_EARLIER:
        assert leaks is None and verdict.failed_check not in (None, "leaks_answer")
        return
    assert leaks is not None and leaks.passed, verdict.to_dict()
    # the readers ran: fitted on other seeds to the answer, none of them won
    assert leaks.reason.startswith("no reader wins"), leaks.reason
    assert "fitted on 8 other seeds" in leaks.reason, leaks.reason
