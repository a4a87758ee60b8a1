"""Turning an agent's reply into the action sent to ``step()``."""

from __future__ import annotations

import re

from spade.envs.actions import extract_all_boxed

_TOOL_OR_ANSWER = re.compile(r"<tool_call>.*?</tool_call>|<answer>.*?</answer>", re.DOTALL)


def extract_action(text: str, *, tool_use: bool) -> str:
    """The action in ``text``.

    Games: the last ``\\boxed{...}`` (re-wrapped, so the environment parses it as always).
    Tool use: every ``<tool_call>`` block in order, or the ``<answer>`` if there is no call.
    Without any of these the whole reply goes to the environment, which answers it with its
    invalid-format message (that is part of what the agent learns).
    """
    if tool_use:
        blocks = _TOOL_OR_ANSWER.findall(text)
        calls = [b for b in blocks if b.startswith("<tool_call>")]
        if calls:
            return "\n".join(calls)
        if blocks:
            return blocks[-1]
        return text
    boxed = extract_all_boxed(text)
    return "\\boxed{" + boxed[-1] + "}" if boxed else text
