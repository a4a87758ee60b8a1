"""The designer's prompts: write an environment from a document, and write a hint for one.

Written for this project. The environment contract they describe is DESIGN.md §3; the
examples shown come from the environment memory (good designs of the same skill, and one
that was too easy or too hard).
"""

from __future__ import annotations

from collections.abc import Sequence

from spade.curriculum.memory import MemoryRecord
from spade.designer.skills import SKILL_DESCRIPTIONS

Example = MemoryRecord

GAME_CONTRACT = """\
Write ONE Python module (standard library only; allowed imports: math, random, re, json,
itertools, collections, functools, string, dataclasses, typing, heapq, bisect, fractions,
statistics, copy, enum, textwrap, operator, and `from spade.envs import TextEnv`) defining ONE
class whose name ends in `Env`:

    from spade.envs import TextEnv

    class SomethingEnv(TextEnv):
        skill = "<skill>"
        def setup(self) -> str: ...          # build hidden state from self.rng, return the task text
        def play(self, move: str) -> tuple[str, float, bool]: ...  # one \\boxed{move}: (feedback, reward, done)
        def solution(self) -> list[str]: ... # moves that win from this instance, e.g. ["\\\\boxed{42}"]

Rules: all randomness from self.rng; the task must need several turns of interaction (hidden
state revealed by feedback); the episode must end within 25 turns whatever is played (limit
guesses or actions); reward 1.0 only for full success, partial credit in (0, 1) when the
episode ends partly right, 0 otherwise; invalid moves get a helpful message, never an
exception; no file, network, os or sys access, no printing."""

TOOL_CONTRACT = """\
Write ONE Python module (standard library only; allowed imports: math, random, re, json,
itertools, collections, functools, string, dataclasses, typing, heapq, bisect, fractions,
statistics, copy, enum, textwrap, operator, and `from spade.envs import ToolUseEnv, ToolError`)
defining ONE class whose name ends in `Env`:

    from spade.envs import ToolUseEnv, ToolError

    class SomethingEnv(ToolUseEnv):
        skill = "<skill>"
        def setup(self) -> str: ...          # build hidden state (a small database, an API) from self.rng; return the task
        def tool_lookup(self, key: str) -> dict:
            \"\"\"What the tool does.

            Args:
                key: what it means
            \"\"\"
        def check_answer(self, answer: str) -> float: ...  # 1.0 right, partial credit in (0, 1), else 0
        def solution(self) -> list[str]: ...  # tool calls then the answer, e.g.
            # ['<tool_call>{"name": "lookup", "arguments": {"key": "a"}}</tool_call>', '<answer>7</answer>']

Rules: the task must need several tool calls whose results the agent cannot guess; raise
ToolError for bad requests (the agent sees the message); all randomness from self.rng; no
file, network, os or sys access, no printing."""


def _example_block(title: str, ex: Example) -> str:
    stats = []
    if ex.win_rate is not None:
        stats.append(f"agent win rate {ex.win_rate:.2f}")
    if ex.regret is not None:
        stats.append(f"regret {ex.regret:.2f}")
    if not stats:  # seeded from a pool, never played (the memory shows these as positives)
        stats.append("from the seed pool, not yet played")
    return f"### {title} ({', '.join(stats)})\n```python\n{ex.code_head}\n```"


def design_prompt(
    document: str,
    skill: str,
    *,
    tool_use: bool,
    positives: Sequence[Example] = (),
    negatives: Sequence[tuple[Example, str]] = (),
) -> list[dict[str, str]]:
    """Chat messages asking for one environment grounded on ``document`` for ``skill``.

    ``negatives`` pairs each example with its label ("too easy" / "too hard").
    """
    parts = [
        "You design training environments for a reasoning agent. An environment is an "
        "interactive, multi-turn task with hidden state, rewards and a reference solution.",
        TOOL_CONTRACT if tool_use else GAME_CONTRACT,
        f"Target skill: {skill} ({SKILL_DESCRIPTIONS.get(skill, skill)}). The best environments "
        "are hard enough that the agent often fails without help, yet clearly solvable.",
        f"Ground the environment in this document (use its entities, facts or numbers):\n"
        f"<document>\n{document}\n</document>",
    ]
    for i, ex in enumerate(positives, 1):
        parts.append(_example_block(f"Good earlier design {i}", ex))
    for ex, label in negatives:
        parts.append(_example_block(f"Avoid designs like this one: {label}", ex))
    parts.append("Answer with the complete module in one ```python code block and nothing else.")
    return [
        {"role": "system", "content": "You write correct, self-contained Python."},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def hint_prompt(code: str, max_sentences: int = 3) -> list[dict[str, str]]:
    """Chat messages asking for a strategy hint of 1 to ``max_sentences`` sentences
    (``DesignerConfig.hint_max_sentences``) about an environment's code."""
    length = "1 sentence" if max_sentences == 1 else f"1 to {max_sentences} sentences"
    return [
        {"role": "system", "content": "You coach players of text games and tool-use tasks."},
        {
            "role": "user",
            "content": (
                "Here is the code of an environment an agent will play:\n"
                f"```python\n{code}\n```\n"
                f"Write a strategy hint of {length} that helps a player succeed. Describe "
                "how to approach the task; do not reveal the answer, secret values or the exact "
                "moves. Answer with the hint only."
            ),
        },
    ]
