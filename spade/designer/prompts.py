"""The designer's prompts: write an environment from a document (or edit one into a new one),
repair a rejected design, and write a hint for one.

Written for this project. The environment contract they describe is docs/architecture.md §3, with
the names the jail binds before a design runs (:mod:`spade.envs.prelude`) and the near misses that
get small models' designs rejected. Examples come from the environment memory (good designs of
the same skill, and one that was too easy or too hard) and are always whole: a class cut in the
middle is what a small model copies.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from spade.curriculum.memory import MemoryRecord
from spade.designer.directives import Directive
from spade.designer.skills import SKILL_DESCRIPTIONS
from spade.designer.splice import SplicePlan, parent_frame
from spade.envs.prelude import PRELUDE_MODULES
from spade.pysource import PARSE_ERRORS, parse_module

Example = MemoryRecord

_TYPING_SHOWN = ("List", "Dict", "Optional")


def _prelude(bases: tuple[str, ...]) -> str:
    """What the jail binds before a design runs (:mod:`spade.envs.prelude`; of its base
    classes, those of the mode), said as a sentence: small models copy a list written like an
    import line into one (``from typing import Any, ...`` is a syntax error)."""
    return (
        f"No imports are needed: {' and '.join(bases)}, the modules"
        f" {', '.join(PRELUDE_MODULES)}, dataclass and field, and typing names such as"
        f" {', '.join(_TYPING_SHOWN)} are already defined. Import nothing else."
    )


_NEAR_MISSES = (
    "Mistakes that get designs rejected: overriding reset or step (the base class has them and"
    " calls your methods); setup not returning the task text (a str); {returns};"
    " @dataclass on the Env class; using a name (a constant, a helper"
    " method) you never defined in your module; a module too long to finish (keep it short)."
)

# A complete game in the contract's format: small models write the format far more reliably
# from a whole working example than from stub signatures (they kept the stubs' `...` and
# indented a body under them). It is also a reference of every game design's novelty check
# (see :func:`contract_references`): a copy of it is a duplicate.
FORMAT_EXAMPLE = """class GuessEnv(TextEnv):
    skill = "logical_deduction"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 1000)
        self.left = 10
        return "Guess my number from 1 to 1000: write \\\\boxed{n}. You have 10 guesses."

    def play(self, move: str) -> tuple[str, float, bool]:
        if not move.strip().isdigit():
            return "Write a whole number, e.g. \\\\boxed{500}.", 0.0, False
        guess = int(move)
        self.left -= 1
        if guess == self.secret:
            return "Correct!", 1.0, True
        if self.left == 0:
            return f"No guesses left; it was {self.secret}.", 0.0, True
        hint = "higher" if guess < self.secret else "lower"
        return f"{guess} is wrong, go {hint}. {self.left} left.", 0.0, False

    def solution(self) -> list[str]:
        return ["\\\\boxed{" + str(self.secret) + "}"]
"""

_GAME_RULES = f"""\
Rules: all randomness from self.rng (each seed a different instance); the task must need
several turns of interaction (hidden state revealed by feedback); the episode must end within
25 turns whatever is played (limit guesses or actions); reward 1.0 only for full success,
partial credit in (0, 1) when the episode ends partly right, 0 otherwise; a move play cannot
use gets a helpful message (return it, or raise ValueError("why"): the agent is shown why);
no file, network, os or sys access, no printing.
{_prelude(("TextEnv",))}
{_NEAR_MISSES.format(returns="play returning anything but (feedback, reward, done)")}"""

_GAME_SHAPE = """\
Write ONE Python module defining ONE class whose name ends in `Env` and subclasses TextEnv:
setup() builds the hidden state from self.rng and returns the task text; play(move) gets the
text inside one \\boxed{...} and returns (feedback, reward, done); solution() returns moves
that win this instance."""

GAME_CONTRACT = f"""\
{_GAME_SHAPE} The format, on a different game (do not copy it):
```python
{FORMAT_EXAMPLE}```
{_GAME_RULES}"""

# What an edit is told of the contract: the parent it edits shows the format, so the format
# example (a second thing to copy, ~250 tokens) is left out.
GAME_EDIT_CONTRACT = f"{_GAME_SHAPE}\n{_GAME_RULES}"

TOOL_CONTRACT = f"""\
Write ONE Python module defining ONE class whose name ends in `Env`:

    class SomethingEnv(ToolUseEnv):
        skill = "<skill>"

        def setup(self) -> str:
            # build hidden state (a small database, an API) from self.rng; return the task
            self.stock = {{"a": self.rng.randint(1, 9)}}
            return "How many items of a are in stock?"

        def tool_lookup(self, key: str) -> dict:
            \"\"\"What the tool does.

            Args:
                key: what it means
            \"\"\"
            if key not in self.stock:
                raise ToolError(f"no item {{key}}")
            return {{"count": self.stock[key]}}

        def check_answer(self, answer: str) -> float:
            # 1.0 right, partial credit in (0, 1), else 0
            return 1.0 if answer.strip() == str(self.stock["a"]) else 0.0

        def solution(self) -> list[str]:
            # tool calls then the answer
            return ['<tool_call>{{"name": "lookup", "arguments": {{"key": "a"}}}}</tool_call>',
                    f"<answer>{{self.stock['a']}}</answer>"]

Rules: the task must need several tool calls whose results the agent cannot guess; raise
ToolError for bad requests (the agent sees the message); all randomness from self.rng (each
seed a different instance); no file, network, os or sys access, no printing.
{_prelude(("ToolUseEnv", "ToolError"))}
{_NEAR_MISSES.format(returns="check_answer returning anything but a float")}"""


def contract_references(tool_use: bool) -> list[dict[str, str]]:
    """Designs every attempt must not copy because its contract shows them (the game format
    example); ``{"name", "code"}`` as :attr:`DesignAttempt.references` holds them."""
    return [] if tool_use else [{"name": "format_example", "code": FORMAT_EXAMPLE}]


_ROLE = (
    "You design training environments for a reasoning agent. An environment is an "
    "interactive, multi-turn task with hidden state, rewards and a reference solution."
)
_ANSWER = "Answer with the complete module in one ```python code block and nothing else."
_EXAMPLES = (
    "The examples below show the format only. Do not copy them: your environment must be about"
    " the document, with its own hidden state and rules."
)


def _example_block(title: str, ex: Example) -> str:
    stats = []
    if ex.win_rate is not None:
        stats.append(f"agent win rate {ex.win_rate:.2f}")
    if ex.regret is not None:
        stats.append(f"regret {ex.regret:.2f}")
    if not stats:  # seeded from a pool, never played (the memory shows these as positives)
        stats.append("from the seed pool, not yet played")
    return f"### {title} ({', '.join(stats)})\n```python\n{ex.code_head}\n```"


def _opening(document: str, skill: str, tool_use: bool, *, edit: bool = False) -> list[str]:
    game = GAME_EDIT_CONTRACT if edit else GAME_CONTRACT
    return [
        _ROLE,
        TOOL_CONTRACT if tool_use else game,
        f"Target skill: {skill} ({SKILL_DESCRIPTIONS.get(skill, skill)}). The best environments "
        "are hard enough that the agent often fails without help, yet clearly solvable.",
        f"Ground the environment in this document (use its entities, facts or numbers):\n"
        f"<document>\n{document}\n</document>",
    ]


def _messages(parts: list[str]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You write correct, self-contained Python."},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def design_prompt(
    document: str,
    skill: str,
    *,
    tool_use: bool,
    positives: Sequence[Example] = (),
    negatives: Sequence[tuple[Example, str]] = (),
) -> list[dict[str, str]]:
    """Chat messages asking for a new environment grounded on ``document`` for ``skill`` (the
    write strategy), with memory examples as inspiration.

    ``negatives`` pairs each example with its label ("too easy" / "too hard"). Examples are
    shown as they are: the caller passes whole code only
    (:meth:`~spade.curriculum.memory.EnvironmentMemory.examples_for`).
    """
    parts = _opening(document, skill, tool_use)
    if positives or negatives:
        parts.append(_EXAMPLES)
    for i, ex in enumerate(positives, 1):
        parts.append(_example_block(f"Good earlier design {i}", ex))
    for ex, label in negatives:
        parts.append(_example_block(f"Avoid designs like this one: {label}", ex))
    parts.append(_ANSWER)
    return _messages(parts)


def edit_prompt(
    document: str, skill: str, *, tool_use: bool, parent: Example
) -> list[dict[str, str]]:
    """Chat messages asking to mutate ``parent`` (a whole, working environment) into a new one
    grounded on ``document`` for ``skill`` (the edit strategy: ACCEL's level editing).

    Small models keep the parent's class and drop the lines above it, then fail on a name the
    class uses (``NameError: _QUERY``): the module-level names the parent defines are named.
    """
    parts = _opening(document, skill, tool_use, edit=True)
    parts.append(
        f"Here is a working environment that passes every check:\n```python\n{parent.code_head}\n```"
    )
    if names := module_level_names(parent.code_head):
        listed = ", ".join(names)
        parts.append(f"Its class uses what the module defines above it ({listed}): keep those.")
    parts += [
        "Turn it into a NEW environment about the document: keep its structure and the contract,"
        " but give it a new theme, names and numbers from the document, new hidden state and new"
        f' rules or feedback, and skill = "{skill}". A renamed copy is rejected as a duplicate.',
        _ANSWER,
    ]
    return _messages(parts)


_SPLICE_HOOKS = {
    True: "setup() builds the hidden state from self.rng and returns the task text (a str);"
    " play(move) gets the text inside one \\boxed{...} and returns (feedback, reward, done),"
    " reward 1.0 for full success and partial credit in (0, 1); solution() returns moves that"
    " win this instance.",
    False: "setup() builds the hidden state from self.rng and returns the task text (a str);"
    " check_answer(answer) returns a float, 1.0 right and partial credit in (0, 1);"
    " solution() returns the tool calls and then the answer that win this instance.",
}
"""What a splice is told of the hooks it rewrites: a game's (with ``play``) or a tool-use
environment's."""


def _needs(plan: SplicePlan) -> str:
    """What the kept helpers need from the answer's setup, as a sentence (or nothing)."""
    if not plan.needed:
        return ""
    return (
        f" Its methods {', '.join(plan.helpers)} read {', '.join(plan.needed)}: if you call"
        " them, setup must assign those."
    )


def _assigned_where(plan: SplicePlan) -> str:
    """Where the attributes an answer reads come from: its own setup, or the parent's."""
    if "setup" in plan.asked:
        return "; any other attribute your methods read must be assigned in setup."
    return (
        ", and what the setup above assigns; an attribute it does not assign must be assigned"
        " in your methods before it is read."
    )


def splice_prompt(
    document: str,
    skill: str,
    *,
    parent: Example,
    directive: Directive,
    plan: SplicePlan,
) -> list[dict[str, str]]:
    """Chat messages asking for new versions of a few methods of ``parent`` (the splice
    strategy, :mod:`spade.designer.splice`): one rule-level ``directive`` and a re-theming on
    ``document``. The answer's shape is not left to these words: the request is prefilled with
    the first method's signature and stops at anything else (``plan``)."""
    if directive.rule:
        return _rule_prompt(document, skill, parent=parent, directive=directive, plan=plan)
    asked = ", ".join(plan.asked)
    kept = ", ".join(["__init__", *plan.helpers]) if plan.helpers else "__init__"
    has = ", ".join([*plan.attributes, "self.rng", "self.turn", "self.max_turns"])
    parts = [
        _ROLE,
        "Here is a working environment without its methods"
        f" {asked}:\n```python\n{parent_frame(parent.code_head, plan.asked)}```",
        f"Make a NEW game out of it by writing the methods {asked}. The change: {directive.text}"
        " Also re-theme it on the document below: the task text and the feedback speak of its"
        " entities, names and numbers. Changing only numbers or sizes is not a new game: a"
        " retuned copy is rejected as a duplicate.",
        f"Target skill: {skill} ({SKILL_DESCRIPTIONS.get(skill, skill)}). The best environments "
        "are hard enough that the agent often fails without help, yet clearly solvable from "
        "what the task text and the feedback tell.",
        f"Ground the environment in this document:\n<document>\n{document}\n</document>",
        f"The contract stays: {_SPLICE_HOOKS['check_answer' not in plan.asked]} The class"
        f" already has {has}{_assigned_where(plan)}{_needs(plan)} Import nothing.",
        f"Answer with the new methods {asked}, in that order, indented as inside the class, in"
        f" one ```python block. The rest of the class ({kept}) stays as it is: do not repeat it.",
    ]
    return _messages(parts)


def _rule_prompt(
    document: str, skill: str, *, parent: Example, directive: Directive, plan: SplicePlan
) -> list[dict[str, str]]:
    """A splice that rewrites one of the parent's own rule methods (``clue``, ``credit``):
    the rest of the game stays and calls it; the answer is that method alone, its signature
    and docstring prefilled (``plan``)."""
    name = plan.asked[0]
    has = ", ".join([*plan.attributes, *plan.state, "self.rng", "self.turn", "self.max_turns"])
    parts = [
        _ROLE,
        f"Here is a working environment without its method {name}:\n```python\n"
        f"{parent_frame(parent.code_head, plan.asked)}```",
        f"Make a NEW game out of it by writing a new {name} method. The change: {directive.text}"
        " Changing only numbers is not a new game: a copy is rejected as a duplicate.",
        f"Target skill: {skill} ({SKILL_DESCRIPTIONS.get(skill, skill)}).",
        f"Ground the wording in this document:\n<document>\n{document}\n</document>",
        f"The rest of the class stays as it is and calls {name}. Your method may read {has}."
        " Import nothing; use only Python's built-ins.",
        f"Answer with the method {name} alone, indented as inside the class, in one ```python"
        " block: a short body under the signature and docstring it starts with.",
    ]
    return _messages(parts)


def module_level_names(code: str) -> list[str]:
    """Names a module binds at its top level besides its classes and imports (constants,
    helper functions), in order; none when the code does not parse. Only parsed, never run."""
    try:
        tree = parse_module(code)
    except PARSE_ERRORS:  # a broken parent names nothing (it is not shown anyway)
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return list(dict.fromkeys(names))


def repair_message(
    failure_kind: str,
    reason: str,
    check: str | None = None,
    traceback: str | None = None,
    *,
    methods: bool = False,
) -> str:
    """The user turn that gives a rejected design's named failure back to the designer: the
    check that failed, its kind and reason and the traceback's last lines (the caller cuts
    them), or why no module could be taken from the answer."""
    if check is None:
        head = f"Your answer could not be used ({failure_kind}): {reason}"
    else:
        head = f"Your module was rejected by the check `{check}` ({failure_kind}): {reason}"
    if traceback:
        head += f"\n```\n{traceback}\n```"
    if methods:  # a splice: the corrected methods again, not a module
        return f"{head}\n\nFix it. Answer with the corrected methods in one ```python block."
    return f"{head}\n\nFix it. {_ANSWER.replace('the complete', 'the whole corrected')}"


def _length(max_sentences: int) -> str:
    return "1 sentence" if max_sentences == 1 else f"1 to {max_sentences} sentences"


def _coach(code: str, ask: str) -> list[dict[str, str]]:
    """A hint request: the coach's system turn, the environment's code, then ``ask``."""
    return [
        {"role": "system", "content": "You coach players of text games and tool-use tasks."},
        {
            "role": "user",
            "content": "Here is the code of an environment an agent will play:\n"
            f"```python\n{code}\n```\n{ask}",
        },
    ]


def hint_prompt(code: str, max_sentences: int = 3) -> list[dict[str, str]]:
    """Chat messages asking for a strategy hint of 1 to ``max_sentences`` sentences
    (``DesignerConfig.hint_max_sentences``) about an environment's code (``strategy``)."""
    return _coach(
        code,
        f"Write a strategy hint of {_length(max_sentences)} that helps a player succeed. Describe"
        " how to approach the task; do not reveal the answer, secret values or the exact moves."
        " Answer with the hint only.",
    )


def procedure_hint_prompt(code: str, max_sentences: int = 3) -> list[dict[str, str]]:
    """Chat messages asking for a hint of 1 to ``max_sentences`` sentences that turns the
    ``solution()`` method's procedure into one a player can follow (``procedure``): the move's
    format, the first moves, what to read in each answer, how to close in; no hidden value."""
    return _coach(
        code,
        "Its `solution()` method wins because it can see the hidden state; the player cannot."
        f" Write a hint of {_length(max_sentences)} that lets the player do what `solution()`"
        " does without seeing it: the exact form of a move, which moves to make first, what to"
        " read in each answer and how to use it to reach the goal. Never state a hidden value,"
        " the answer or a fixed list of moves. Answer with the hint only.",
    )


HINT_PROMPTS = {"strategy": hint_prompt, "procedure": procedure_hint_prompt}
"""The hint prompts by the name ``DesignerConfig.hint_prompt`` uses."""
