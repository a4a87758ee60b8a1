"""The agent's system prompts (games and tool use)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

GAME_SYSTEM = (
    "You are playing a text game over several turns. Each turn, read the latest message, think "
    "briefly, then give exactly one move as \\boxed{your move}. Only the last \\boxed{} of your "
    "reply counts. Use what earlier turns told you."
)

TOOL_SYSTEM = (
    "You solve a task by calling tools over several turns. To call a tool, write "
    '<tool_call>{"name": "tool_name", "arguments": {...}}</tool_call> (several calls per turn '
    "are allowed); the results come back in the next message. When you are sure, finish with "
    "<answer>your final answer</answer>."
)


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def tool_lines(tools: Sequence[dict[str, Any]]) -> str:
    """One line per tool: ``name(param: type, ...) - description``. Total over any JSON: the
    session rejects schemas of the wrong shape (:mod:`spade.sandbox.schemas`), but a part of
    the wrong type here reads as ``any`` (or is left out), never as an exception."""
    lines = []
    for tool in tools:
        fn = _field(tool, "function")
        props = _field(_field(fn, "parameters"), "properties")
        props = props if isinstance(props, dict) else {}
        params = ", ".join(
            f"{name}: {_field(spec, 'type') or 'any'}" for name, spec in props.items()
        )
        description = _field(fn, "description") or ""
        lines.append(f"- {_field(fn, 'name')}({params}): {description}")
    return "\n".join(lines)


def system_prompt(tool_use: bool, tools: Sequence[dict[str, Any]] | None = None) -> str:
    """The agent's instructions. Tool-use prompts also list the tools in plain text: some chat
    templates (SmolLM2's) ignore the ``tools`` they are given."""
    if not tool_use:
        return GAME_SYSTEM
    return TOOL_SYSTEM + ("\n\nTools:\n" + tool_lines(tools) if tools else "")
