"""Skill rotation, the designer's prompts, and getting code and hints out of completions."""

from __future__ import annotations

import re

import pytest

from spade.config import COGNITIVE_SKILLS, TOOL_SKILLS
from spade.curriculum.memory import MemoryRecord
from spade.designer.extract import (
    clean_hint,
    echoes,
    extract_code,
    leaks_solution,
    parse_progress,
    repeats_itself,
)
from spade.designer.prompts import (
    FORMAT_EXAMPLE,
    GAME_CONTRACT,
    GAME_EDIT_CONTRACT,
    TOOL_CONTRACT,
    design_prompt,
    edit_prompt,
    hint_prompt,
    repair_message,
)
from spade.designer.skills import SKILL_DESCRIPTIONS, active_skills, slot_skills
from spade.envs.prelude import PRELUDE_MODULES, PRELUDE_NAMES
from spade.errors import DesignParseError

# ----------------------------------------------------------------------------- skills


def test_active_skills_round_robin_windows():
    s = COGNITIVE_SKILLS
    assert active_skills(s, 0, 3) == list(s[:3])
    assert active_skills(s, 1, 3) == list(s[3:])
    assert active_skills(s, 2, 3) == list(s[:3])
    assert active_skills(s, 3, 3) == list(s[3:])


def test_active_skills_cover_every_skill_evenly():
    # windows of 4 over 6 skills wrap around: after 3 regenerations each skill was active twice
    seen = [x for r in range(3) for x in active_skills(COGNITIVE_SKILLS, r, 4)]
    assert sorted(seen) == sorted(COGNITIVE_SKILLS * 2)
    assert active_skills(COGNITIVE_SKILLS, 1, 4) == [
        "optimization",
        "causal_inference",
        "mathematical_reasoning",
        "logical_deduction",
    ]


def test_active_skills_bounds():
    assert active_skills(TOOL_SKILLS, 0, 3) == list(TOOL_SKILLS[:3])
    assert active_skills(COGNITIVE_SKILLS, 5, 6) == list(COGNITIVE_SKILLS)
    assert active_skills(COGNITIVE_SKILLS, 0, 10) == list(COGNITIVE_SKILLS)  # at most n
    assert active_skills(COGNITIVE_SKILLS, 7, 1) == [COGNITIVE_SKILLS[1]]


def test_slot_skills_take_the_active_skills_in_turn():
    active = ["a", "b", "c"]
    assert slot_skills(active, 7) == ["a", "b", "c", "a", "b", "c", "a"]
    assert slot_skills(active, 2) == ["a", "b"]
    assert slot_skills(active, 0) == []
    assert slot_skills(active_skills(COGNITIVE_SKILLS, 0, 3), 24).count(COGNITIVE_SKILLS[0]) == 8


def test_every_skill_has_a_description():
    assert set(SKILL_DESCRIPTIONS) == set(COGNITIVE_SKILLS) | set(TOOL_SKILLS)


# ----------------------------------------------------------------------------- prompts


def _user(messages: list[dict[str, str]]) -> str:
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[1]["content"]


def test_design_prompt_for_games():
    doc = "The Bessemer process converts pig iron into steel by blowing air through it."
    text = _user(design_prompt(doc, "logical_deduction", tool_use=False))
    assert f"<document>\n{doc}\n</document>" in text
    assert "logical_deduction" in text and SKILL_DESCRIPTIONS["logical_deduction"] in text
    assert GAME_CONTRACT in text and TOOL_CONTRACT not in text
    assert "TextEnv" in text and "\\boxed" in text
    assert "```python" in text  # asks for one python block
    assert "Good earlier design" not in text and "Avoid designs" not in text


def test_design_prompt_for_tool_use():
    text = _user(design_prompt("A small shop's inventory.", "data_retrieval", tool_use=True))
    assert TOOL_CONTRACT in text and GAME_CONTRACT not in text
    assert "ToolUseEnv" in text and "<tool_call>" in text and "<answer>" in text
    assert SKILL_DESCRIPTIONS["data_retrieval"] in text


def test_design_prompt_shows_examples_with_their_stats():
    good1 = MemoryRecord("g1", "optimization", "class KnapEnv: # GOOD-ONE", 0.5, 0.25)
    good2 = MemoryRecord("g2", "optimization", "class RouteEnv: # GOOD-TWO", 0.15, 0.8)
    easy = MemoryRecord("e1", "optimization", "class TrivialEnv: # EASY", 0.95, 0.0)
    hard = MemoryRecord("h1", "pattern_recognition", "class ImpossibleEnv: # HARD", 0.0, None)
    text = _user(
        design_prompt(
            "doc",
            "optimization",
            tool_use=False,
            positives=[good1, good2],
            negatives=[(easy, "too easy"), (hard, "too hard")],
        )
    )
    assert "### Good earlier design 1 (agent win rate 0.50, regret 0.25)" in text
    assert "### Good earlier design 2 (agent win rate 0.15, regret 0.80)" in text
    assert "```python\nclass KnapEnv: # GOOD-ONE\n```" in text
    assert "class RouteEnv: # GOOD-TWO" in text
    assert "### Avoid designs like this one: too easy (agent win rate 0.95, regret 0.00)" in text
    assert "### Avoid designs like this one: too hard (agent win rate 0.00)" in text
    assert "class TrivialEnv: # EASY" in text and "class ImpossibleEnv: # HARD" in text
    # order: contract, skill, document, positives, negatives, the final instruction
    order = [
        text.index(s)
        for s in ("Target skill", "<document>", "GOOD-ONE", "GOOD-TWO", "EASY", "HARD")
    ]
    assert order == sorted(order)
    assert text.rstrip().endswith("nothing else.")


def test_unplayed_examples_say_where_they_come_from():
    seeded = MemoryRecord("s", "optimization", "class SeededEnv: # SEEDED", round=-1)
    text = _user(design_prompt("doc", "optimization", tool_use=False, positives=[seeded]))
    assert "### Good earlier design 1 (from the seed pool, not yet played)" in text
    assert "class SeededEnv: # SEEDED" in text


def test_contracts_state_the_prelude_and_the_near_misses():
    for contract, bases in (
        (GAME_CONTRACT, ["TextEnv"]),
        (TOOL_CONTRACT, ["ToolUseEnv", "ToolError"]),
    ):
        line = next(x for x in contract.splitlines() if x.startswith("No imports are needed"))
        named = set(re.findall(r"\w+", line))
        assert set(bases) | set(PRELUDE_MODULES) | {"dataclass", "field"} <= named
        # every typing name said to be there is one the prelude binds
        shown = re.search(r"such as (.*?) are already", line).group(1).split(", ")  # type: ignore[union-attr]
        assert set(shown) <= set(PRELUDE_NAMES["typing"])
        # nothing in it reads like an import line a small model would copy (`..., ...`)
        assert "..." not in line and "import " not in line
        for rule in ("overriding reset or step", "@dataclass on the Env class", "never defined"):
            assert rule in contract


def test_examples_are_framed_as_format_not_as_something_to_copy():
    good = MemoryRecord("g1", "optimization", "class KnapEnv: # GOOD-ONE", 0.5, 0.25)
    text = _user(design_prompt("doc", "optimization", tool_use=False, positives=[good]))
    assert "Do not copy them: your environment must be about the document" in text
    assert text.index("Do not copy them") < text.index("GOOD-ONE")
    assert "Do not copy" not in _user(design_prompt("doc", "optimization", tool_use=False))


def test_edit_prompt_holds_the_whole_parent_the_document_and_the_skill():
    parent = MemoryRecord("p", "logical_deduction", "class ParentEnv(TextEnv):\n    pass\n")
    doc = "Copper was smelted in Cyprus."
    text = _user(edit_prompt(doc, "optimization", tool_use=False, parent=parent))
    assert (
        f"```python\n{parent.code_head}\n```" in text and f"<document>\n{doc}\n</document>" in text
    )
    assert GAME_EDIT_CONTRACT in text and "Target skill: optimization" in text
    assert 'skill = "optimization"' in text and "rejected as a duplicate" in text
    assert text.index("<document>") < text.index("ParentEnv") < text.index("Turn it into")
    assert TOOL_CONTRACT in _user(edit_prompt(doc, "data_retrieval", tool_use=True, parent=parent))


def test_repair_message_names_the_check_the_reason_and_the_traceback():
    text = repair_message("crash", "NameError: name 'helper' is not defined", "step_contract",
                          "File \"env.py\", line 9, in play\nNameError: name 'helper'")  # fmt: skip
    assert text.startswith(
        "Your module was rejected by the check `step_contract` (crash): NameError"
    )
    assert "```\nFile \"env.py\", line 9, in play\nNameError: name 'helper'\n```" in text
    assert text.endswith(
        "Answer with the whole corrected module in one ```python code block and nothing else."
    )
    parse = repair_message("parse", "the code block is not closed")
    assert parse.startswith("Your answer could not be used (parse): the code block is not closed")
    assert "```\n" not in parse.split("\n\n")[0]


def test_hint_prompt_asks_for_the_configured_number_of_sentences():
    assert "1 to 5 sentences" in _user(hint_prompt("class XEnv: pass", max_sentences=5))
    one = _user(hint_prompt("class XEnv: pass", max_sentences=1))
    assert "hint of 1 sentence that" in one and "1 to" not in one


def test_hint_prompt_includes_the_code():
    code = "class SecretEnv:\n    def solution(self):\n        return ['\\\\boxed{42}']\n"
    messages = hint_prompt(code)
    text = _user(messages)
    assert f"```python\n{code}\n```" in text
    assert "1 to 3 sentences" in text and "do not reveal" in text


# ----------------------------------------------------------------------------- extract_code

ENV = "from spade.envs import TextEnv\n\n\nclass SmallEnv(TextEnv):\n    skill = 'x'\n"
LONG_ENV = ENV.replace("SmallEnv", "BiggerEnv") + "\n    def extra(self):\n        return 1\n"


def test_extract_fenced_python_block():
    completion = f"Here is the environment:\n\n```python\n{ENV}```\n\nEnjoy!"
    assert extract_code(completion) == ENV


@pytest.mark.parametrize("lang", ["", "py", "Python", "python3"])
def test_extract_accepts_python_fence_variants(lang):
    assert extract_code(f"```{lang}\n{ENV}```") == ENV


def test_extract_longest_of_several_env_blocks():
    completion = (
        f"First try:\n```python\n{ENV}```\nBetter:\n```python\n{LONG_ENV}```\n"
        "Usage:\n```python\nenv = BiggerEnv()\nenv.reset()\n```\n"
        "```bash\nclass NotPythonEnv: pass\n" + "x = 1\n" * 50 + "```\n"
    )
    assert extract_code(completion) == LONG_ENV


def test_extract_unfenced_module():
    assert extract_code("\n\n" + ENV + "\n\n") == ENV


def test_extract_ignores_think_blocks():
    thinking = "<think>Maybe:\n```python\n" + LONG_ENV + "```\nno, simpler.</think>"
    assert extract_code(thinking + f"\n```python\n{ENV}```") == ENV
    # an unfenced module after the thinking, whose thinking has a stray fence
    assert extract_code("<think>draft ``` here</think>\n" + ENV) == ENV


def test_extract_unclosed_fence_says_it_was_cut_off():
    with pytest.raises(DesignParseError, match=r"not closed.*cut off"):
        extract_code(f"```python\n{ENV}    def play(self, mo")


def test_parse_progress_grades_cut_off_code_by_the_share_that_parses():
    whole = "import re\n\n\nclass AEnv:\n    def f(self):\n        return 1\n"
    tail = "```python\n" + whole + "\nif __name__ == '__main__':\n    AEnv().f(\n"
    mid = "```python\n" + whole.replace("return 1", "return (1")
    assert parse_progress(tail) > parse_progress(mid) > 0.0  # the import parses
    assert parse_progress("<think>```</think>" + tail) == parse_progress(tail)
    for done in ("```python\n" + whole + "```\n", "no code at all", ""):
        assert parse_progress(done) == 0.0  # nothing was cut off


def test_extract_without_code_is_an_error():
    with pytest.raises(DesignParseError, match="no Python code block"):
        extract_code("I cannot design an environment for this document.")
    with pytest.raises(DesignParseError, match="no Python code block"):
        extract_code("<think>```python\n" + ENV + "```</think>Sorry.")


def test_extract_blocks_without_an_env_class_is_an_error():
    with pytest.raises(DesignParseError, match="ends in 'Env'"):
        extract_code("```python\nclass Game:\n    pass\n```")
    with pytest.raises(DesignParseError):
        extract_code("```python\nclass EnvFactory:\n    pass\n```")


# ----------------------------------------------------------------------------- clean_hint


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("Hint: Try small numbers first.", "Try small numbers first."),
        ("STRATEGY:  Work backwards.", "Work backwards."),
        ('"Work backwards from the goal."', "Work backwards from the goal."),
        ('  "Hint: Split the range in half."  ', "Split the range in half."),
        ("<think>the answer is 7</think>Halve the interval.", "Halve the interval."),
        ("Track\n  every   clue.\n\nEliminate options.", "Track every clue. Eliminate options."),
    ],
)
def test_clean_hint_strips_labels_quotes_and_thinking(completion, expected):
    assert clean_hint(completion) == expected


@pytest.mark.parametrize(
    "completion", ['Hint: "Work backwards."', "**Hint:** Work backwards."], ids=["quoted", "bold"]
)
def test_clean_hint_strips_a_label_before_quotes_and_markdown_labels(completion):
    assert clean_hint(completion) == "Work backwards."


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ('The hint is "A lamp changes when toggled.', "A lamp changes when toggled."),  # 1.5B
        ("The hint is: 'The hint is: 'Halve it.'", "Halve it.'"),  # nested labels
        ("Here is a hint: go left.", "go left."),
        ("Strategy hint: halve.", "halve."),
        ("The strategy is simple: halve.", "The strategy is simple: halve."),  # a sentence
        ("Strategy is key.", "Strategy is key."),
        ("hinting helps", "hinting helps"),  # a word that starts like a label
    ],
)
def test_clean_hint_strips_sentence_labels_but_not_sentences(completion, expected):
    assert clean_hint(completion) == expected


def test_a_hint_repeats_itself_when_a_run_of_words_comes_three_times():
    assert repeats_itself("the hint is: " * 4)  # "the hint is: the" three times
    assert not repeats_itself("Guess the middle, then halve the range that is still possible.")
    assert not repeats_itself("the hint is: " * 3)  # each run of four words twice: no loop


def test_a_hint_echoes_the_request_when_it_repeats_eight_of_its_words_in_a_row():
    request = "Write a hint that lets the player do what solution() does without seeing it"
    assert echoes("Lets the player do what solution() does without seeing it.", request)
    assert not echoes("Guess the middle of the range that is still possible.", request)
    assert not echoes("The player do what solution does.", request)  # 6 words: a phrase


def test_clean_hint_keeps_at_most_three_sentences():
    hint = clean_hint("One. Two! Three? Four. Five.")
    assert hint == "One. Two! Three?"
    assert clean_hint("One. Two. Three. Four.", max_sentences=1) == "One."


def test_clean_hint_bounds_the_length():
    assert len(clean_hint("x" * 5000)) == 600
    assert clean_hint("   ") == "" and clean_hint("<think>only thoughts</think>") == ""


# ----------------------------------------------------------------------------- leaks_solution


@pytest.mark.parametrize(
    ("hint", "solution", "leaks"),
    [
        ("The code is 4071, try it.", ["\\boxed{4071}"], True),
        ("Try COBALT first.", ["\\boxed{cobalt}"], True),  # case-insensitive
        ("Guess digits one at a time.", ["\\boxed{4071}"], False),
        (
            "The answer is paris.",
            ['<tool_call>{"name": "a"}</tool_call>', "<answer>Paris</answer>"],
            True,
        ),
        ("Look the city up first.", ["<answer>Paris</answer>"], False),
        ("Press 7 then 8.", ["\\boxed{7}", "\\boxed{8}"], False),  # under 3 characters
        ("Go north, north, east.", ["\\boxed{north}", "\\boxed{east}"], True),  # one move suffices
        ("Any hint at all.", [], False),
        ("Use the tool named lookup.", ['<tool_call>{"name": "lookup"}</tool_call>'], False),
    ],
)
def test_leaks_solution(hint, solution, leaks):
    assert leaks_solution(hint, solution) is leaks


def test_edit_prompts_name_the_parents_module_level_definitions():
    """Small models keep an edited parent's class and drop the constants above it."""
    from spade.designer.prompts import edit_prompt, module_level_names

    code = "import re\n_QUERY = re.compile('x')\ndef _helper():\n    return 1\nclass AEnv(TextEnv):\n    pass\n"
    assert module_level_names(code) == ["_QUERY", "_helper"]
    assert module_level_names("class (:") == []
    parent = MemoryRecord("p", "optimization", code, None, None)
    text = _user(edit_prompt("doc", "optimization", tool_use=False, parent=parent))
    assert "(_QUERY, _helper): keep those" in text
    assert FORMAT_EXAMPLE not in text  # the parent shows the format; no second thing to copy
    assert FORMAT_EXAMPLE in _user(design_prompt("doc", "optimization", tool_use=False))


# ------------------------------------------------- linear time on model-supplied text (issue 12)

_PIECES = ["<answer>", "</answer>", "\\boxed{", "{", "}", "```", "\n", " py", "<think>", "</think>"]


def test_linear_extraction_finds_what_the_regexes_found():
    import random

    from spade.designer.extract import drop_thinking, fenced_blocks, move_contents

    fence = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
    moves = re.compile(r"\\boxed\{(.*)\}|<answer>(.*?)</answer>", re.DOTALL)
    rng = random.Random(12)
    for _ in range(5000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 12)))
        assert fenced_blocks(text) == fence.findall(text), text
        assert move_contents(text) == ["".join(m) for m in moves.findall(text)], text
        thinking = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL)
        assert drop_thinking(text) == thinking, text


MEGABYTE = 1 << 20


@pytest.mark.attack
@pytest.mark.timeout(60, method="thread")
@pytest.mark.parametrize("unit", ["\\boxed{", "<answer>", "<answer>x</answer>\\boxed{"])
def test_leak_check_of_a_megabyte_solution_is_linear(unit):
    """The leak check's ``\\boxed\\{(.*)\\}`` rescanned the rest of the action from every
    ``\\boxed{`` (0.26 s for 20 KB, 5.7 s for 80 KB: minutes for the 1 MB a reply may hold)."""
    action = unit * (MEGABYTE // len(unit)) + "}"
    assert leaks_solution("a hint", [action]) is False


@pytest.mark.attack
@pytest.mark.timeout(60, method="thread")
@pytest.mark.parametrize("unit", ["```", "<think>", "```python\n"])
def test_code_extraction_from_a_megabyte_completion_is_linear(unit):
    completion = unit * (MEGABYTE // len(unit))
    with pytest.raises(DesignParseError):
        extract_code(completion)
    parse_progress(completion)
    clean_hint(completion)


def test_every_hint_prompt_the_config_names_exists_and_includes_code_and_length():
    from typing import get_args

    from spade.config import DesignerConfig
    from spade.designer.prompts import HINT_PROMPTS

    names = get_args(DesignerConfig.model_fields["hint_prompt"].annotation)
    assert set(names) == set(HINT_PROMPTS)
    for make in HINT_PROMPTS.values():
        user = _user(make("class XEnv:\n    def solution(self): ...", max_sentences=2))
        assert "def solution(self)" in user and "1 to 2 sentences" in user
    procedure = _user(HINT_PROMPTS["procedure"]("class XEnv: pass", 3))
    assert "form of a move" in procedure and "Never state a hidden value" in procedure
