"""Compatibility with the reference implementation's environments, so its pools run unchanged.

The reference's designer tells its models not to import their tool-use base class (it is
pre-loaded) and its loader injects common standard-library names; its games seed the global
``random`` module in ``reset(seed)`` and return the bare answer from ``solution()``; its
tool-use environments return a prose walkthrough from ``solution()``. This module gives such
code what it expects, written for this project from the reference's documented behaviour:

- :class:`ToolUseBaseEnv`, the reference's tool-use base: ``__init__(max_turns=10)`` sets the
  turn counter, ``_tools`` (name -> description and JSON-Schema parameters), ``_state``,
  ``_call_history`` and ``_expected_answer``, then calls ``reset()``; ``step`` reads the
  first ``<answer>`` (checked before any tool call) or else the first ``<tool_call>`` and runs
  one ``tool_<name>`` method; ``get_tools`` turns ``_tools`` into OpenAI function schemas;
  ``_check_answer`` compares case-insensitively, or numerically within 0.01 after dropping
  ``$`` and ``,``. Multi-turn tasks keep ``_user_messages``, ``_message_criteria`` (callables
  on ``_state``) and ``_current_msg``; :meth:`ToolUseBaseEnv._advance_if_done` reveals the
  next instruction once the current criterion holds (the reference's designs write their own;
  this default serves those that forgot to).
- :class:`ReferenceAdapter`, which the jail's session server puts around every environment
  not built on this project's bases (:func:`adapt`): ``reset`` may return a bare string,
  numpy scalars become Python numbers, and ``solution()`` becomes actions: a game's bare
  answer is played as ``\\boxed{answer}``; a tool-use walkthrough's ``name(arg=value)`` calls
  become ``<tool_call>`` blocks and the expected answer an ``<answer>``.

Standard library only, Python 3.11 compatible: the server imports this inside the jail. The
names the reference injects are listed in :mod:`spade.envs.prelude` (``REFERENCE_NAMES``).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from typing import Any

from spade.envs.actions import ANSWER, TOOL_CALL, blocks, split_solution
from spade.envs.base import TextEnv, method_tools, tool_names

# a name (not the tail of a longer word) right before "(": a call, if the name is a tool's
_NAME_CALL = re.compile(r"(?<!\w)([^\W\d]\w*)\(")
FORMAT_PENALTY = -0.1  # the reference's reward for an action that is neither a call nor an answer


class ToolUseBaseEnv:
    """The reference's base for tool-use tasks (see the module docstring for its behaviour).

    A subclass writes ``reset(seed=None)`` (fills ``_tools``, ``_state`` and
    ``_expected_answer``; returns ``(task, {})``), ``tool_<name>(**kwargs) -> str`` methods and
    ``solution()``. Actions: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` or
    ``<answer>...</answer>``; a correct answer ends the episode with reward 1.
    """

    # Set by multi-turn subclasses in reset(), never by the base: absent on single tasks.
    _user_messages: list[str]
    _message_criteria: list[Any]
    _current_msg: int

    def __init__(self, max_turns: int = 10, **kwargs: Any) -> None:
        self.max_turns = max_turns
        self.turn_count = 0
        self._tools: dict[str, dict[str, Any]] = {}
        self._state: dict[str, Any] = {}
        self._call_history: list[dict[str, Any]] = []
        self._expected_answer: Any = None
        self.reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError("a ToolUseBaseEnv subclass writes reset()")

    def solution(self) -> str:
        raise NotImplementedError("a ToolUseBaseEnv subclass writes solution()")

    def get_tools(self) -> list[dict[str, Any]]:
        """``_tools`` as OpenAI function schemas (an empty object schema where none is given)."""
        return [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": spec.get("description", ""),
                    "parameters": spec.get("parameters", {"type": "object", "properties": {}}),
                },
            }
            for name, spec in self._tools.items()
        ]

    def _run_tool(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """One tool's text and whether it ran; any exception it raises becomes text."""
        method = getattr(self, f"tool_{name}", None)
        if method is None:
            return f"Unknown tool '{name}'", False
        try:
            result = method(**arguments)
        except Exception as exc:  # the reference shows a failing tool's error to the agent
            return f"Error calling {name}: {exc}", False
        self._call_history.append({"name": name, "arguments": arguments, "result": str(result)})
        return str(result), True

    def execute_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one pre-parsed call: ``{"output": text, "returncode": 0 or 1}``."""
        output, ran = self._run_tool(name, arguments)
        return {"output": output, "returncode": 0 if ran else 1}

    def _time_up(self, obs: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return f"{obs}Out of turns. Reference solution:\n{self.solution()}", 0.0, False, True, {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn_count += 1
        out_of_turns = self.turn_count >= self.max_turns
        answer = _first_body(action, ANSWER)
        if answer is not None:
            if self._check_answer(answer.strip()):
                return "Correct!", 1.0, True, False, {}
            if out_of_turns:
                return self._time_up("Wrong answer. ")
            return self._incorrect_answer_feedback(), 0.0, False, False, {}
        call_text = _first_body(action, TOOL_CALL)
        if call_text is None:
            if out_of_turns:
                return self._time_up("")
            msg = "Use <tool_call>{...}</tool_call> to call a tool, <answer>...</answer> to answer."
            return msg, FORMAT_PENALTY, False, False, {}
        try:
            call = json.loads(call_text)
            name, arguments = call.get("name", ""), call.get("arguments", {})
        except (ValueError, AttributeError):  # not JSON, or JSON that is not an object
            if out_of_turns:
                return self._time_up("")
            return "The tool call is not valid JSON.", FORMAT_PENALTY, False, False, {}
        if not isinstance(arguments, dict):
            arguments = {}
        if getattr(self, f"tool_{name}", None) is None:
            if out_of_turns:
                return self._time_up("")
            known = ", ".join(self._tools)
            return f"There is no tool '{name}'. Tools: {known}", 0.0, False, False, {}
        obs = f"Tool result:\n{self._run_tool(name, arguments)[0]}"
        if out_of_turns:
            return self._time_up(obs + "\n\n")
        return obs, 0.0, False, False, {}

    def _obs_suffix(self) -> str:
        """Empty: older reference designs append it to observations (tools travel as schemas)."""
        return ""

    def _pending_step(self) -> tuple[int, list[Any]] | None:
        msgs = getattr(self, "_user_messages", None)
        index = getattr(self, "_current_msg", None)
        if isinstance(msgs, (list, tuple)) and isinstance(index, int) and 0 <= index < len(msgs):
            return index, list(msgs)
        return None

    def _incorrect_answer_feedback(self) -> str:
        """A wrong answer's reply; a multi-turn task names the instruction still open."""
        pending = self._pending_step()
        if pending is None:
            return "Incorrect. Keep using the tools."
        index, msgs = pending
        return (
            f"Incorrect: step {index + 1} of {len(msgs)} is not done yet: {msgs[index]!s} "
            "Finish it with the tools before you answer."
        )

    def _advance_if_done(self) -> str:
        """Advance a multi-turn task when the current instruction's criterion holds on
        ``_state``: the text a tool appends to its result (the next instruction, or that all
        are done), or ``""``."""
        if self._pending_step() is None:
            return ""
        criteria = getattr(self, "_message_criteria", None) or []
        if self._current_msg >= len(criteria) or not criteria[self._current_msg](self._state):
            return ""
        self._current_msg += 1
        msgs = self._user_messages
        if self._current_msg >= len(msgs):
            return "\n\n[ALL STEPS DONE] Submit <answer>done</answer>."
        return f"\n\n[STEP {self._current_msg} DONE. NEXT] {msgs[self._current_msg]}"

    def _check_answer(self, answer: str) -> bool:
        given, expected = str(answer).strip(), str(self._expected_answer).strip()
        if given.lower() == expected.lower():
            return True
        try:
            a = float(given.replace("$", "").replace(",", ""))
            return abs(a - float(expected.replace("$", "").replace(",", ""))) < 0.01
        except ValueError:  # not numbers: the text comparison above was the test
            return False

    def close(self) -> None:
        pass


def accepts(fn: Any, name: str) -> bool:
    """Whether ``fn`` accepts the keyword ``name`` (the session server asks it too)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read: assume the narrowest
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (JSON and the host know no numpy)."""
    if type(value).__module__ == "numpy" and callable(getattr(value, "item", None)):
        return value.item()
    return value


def _first_body(text: str, kind: tuple[str, str]) -> str | None:
    """The content of the first ``kind`` block in ``text`` (the reference reads the first)."""
    found = blocks(text, (kind,))
    return text[found[0][0] + len(kind[0]) : found[0][1] - len(kind[1])] if found else None


def has_actions(text: str) -> bool:
    """Whether ``text`` holds a ``\\boxed{}``, ``<tool_call>`` or ``<answer>`` block."""
    return "\\boxed{" in text or bool(blocks(text, (TOOL_CALL, ANSWER)))


def _call_end(text: str, start: int) -> int:
    """Index after the ``)`` closing the ``(`` at ``start``, quotes respected; -1 if none."""
    depth, quote, i = 0, "", start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def _literal_call(source: str, params: list[str]) -> dict[str, Any] | None:
    """The arguments of ``name(a, k=v)`` when every value is a literal, else None."""
    try:
        node = ast.parse(source, mode="eval").body
        if not isinstance(node, ast.Call) or len(node.args) > len(params):
            return None
        args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
        for kw in node.keywords:
            if kw.arg is None:
                return None
            args[kw.arg] = ast.literal_eval(kw.value)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):  # not literal
        return None
    return args


def is_tool_use(env: Any) -> bool:
    """Whether ``env`` is a tool-use environment: it has ``tool_<name>`` methods, or a
    ``get_tools()`` (the reference's) or ``tools()`` method giving its schemas."""
    return bool(tool_names(env)) or callable(
        getattr(env, "get_tools", None) or getattr(env, "tools", None)
    )


def env_tools(env: Any, attrs: tuple[str, ...] = ("tools",)) -> Any:
    """``env``'s tool schemas: what the first of ``attrs`` it has gives (a method's result, as
    it is: the host checks its shape, :mod:`spade.sandbox.schemas`; or a list), else the
    schemas of its ``tool_<name>`` methods."""
    for name in attrs:
        found = getattr(env, name, None)
        if callable(found):
            return found()
        if isinstance(found, list):
            return found
    return method_tools(env)


def walkthrough_calls(env: Any, text: str) -> list[str]:
    """The ``<tool_call>`` blocks of a prose walkthrough (``1. cd(path="docs") -> ...``): each
    ``name(...)`` whose name is one of ``env``'s tools and whose arguments are literals."""
    tools = set(tool_names(env))
    actions: list[str] = []
    done = 0  # where the last call taken ends: a name inside it is one of its arguments
    for found in _NAME_CALL.finditer(text):
        name = found[1].removeprefix("tool_")
        if found.start() < done or name not in tools:  # only a tool's call is scanned
            continue
        end = _call_end(text, found.end() - 1)
        call = _tool_call(name, text[found.end() - 1 : end], _params(getattr(env, "tool_" + name)))
        if end != -1 and call is not None:
            actions.append(call)
            done = end
    return actions


def _params(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # not a function after all: positional arguments unknown
        return []


def _tool_call(name: str, arguments: str, params: list[str]) -> str | None:
    """``<tool_call>`` for ``name`` + ``arguments`` (``"(...)"``), when they are JSON literals."""
    args = _literal_call(name + arguments, params)
    try:
        body = None if args is None else json.dumps({"name": name, "arguments": args})
    except (TypeError, ValueError):  # a set, bytes or complex literal: no JSON for it
        return None
    return None if body is None else f"{TOOL_CALL[0]}{body}{TOOL_CALL[1]}"


class ReferenceAdapter:
    """A reference-style environment seen through this project's contract (§3)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    @property
    def max_turns(self) -> Any:
        return getattr(self.env, "max_turns", None)

    @property
    def tool_use(self) -> bool:
        return is_tool_use(self.env)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if options is not None and accepts(self.env.reset, "options"):
            result = self.env.reset(seed=seed, options=options)
        else:
            result = self.env.reset(seed=seed)
        return (result, {}) if isinstance(result, str) else result

    def step(self, action: str) -> Any:
        result = self.env.step(action)
        if isinstance(result, tuple):
            return tuple(_plain(v) for v in result)
        return result

    def solution(self) -> Any:
        """Actions: a list as given; a string with action blocks split into them; a game's
        bare answer (a string or a number) as ``\\boxed{answer}``; a ToolUseBaseEnv's
        walkthrough as its tool calls and ``<answer>`` with the expected answer."""
        sol = _plain(self.env.solution())
        if isinstance(sol, (list, tuple)):
            return list(sol)
        if not isinstance(sol, (str, int, float)) or isinstance(sol, bool):
            return sol  # the host judges what is neither actions nor an answer
        text = str(sol)
        if isinstance(self.env, ToolUseBaseEnv) and not blocks(text, (TOOL_CALL,)):
            return self._walkthrough(text)
        if has_actions(text):
            return split_solution(text)
        return sol if self.tool_use else ["\\boxed{" + text.strip() + "}"]

    def _walkthrough(self, text: str) -> list[str]:
        """A ToolUseBaseEnv's prose solution as actions: its literal tool calls, then its
        ``<answer>`` block, or else the expected answer."""
        answer = _first_body(text, ANSWER)
        if answer is None and self.env._expected_answer is not None:
            answer = str(self.env._expected_answer)
        final = [] if answer is None else [f"{ANSWER[0]}{answer.strip()}{ANSWER[1]}"]
        return walkthrough_calls(self.env, text) + final or [text]

    def tools(self) -> list[dict[str, Any]]:
        return list(env_tools(self.env, ("get_tools", "tools")))

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def adapt(env: Any) -> Any:
    """``env`` itself when it is built on this project's bases, else a :class:`ReferenceAdapter`."""
    return env if isinstance(env, TextEnv) else ReferenceAdapter(env)
