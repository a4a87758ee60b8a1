"""The scaffold strategy: the harness writes the module's frame, the model writes each body.

A small model asked for a whole module loses the contract's shape (hooks returning the wrong
tuple, stub signatures kept with their ``...``, answers cut off in the middle of a class). Here
the shape is not the model's to get wrong: the answer is prefilled with the fence, the class
header and its skill; then each hook the contract fixes (``setup``, ``play`` or
``check_answer``, ``solution``) is one request whose answer is prefilled with everything so far
and the hook's signature, and which stops at the next ``def``, the closing fence or a class or
function at module level, or at ``designer.scaffold_body_tokens``. The bodies are the model's
own logic; the frame is harness text, part of each request's prompt (never trained).

Each body is its own sample for training (:attr:`~spade.records.DesignAttempt.segments`): its
prompt is exactly what the model was given when it sampled the body (the frame and the bodies
before it, tokenized as a prompt), so no sampled token is ever re-tokenized.
"""

from __future__ import annotations

from collections.abc import Sequence

from spade.designer.splice import FENCE, first_word
from spade.inference.base import Backend, ChatRequest, SamplingParams
from spade.records import INFERENCE, DesignAttempt

GAME_HOOKS = (
    "    def setup(self) -> str:",
    "    def play(self, move: str) -> tuple[str, float, bool]:",
    "    def solution(self) -> list[str]:",
)
TOOL_HOOKS = (
    "    def setup(self) -> str:",
    "    def check_answer(self, answer: str) -> float:",
    "    def solution(self) -> list[str]:",
)
STOP = ("\n    def ", "\n    @", "```", "\nclass ", "\ndef ", "\nif __name__")
"""Where a body ends: the next method (a helper it was not asked for), the fence, module level."""


def hooks(tool_use: bool) -> tuple[str, ...]:
    """The signatures the harness inserts, in order."""
    return TOOL_HOOKS if tool_use else GAME_HOOKS


def class_name(document: str) -> str:
    """The scaffolded class's name: the document's first word and ``Env`` (``TaskEnv`` when
    the document gives no word)."""
    return f"{first_word(document, 24) or 'Task'}Env"


def header(name: str, skill: str, tool_use: bool) -> str:
    """The frame before the first hook: the fence, the class line and its skill."""
    base = "ToolUseEnv" if tool_use else "TextEnv"
    return f"{FENCE}class {name}({base}):\n    skill = {skill!r}\n\n"


def prefill(frame: str, bodies: list[str], signatures: tuple[str, ...]) -> str:
    """The answer so far when the body after ``bodies`` is asked for: the frame, each written
    hook with its body, then the next hook's signature."""
    parts = [frame]
    for signature, body in zip(signatures, bodies, strict=False):
        parts.append(f"{signature}\n{clean_body(body)}\n\n")
    parts.append(signatures[len(bodies)] + "\n")
    return "".join(parts)


def clean_body(body: str) -> str:
    """A sampled body as it goes into the module: cut at a stop string a backend kept, trailing
    blank lines dropped; an empty body becomes ``pass`` at the method's indent (the verifier
    then judges the hook that does nothing)."""
    for stop in STOP:
        at = body.find(stop)
        if at != -1:
            body = body[:at]
    body = body.rstrip()
    return body if body.strip() else "        pass"


def module(frame: str, bodies: list[str], signatures: tuple[str, ...]) -> str:
    """The assembled module (without the fence): the frame and every hook with its body."""
    text = prefill(frame, bodies, (*signatures, "")).rstrip() + "\n"
    return text.removeprefix(FENCE)


async def sample_bodies(
    backend: Backend, batch: Sequence[DesignAttempt], body_tokens: int, temperature: float
) -> None:
    """Scaffolded designs for ``batch`` (prefill: their frame), one hook's body at a time for
    the whole batch, each request prefilled with the frame, the bodies so far and the next
    signature; each body is a segment of its attempt. A failed request fails its attempt (no
    later bodies); the others get their assembled ``code`` and ``completion`` (the answer after
    the frame)."""
    bodies: dict[int, list[str]] = {id(a): [] for a in batch}
    for _ in range(3):  # setup, play or check_answer, solution
        live = [a for a in batch if not a.failed]
        requests = [
            ChatRequest(
                a.messages,
                SamplingParams(max_tokens=body_tokens, temperature=temperature, stop=STOP),
                prefill=prefill(a.prefill, bodies[id(a)], _hooks_of(a)),
            )
            for a in live
        ]
        for att, comp in zip(live, await backend.complete(requests), strict=True):
            att.model = comp.model
            if comp.failure is not None:
                att.failure_kind = INFERENCE
                att.failure_reason = comp.failure.summary
                continue
            bodies[id(att)].append(comp.text)
            att.add_segment(comp.prompt_token_ids, comp.token_ids, comp.logprobs, comp.text)
    for att in batch:
        if not att.failed:
            att.code = module(att.prefill, bodies[id(att)], _hooks_of(att))
            att.completion = (FENCE + att.code).removeprefix(att.prefill)


def _hooks_of(att: DesignAttempt) -> tuple[str, ...]:
    return hooks("(ToolUseEnv)" in att.prefill)
