"""Base classes for designed environments: plain text games and tool-use tasks.

Standard library only, Python 3.11 compatible: designs import this inside the jail as
``from spade.envs import TextEnv, ToolUseEnv``. Designs may also skip the bases and write the
reference format directly (a class ending in ``Env`` with ``reset``/``step``/``solution``).
"""

from __future__ import annotations

import inspect
import json
import random
from typing import Any

from spade.envs.actions import (
    ToolCallError,
    extract_answer,
    extract_boxed,
    parse_tool_call,
    tool_call_bodies,
)

StepResult = tuple[str, float, bool, bool, dict[str, Any]]


class TextEnv:
    """A turn-based text game whose moves are written as ``\\boxed{move}``.

    Subclasses implement ``setup()`` (build the hidden state from ``self.rng``; return the
    task text), ``play(move)`` (apply the content of one ``\\boxed{}``; return
    ``(observation, reward, terminated)``; a ``ValueError`` it raises refuses the move, with its
    message shown to the agent) and ``solution()``. The base seeds ``self.rng``, counts turns,
    truncates at ``max_turns`` and answers actions without a ``\\boxed{}``.
    """

    invalid_format_message = "Write your move inside \\boxed{...}."

    def __init__(self, max_turns: int = 25, **kwargs: Any) -> None:
        self.max_turns = int(max_turns)
        self.turn = 0
        self.done = False
        self.rng = random.Random()

    def setup(self) -> str:
        raise NotImplementedError

    def play(self, move: str) -> tuple[str, float, bool]:
        raise NotImplementedError

    def solution(self) -> list[str]:
        raise NotImplementedError

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self.rng = random.Random(seed)
        self.turn = 0
        self.done = False
        return self.setup(), {"turn": 0, "max_turns": self.max_turns}

    def step(self, action: str) -> StepResult:
        if self.done:
            return "The episode is over; call reset().", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        obs, reward, terminated = self.act(action)
        truncated = not terminated and self.turn >= self.max_turns
        if truncated:
            obs += "\nOut of turns."
        self.done = terminated or truncated
        return obs, float(reward), bool(terminated), truncated, {"turn": self.turn}

    def act(self, action: str) -> tuple[str, float, bool]:
        """One turn's effect; games parse ``\\boxed{}``, tool-use tasks override this."""
        move = extract_boxed(action)
        if move is None:
            return self.invalid_format_message, 0.0, False
        try:
            return self.play(move)
        except ValueError as exc:
            # the contract's way to refuse a move play cannot read (``int("?")`` included, as
            # a tool's bad argument is an error reply): the agent is told why, the turn counts
            return f"That move cannot be played: {str(exc)[:200]}", 0.0, False


class ToolError(Exception):
    """Raised by a tool for a domain error; its message is shown to the agent."""


_JSON_TYPES = {
    "int": "integer",
    "float": "number",
    "str": "string",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
}


def _json_type(annotation: Any) -> str:
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return _JSON_TYPES.get(name.split("[")[0].strip(), "string")


def _param_docs(doc: str) -> dict[str, str]:
    """``name: description`` lines of a docstring's ``Args:`` section."""
    out: dict[str, str] = {}
    in_args = False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:"):
            in_args = True
        elif in_args and ":" in stripped:
            name, desc = stripped.split(":", 1)
            out[name.split("(")[0].strip()] = desc.strip()
        elif in_args and not stripped:
            in_args = False
    return out


def tool_schema(name: str, fn: Any) -> dict[str, Any]:
    """The OpenAI function schema of a bound ``tool_<name>`` method."""
    doc = inspect.getdoc(fn) or ""
    docs = _param_docs(doc)
    props: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        props[pname] = {"type": _json_type(param.annotation)}
        if pname in docs:
            props[pname]["description"] = docs[pname]
        if param.default is param.empty:
            required.append(pname)
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": doc.split("\n\n")[0].replace("\n", " ") if doc else name,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


def tool_names(env: Any) -> list[str]:
    """Names of the ``tool_<name>`` methods of ``env``'s class, sorted."""
    return sorted(n[len("tool_") :] for n in dir(type(env)) if n.startswith("tool_"))


def method_tools(env: Any) -> list[dict[str, Any]]:
    """The OpenAI function schemas of ``env``'s ``tool_<name>`` methods."""
    return [tool_schema(n, getattr(env, "tool_" + n)) for n in tool_names(env)]


class ToolUseEnv(TextEnv):
    """A task solved by calling tools and finishing with ``<answer>...</answer>``.

    Subclasses write ``tool_<name>(self, **kwargs)`` methods (first docstring paragraph is the
    description, ``Args:`` lines describe parameters, annotations give JSON types), plus
    ``setup()``, ``check_answer(answer) -> float`` in [0, 1] and ``solution()``. Actions are
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (several per turn are
    run in order) or a final ``<answer>``; the answer ends the episode with its score.
    """

    invalid_format_message = (
        'Call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call> '
        "or finish with <answer>...</answer>."
    )

    def check_answer(self, answer: str) -> float:
        raise NotImplementedError

    def available_tools(self) -> list[str]:
        """Names of the ``tool_<name>`` methods (the base defines none of its own)."""
        return tool_names(self)

    def tools(self) -> list[dict[str, Any]]:
        return method_tools(self)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool; bad names, bad arguments and ToolError become error text."""
        if name not in self.available_tools():
            return f"Error: unknown tool {name!r}; available: {', '.join(self.available_tools())}"
        fn = getattr(self, "tool_" + name)
        try:
            inspect.signature(fn).bind(**arguments)
        except TypeError as exc:  # wrong or missing arguments: the agent's mistake
            return f"Error: bad arguments for {name}: {exc}"
        try:
            result = fn(**arguments)
        except ToolError as exc:  # the tool rejected the request on purpose
            return f"Error: {exc}"
        except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError) as exc:
            # Arguments of the wrong type or value break a tool the way they break a real API:
            # the agent sees an error response instead of the episode crashing.
            return f"Error: {name} failed: {type(exc).__name__}: {exc}"
        return result if isinstance(result, str) else json.dumps(result, sort_keys=True)

    def act(self, action: str) -> tuple[str, float, bool]:
        bodies = tool_call_bodies(action)
        if bodies:
            parts = []
            for body in bodies:
                try:
                    name, args = parse_tool_call(body)
                except ToolCallError as exc:  # malformed call: tell the agent, keep going
                    parts.append(f"<tool_response>\nError: {exc}\n</tool_response>")
                    continue
                parts.append(f"<tool_response>\n{self.call_tool(name, args)}\n</tool_response>")
            return "\n".join(parts), 0.0, False
        answer = extract_answer(action)
        if answer is None:
            return self.invalid_format_message, 0.0, False
        score = float(self.check_answer(answer))
        verdict = "correct" if score >= 1.0 else ("partly correct" if score > 0 else "incorrect")
        return f"Your answer is {verdict} (score {score:.2f}).", score, True
