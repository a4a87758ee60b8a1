"""An optional auditor: does the agent get what it needs to win a design?

The verifier's ``feasibility`` replays ``solution()``, which reads the hidden state: it proves
that the design can be won by code that sees everything, not that a player can win it from the
observations. A cubic with three clues for four unknowns passed (docs/designer.md).
As the reference does for its tool-use environments (a solvability auditor, lenient on a
missing verdict), the same model reads the design's code and judges whether the goal can be
derived from what the agent is told; an accepted design judged unsolvable is rejected with the
failure kind ``unsolvable`` (a verifier-judgement tier of the graded rewards). The verdict and
its reason are kept on the attempt (``solvability``) whatever they are.

Inference only (the code is read, never run); off by default (``designer.solvability_check``):
on CPU it costs one more request per accepted design, and a small model's judgement of code is
itself noisy.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from spade.config import CampaignConfig
from spade.designer.extract import drop_thinking
from spade.inference.base import Backend, ChatRequest, SamplingParams
from spade.records import FailureKind

if TYPE_CHECKING:
    from spade.records import DesignAttempt

_VERDICT = re.compile(r"\bVERDICT:\s*\**\s*(SOLVABLE|UNSOLVABLE)\b", re.IGNORECASE)
REASON_CHARS = 300


def audit_prompt(code: str) -> list[dict[str, str]]:
    """Chat messages asking whether a player can derive the goal from what it is told."""
    return [
        {"role": "system", "content": "You review text games for a reasoning agent."},
        {
            "role": "user",
            "content": (
                "Here is the code of an environment:\n"
                f"```python\n{code}\n```\n"
                "A player never sees this code: it sees only the task text that setup() returns"
                " and the feedback that play() (or the tools) return after each move. Can a"
                " careful player always work out a winning play from what it is told, within"
                " the moves it has? Answer with one line `VERDICT: SOLVABLE` or `VERDICT:"
                " UNSOLVABLE`, then one sentence saying why."
            ),
        },
    ]


def parse_verdict(text: str) -> tuple[bool | None, str]:
    """``(solvable, reason)`` from an answer: None when it names no verdict; the reason is the
    answer's text after the verdict line (or all of it), shortened."""
    text = drop_thinking(text).strip()
    found = _VERDICT.search(text)
    if found is None:
        return None, text[:REASON_CHARS]
    after = text[found.end() :].strip(" *_`\n")
    reason = (after or text[: found.start()].strip())[:REASON_CHARS]
    return found.group(1).upper() == "SOLVABLE", reason


async def audit_designs(
    accepted: list[DesignAttempt], backend: Backend, cfg: CampaignConfig
) -> None:
    """Judge each accepted design (``designer.solvability_check``); one judged unsolvable is
    rejected. A missing verdict, or a request that failed on our side, keeps the design with
    ``designer.solvability_lenient`` (the reference's lenient mode) and rejects it without."""
    d = cfg.designer
    if not d.solvability_check or not accepted:
        return
    params = SamplingParams(max_tokens=d.hint_max_tokens, temperature=0.0)
    completions = await backend.complete(
        [ChatRequest(audit_prompt(a.code or ""), params) for a in accepted]
    )
    for att, comp in zip(accepted, completions, strict=True):
        solvable, reason = parse_verdict(comp.text) if comp.ok else (None, str(comp.failure))
        att.solvability = {"solvable": solvable, "reason": reason}
        if solvable is False or (solvable is None and not d.solvability_lenient):
            att.accepted = False
            att.failure_kind = str(FailureKind.UNSOLVABLE)
            att.failure_reason = f"judged unsolvable from what the agent is told: {reason}"
