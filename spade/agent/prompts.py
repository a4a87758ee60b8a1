"""The agent's system prompts (games and tool use)."""

from __future__ import annotations

GAME_SYSTEM = (
    "You are playing a text game over several turns. Each turn, read the latest message, think "
    "briefly, then give exactly one move as \\boxed{your move}. Only the last \\boxed{} of your "
    "reply counts. Use what earlier turns told you."
)

TOOL_SYSTEM = (
    "You solve a task by calling tools over several turns. To call a tool, write "
    '<tool_call>{"name": "tool_name", "arguments": {...}}</tool_call> (several calls per turn '
    "are allowed); the results come back in the next message. When you are sure, finish with "
    "<answer>your final answer</answer>. The available tools are described to you."
)


def system_prompt(tool_use: bool) -> str:
    return TOOL_SYSTEM if tool_use else GAME_SYSTEM
