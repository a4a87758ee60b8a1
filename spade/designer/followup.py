"""Follow-up requests that complete a splice's answer with what it left unwritten.

A small model's splice often stops early or leans on code it never wrote: asked for ``setup``,
``play`` and ``solution``, it renames the hidden state in ``setup``, rewrites ``play`` and
stops, and the parent's ``solution`` then reads a name nothing assigns (0.5B coder: 6 of 16
crashes of the seed-0 bench); or ``setup`` calls ``self._create_task_text()`` and no such
method exists (1.5B). Both are plain in the answer's source. So the harness asks again, as it
shapes the first answer: the answer so far, then the signature of what is missing, as the
prefill of one more request (prompt tokens, never trained), and the model writes the body.

What is asked, in order: the asked hooks the answer did not write (their signatures are the
parent's), then a method the spliced class calls on ``self`` that nothing defines (``def
name(self`` -- the model writes its parameters). One thing per request, at most
``designer.followups`` requests per attempt. Each follow-up's sampled tokens are a segment of
the attempt: a training sample of its own, with the design's reward, as a scaffold's bodies.
"""

from __future__ import annotations

from collections.abc import Sequence

from spade.config import CampaignConfig
from spade.designer.directives import directive_named
from spade.designer.splice import (
    FENCE,
    answer_methods,
    answer_text,
    hook_signature,
    plan_splice,
    splice,
)
from spade.errors import DesignParseError
from spade.inference.base import Backend, ChatRequest, SamplingParams
from spade.records import DesignAttempt, env_id_for
from spade.verify.gate import unwritten_methods


def next_signature(att: DesignAttempt, parent: str, asked: Sequence[str]) -> str | None:
    """The start of the method the attempt's answer should write next: the signature of the
    first of ``asked`` it did not write (the parent's), else ``def name(self`` for a method the
    spliced code calls and nothing defines; None when nothing is missing (or nothing was
    spliced: a parse failure is graded as it is)."""
    if att.code is None or not att.spliced:
        return None
    written = {name for name, _ in answer_methods(answer_text(att.prefill, att.completion))}
    for name in asked:
        if name not in written and (signature := hook_signature(parent, name)) is not None:
            return signature + "\n"
    missing = unwritten_methods(att.code)
    return f"    def {missing[0]}(self" if missing else None


def followup_prefill(att: DesignAttempt, signature: str) -> str:
    """The prefill of a follow-up: the answer so far (without a closing fence), a blank line
    and the signature to continue."""
    so_far = answer_text(att.prefill, att.completion).rstrip()
    return f"{FENCE}{so_far}\n\n{signature}"


async def ask_followups(
    backend: Backend, pending: Sequence[tuple[DesignAttempt, ChatRequest]]
) -> list[tuple[DesignAttempt, bool]]:
    """One follow-up request for each ``(attempt, request)``, all at once; each attempt's
    ``completion`` grows by the prefill's new text and what was sampled, and the sample becomes
    a segment. Returns ``(attempt, ok)``: not ok when the request failed (the attempt keeps
    its answer so far; a follow-up failure does not fail a design that exists)."""
    out = []
    completions = await backend.complete([request for _, request in pending])
    for (att, request), comp in zip(pending, completions, strict=True):
        if comp.failure is not None:
            out.append((att, False))
            continue
        if not att.segments:  # the first answer becomes a segment too
            att.add_segment(att.prompt_token_ids, att.token_ids, att.logprobs, att.completion)
        att.add_segment(comp.prompt_token_ids, comp.token_ids, comp.logprobs, comp.text)
        att.completion = (request.prefill + comp.text).removeprefix(att.prefill)
        out.append((att, True))
    return out


def parent_code(att: DesignAttempt) -> str | None:
    """The source of the attempt's parent (one of its references); None without one."""
    return next((r["code"] for r in att.references if r["name"] == att.parent_id), None)


def splice_answer(att: DesignAttempt, parent: str, answer: str | None = None) -> None:
    """An answer's methods spliced into ``parent`` as the attempt's code: ``answer`` (a repair
    turn's text), else the attempt's own (its ``completion`` after its prefill); or the parse
    failure of an answer with no method."""
    att.failure_kind = att.failure_reason = None
    try:
        att.code, att.spliced = splice(
            parent,
            answer_text(att.prefill, att.completion if answer is None else answer),
            class_name=att.class_name or "SplicedEnv",
            skill=att.skill,
            note=f"{att.parent_id} spliced ({att.directive}) on document {att.doc_id}.",
        )
    except DesignParseError as exc:  # the model wrote no method: data
        att.code, att.spliced = None, []
        att.failure_kind, att.failure_reason = "parse", str(exc)
        return
    att.env_id = env_id_for(att.code)


async def complete_splices(
    backend: Backend, batch: list[DesignAttempt], cfg: CampaignConfig
) -> None:
    """Up to ``designer.followups`` rounds of follow-up requests for the splices that left a
    method unwritten (:mod:`spade.designer.followup`), each answer spliced again after its."""
    d = cfg.designer
    asked = {}  # id(attempt) -> (its parent, the hooks its directive asks for): parsed once
    for att in batch:
        parent = parent_code(att)
        plan = plan_splice(parent, directive_named(att.directive)) if parent else None
        if parent and plan and not att.failed:
            asked[id(att)] = (parent, plan.asked)
    for _ in range(d.followups):
        pending = []
        for att in batch:
            parent, hooks = asked.get(id(att), ("", ()))
            signature = next_signature(att, parent, hooks) if parent else None
            if signature is not None:
                params = SamplingParams(
                    max_tokens=d.scaffold_body_tokens,
                    temperature=d.temperature,
                    stop=tuple(att.stop),
                )
                prefill = followup_prefill(att, signature)
                pending.append((att, ChatRequest(att.messages, params, prefill=prefill)))
        if not pending:
            return
        for att, ok in await ask_followups(backend, pending):
            if ok:
                splice_answer(att, asked[id(att)][0])
