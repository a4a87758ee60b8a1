"""Getting environment code and hints out of the designer's completions.

Completions and solutions are model- and design-supplied text: every parser here is linear in
it (``str.find`` loops; no lazy ``.*?`` or greedy ``(.*)`` that rescans the rest of the text
from each unclosed opening, which made 4,000 repeats of a tag take 0.55 s and a 1 MB solution
minutes).
"""

from __future__ import annotations

import re
from collections import Counter

from spade.envs.actions import ANSWER, BlockFinder, Finder, blocks
from spade.errors import DesignParseError
from spade.verify.static import parsed_share

_CLASS_ENV = re.compile(r"^class\s+\w*Env\b", re.MULTILINE)
_THINK = ("<think>", "</think>")
_LANG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_OPEN_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[^\n]*\n")
_BOXED = "\\boxed{"


def drop_thinking(text: str) -> str:
    """``text`` without its ``<think>...</think>`` blocks (an unclosed one stays)."""
    pieces, pos = [], 0
    for start, end in blocks(text, (_THINK,)):
        pieces.append(text[pos:start])
        pos = end
    return "".join([*pieces, text[pos:]])


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every closed ```` ``` ```` block, in order: what
    ``re.findall(r"```[ \\t]*([A-Za-z0-9_+-]*)[^\\n]*\\n(.*?)```", text, re.DOTALL)`` finds,
    without rescanning the rest of the text from each fence (a line of 300,000 backticks)."""
    found: list[tuple[str, str]] = []
    pos = 0
    while (start := text.find("```", pos)) != -1:
        newline = text.find("\n", start + 3)
        close = text.find("```", newline + 1) if newline != -1 else -1
        if close == -1:  # no later fence has a newline and a closing fence after it either
            break
        lang = _LANG.match(text, start + 3, newline)
        found.append((lang.group(1) if lang else "", text[newline + 1 : close]))
        pos = close + 3
    return found


def extract_code(completion: str) -> str:
    """The environment module in a completion; DesignParseError says why there is none.

    Prefers fenced blocks that define a class ending in ``Env`` (the longest, if several),
    then an unfenced completion that does; a block left open at the end (the completion ran
    out of tokens) is reported as such.
    """
    text = drop_thinking(completion)
    code = [
        body
        for lang, body in fenced_blocks(text)
        if lang.lower() in ("", "python", "py", "python3")
    ]
    with_env = [b for b in code if _CLASS_ENV.search(b)]
    if with_env:
        return max(with_env, key=len).strip() + "\n"
    if _CLASS_ENV.search(text) and "```" not in text:
        return text.strip() + "\n"
    if text.count("```") % 2 == 1:
        raise DesignParseError("the code block is not closed (the completion was probably cut off)")
    if code:
        raise DesignParseError("no code block defines a class whose name ends in 'Env'")
    raise DesignParseError("the completion contains no Python code block")


def parse_progress(completion: str) -> float:
    """How far a completion that yielded no module got, in [0, 1], for graded designer rewards:
    for a code block left open (the completion was cut off), the share of it that parses
    (:func:`spade.verify.static.parsed_share`): a whole class followed by a cut-off tail is
    further along than a class cut in the middle. 0 for anything else (no code at all)."""
    text = drop_thinking(completion)
    if text.count("```") % 2 == 0:
        return 0.0
    opening = _OPEN_FENCE.match(text, text.rfind("```"))  # the last fence is the open one
    return parsed_share(text[opening.end() :]) if opening else 0.0


_HINT_LABEL = re.compile(
    r"[*_#\s]*(?:(?:here\s+is\s+)?(?:the|a|my)\s+)?(?:strategy\s+)?(?:hint|strategy)\b"
    r"(?:\s+is)?[*_]*\s*(?::|(?=[\"'\u201c\u2018]))[*_]*\s*",
    re.IGNORECASE,
)  # a label ends in a colon or opens a quote: "The strategy is simple" is no label
_QUOTES = "\"'\u201c\u201d\u2018\u2019"
_LABELS_MAX = 4  # labels taken off the front, each with its quotes (the 1.5B wrote them nested)


def clean_hint(completion: str, max_sentences: int = 3, max_chars: int = 600) -> str:
    """The hint text: no thinking, no quotes or labels ("Hint:", "The hint is"), at most
    ``max_sentences`` sentences."""
    text = drop_thinking(completion).strip()
    for _ in range(_LABELS_MAX):
        text = text.lstrip(_QUOTES).strip()
        label = _HINT_LABEL.match(text)
        if label is None or label.end() == 0:
            break
        text = text[label.end() :]
    text = text.strip().strip('"\u201c\u201d').strip()
    text = " ".join(text.split())
    sentences = re.split(r"(?<=[.!?])\s+", text)
    return " ".join(sentences[:max_sentences])[:max_chars].strip()


def repeats_itself(hint: str, n: int = 4, times: int = 3) -> bool:
    """Whether some run of ``n`` words comes ``times`` or more times in ``hint`` (a degenerate
    answer: the 1.5B once wrote "The hint is: 'The hint is: ..." to the length limit)."""
    counts = Counter(_runs(hint.lower().split(), n))
    return max(counts.values(), default=0) >= times


def echoes(hint: str, request: str, n: int = 8) -> bool:
    """Whether ``hint`` repeats a run of ``n`` words of ``request`` (the instructions it was
    given, without the code): the 1.5B answered one request with the request's own words."""
    words = [re.findall(r"[a-z0-9']+", text.lower()) for text in (hint, request)]
    return not set(_runs(words[0], n)).isdisjoint(_runs(words[1], n))


def _runs(words: list[str], n: int) -> list[tuple[str, ...]]:
    """Every run of ``n`` consecutive ``words``, in order."""
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def move_contents(action: str) -> list[str]:
    """The contents of an action's moves: each ``<answer>...</answer>``, and a ``\\boxed{``
    up to the action's last ``}``, in order (what ``re.findall(r"\\\\boxed\\{(.*)\\}|<answer>
    (.*?)</answer>", action, re.DOTALL)`` finds), in linear time."""
    found: list[str] = []
    last_brace = action.rfind("}")
    answers, boxes = BlockFinder(action, (ANSWER,)), Finder(action, _BOXED)
    pos = 0
    while True:
        boxed = boxes.find(pos)
        if boxed != -1 and last_brace < boxed + len(_BOXED):
            boxed = -1  # no "}" after it: neither this \boxed{ nor any later one matches
        answer = answers.first(pos)
        if answer is not None and (boxed == -1 or answer[0] < boxed):
            found.append(action[answer[0] + len(ANSWER[0]) : answer[1] - len(ANSWER[1])])
            pos = answer[1]
        elif boxed != -1:
            found.append(action[boxed + len(_BOXED) : last_brace])
            pos = last_brace + 1
        else:
            return found


def leaks_solution(hint: str, solution: list[str]) -> bool:
    """Whether a hint spells out a move of the solution (its content, 3+ characters)."""
    lowered = hint.lower()
    for action in solution:
        for content in move_contents(action):
            value = content.strip().lower()
            if len(value) >= 3 and value in lowered:
                return True
    return False
