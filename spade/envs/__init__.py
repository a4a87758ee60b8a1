"""The text-environment contract: base classes, action parsing and the bundled examples.

Standard library only and Python 3.11 compatible, because designs import it inside the jail.
The gymnasium view of a sandboxed environment lives in :mod:`spade.sandbox.gym`.
"""

from spade.envs.actions import (
    ToolCallError,
    extract_all_boxed,
    extract_answer,
    extract_boxed,
    parse_tool_call,
    split_solution,
    tool_call_bodies,
)
from spade.envs.base import TextEnv, ToolError, ToolUseEnv, tool_schema

__all__ = [
    "TextEnv",
    "ToolCallError",
    "ToolError",
    "ToolUseEnv",
    "extract_all_boxed",
    "extract_answer",
    "extract_boxed",
    "parse_tool_call",
    "split_solution",
    "tool_call_bodies",
    "tool_schema",
]
