"""Hints for accepted designs: a short strategy the hinted plays get (the regret is how much
better the agent plays with it).

A hint that is empty, spells out the solution, repeats itself (a phrase again and again) or
repeats the request's own words is asked again, up to ``designer.hint_tries`` requests, then
dropped: the design has legitimately no hint and is evaluated without hinted
plays. A hint request that failed on our side is not such an answer: a design it leaves
without a hint raises :class:`~spade.errors.InferenceError`, so the stage is retried rather
than the design scored with a regret of 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spade.config import CampaignConfig
from spade.designer.extract import clean_hint, echoes, leaks_solution, repeats_itself
from spade.designer.prompts import HINT_PROMPTS
from spade.errors import InferenceError
from spade.inference.base import Backend, ChatRequest, SamplingParams
from spade.registry import lookup

if TYPE_CHECKING:  # designer.py imports this module for its design_batch
    from spade.records import DesignAttempt


async def hint_designs(
    accepted: list[DesignAttempt], backend: Backend, cfg: CampaignConfig
) -> None:
    """Ask for a hint per accepted design, of at most ``designer.hint_max_sentences``
    sentences; an empty hint, one that spells out the solution, repeats itself or repeats the
    request is asked again, up to ``designer.hint_tries`` requests, then dropped (the design is
    then evaluated without hinted plays). A request that failed on our side is asked again too;
    a design still without a hint after one raises InferenceError: without hinted plays its
    regret would read 0, an outage taken for a design with nothing to learn."""
    d = cfg.designer
    prompt = lookup(HINT_PROMPTS, d.hint_prompt, "hint prompt")
    params = SamplingParams(max_tokens=d.hint_max_tokens, temperature=d.hint_temperature)
    request = " ".join(m["content"] for m in prompt("", d.hint_max_sentences))  # no code
    todo = list(accepted)
    lost: dict[int, str] = {}  # id(attempt) -> its last failed request, while it has no hint
    for _ in range(d.hint_tries):
        if not todo:
            break
        completions = await backend.complete(
            [ChatRequest(prompt(a.code or "", d.hint_max_sentences), params) for a in todo]
        )
        retry = []
        for att, comp in zip(todo, completions, strict=True):
            hint = clean_hint(comp.text, d.hint_max_sentences) if comp.ok else ""
            solution = att.solution
            if not hint:
                att.hint_note = (
                    "empty hint" if comp.ok else f"hint generation failed: {comp.failure}"
                )
                if comp.failure is not None:
                    lost[id(att)] = comp.failure.summary
                retry.append(att)
            elif leaks_solution(hint, solution):
                att.hint_note = "hint revealed the solution"
                retry.append(att)
            elif repeats_itself(hint) or echoes(hint, request):
                att.hint_note = "hint repeated itself or the request"
                retry.append(att)
            else:
                att.hint, att.hint_note = hint, None
        todo = retry
    _check_hints_lost([a for a in todo if id(a) in lost], lost, len(accepted))


def _check_hints_lost(hintless: list[DesignAttempt], lost: dict[int, str], total: int) -> None:
    """InferenceError when a design is left without a hint and one of its hint requests failed
    on our side (a design whose every try answered, empty or leaking, legitimately has none)."""
    if hintless:
        first = hintless[0]
        raise InferenceError(
            f"{len(hintless)} of {total} accepted designs got no hint because a hint request"
            f" failed on the inference side, e.g. {first.env_id}: {lost[id(first)]}"
        )
