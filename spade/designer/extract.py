"""Getting environment code and hints out of the designer's completions."""

from __future__ import annotations

import re

from spade.errors import DesignParseError
from spade.verify.static import parsed_share

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_CLASS_ENV = re.compile(r"^class\s+\w*Env\b", re.MULTILINE)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[^\n]*\n")


def extract_code(completion: str) -> str:
    """The environment module in a completion; DesignParseError says why there is none.

    Prefers fenced blocks that define a class ending in ``Env`` (the longest, if several),
    then an unfenced completion that does; a block left open at the end (the completion ran
    out of tokens) is reported as such.
    """
    text = _THINK.sub("", completion)
    blocks = [
        body
        for lang, body in _FENCE.findall(text)
        if lang.lower() in ("", "python", "py", "python3")
    ]
    with_env = [b for b in blocks if _CLASS_ENV.search(b)]
    if with_env:
        return max(with_env, key=len).strip() + "\n"
    if _CLASS_ENV.search(text) and "```" not in text:
        return text.strip() + "\n"
    if text.count("```") % 2 == 1:
        raise DesignParseError("the code block is not closed (the completion was probably cut off)")
    if blocks:
        raise DesignParseError("no code block defines a class whose name ends in 'Env'")
    raise DesignParseError("the completion contains no Python code block")


def parse_progress(completion: str) -> float:
    """How far a completion that yielded no module got, in [0, 1], for graded designer rewards:
    for a code block left open (the completion was cut off), the share of it that parses
    (:func:`spade.verify.static.parsed_share`): a whole class followed by a cut-off tail is
    further along than a class cut in the middle. 0 for anything else (no code at all)."""
    text = _THINK.sub("", completion)
    if text.count("```") % 2 == 0:
        return 0.0
    opening = _OPEN_FENCE.match(text, text.rfind("```"))  # the last fence is the open one
    return parsed_share(text[opening.end() :]) if opening else 0.0


def clean_hint(completion: str, max_sentences: int = 3, max_chars: int = 600) -> str:
    """The hint text: no thinking, no quotes or labels, at most ``max_sentences`` sentences."""
    text = _THINK.sub("", completion).strip().strip('"').strip()
    text = re.sub(r"^[*_#\s]*(hint|strategy)\s*:?[*_]*\s*:?\s*", "", text, flags=re.IGNORECASE)
    text = text.strip().strip('"').strip()
    text = " ".join(text.split())
    sentences = re.split(r"(?<=[.!?])\s+", text)
    return " ".join(sentences[:max_sentences])[:max_chars].strip()


def leaks_solution(hint: str, solution: list[str]) -> bool:
    """Whether a hint spells out a move of the solution (its content, 3+ characters)."""
    lowered = hint.lower()
    for action in solution:
        for content in re.findall(r"\\boxed\{(.*)\}|<answer>(.*?)</answer>", action, re.DOTALL):
            value = "".join(content).strip().lower()
            if len(value) >= 3 and value in lowered:
                return True
    return False
