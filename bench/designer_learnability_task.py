"""The designer learnability check's prompts, splits, reward and test.

A prompt is the demo's splice with a rule directive: a parent game (a bundled example), one of its
rule methods to rewrite (``clue``: what a move reveals; ``credit``: the partial score), and a
document to re-theme it on. Everything a prompt is made of is split before anything runs, so the
held-out prompts are never trained on and never used to choose a setting:

- parents: the bundled games with a rule method, by a fixed list (:data:`PARENTS`): the held-out
  ones are never trained on, so neither are their (parent, directive) pairs;
- documents: the built-in corpus split by a hash of the document id (a quarter held out);
- directives: both rule directives appear on both sides (there are two), each only ever with the
  split's own parents.

``by="documents"`` (``--split documents``, a diagnostic, never the bench's result) splits the
documents only: every parent on both sides, so the held-out prompts ask for the trained parents'
rules on documents never trained on. Set beside the default, it tells "the designer learns
nothing" apart from "what it learns on the trained parents does not carry over to others".

The reward needs no agent plays: a design the verifier accepts (every check, ``leaks_answer``,
``perverse_credit`` and ``novelty`` included: accepted, novel and worth keeping are one rung
here) earns 1; a rejected one the campaign's graded rejection reward (every value below 0, higher
the further through the verifier it got). A design is *well formed* when it reached the jail's
play checks (no parse, syntax, policy or contract failure): the split of a rise into fewer
malformed answers and more designs kept among the well-formed ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade.config import ScoringConfig
from spade.designer.corpus import Corpus, Document
from spade.designer.extract import parse_progress
from spade.envs.examples import example_paths
from spade.inference.base import Backend, ChatRequest, Completion
from spade.records import DesignAttempt
from spade.scoring.rewards import get_rejected_reward, rejected_tier
from spade.training.copied import copied_positions

PARENTS = {
    "train": ("number_hunt", "cargo_knapsack", "switchboard"),
    "heldout": ("polynomial_probe", "code_breaker"),
}
"""Parents by split: every bundled game with a ``clue`` or ``credit`` method that a prompt can
show whole (``designer.max_example_chars``: ``ownership_riddle`` is longer, and the demo never
offers it as a parent either), split by hand before any run (both directives on each side)."""
DIRECTIVES = ("clue", "credit")
HELDOUT_DOCS = 4
"""One document in this many (by a hash of its id) is held out."""
WELL_FORMED_TIER = rejected_tier("crash")
"""Rejections from this tier on ran as environments: the answer was well formed."""


@dataclass(frozen=True)
class Prompt:
    """One splice request: a parent, the rule method to rewrite, a document."""

    key: str  # split:index, the group id of its samples
    parent: str  # the bundled game's stem
    code: str
    directive: str
    document: Document


SPLITS = ("parents", "documents")
"""What the held-out side holds apart: parents and documents (the bench's result), or only
documents (a diagnostic: every parent on both sides)."""


def pairs(split: str, by: str = "parents") -> list[tuple[str, str, str]]:
    """``(parent, its code, directive)`` for every rule method of the split's parents (``by``
    ``"parents"``), or of every parent (``"documents"``: only the documents are split)."""
    if by not in SPLITS:
        raise ValueError(f"split by must be one of {SPLITS}, not {by!r}")
    paths = {p.stem: p for p in example_paths()}
    names = PARENTS[split] if by == "parents" else PARENTS["train"] + PARENTS["heldout"]
    out = []
    for name in names:
        code = paths[name].read_text()
        out += [(name, code, d) for d in DIRECTIVES if f"    def {d}(" in code]
    return out


def documents(corpus: Corpus, split: str) -> list[Document]:
    """The corpus documents of ``split`` (``train`` or ``heldout``), in corpus order."""
    held = [_held_out(d.doc_id) for d in corpus.documents]
    return [d for d, h in zip(corpus.documents, held, strict=True) if h == (split == "heldout")]


def _held_out(doc_id: str) -> bool:
    return int(hashlib.sha256(doc_id.encode()).hexdigest(), 16) % HELDOUT_DOCS == 0


def prompts(
    corpus: Corpus, split: str, n: int, seed: int, start: int = 0, by: str = "parents"
) -> list[Prompt]:
    """Prompts ``start .. start + n - 1`` of ``split``: the split's (parent, directive) pairs in
    turn (:func:`pairs`), each with a document of the split drawn by a seeded stream
    (deterministic per seed)."""
    docs, menu = documents(corpus, split), pairs(split, by)
    out = []
    for i in range(start, start + n):
        parent, code, directive = menu[i % len(menu)]
        doc = random.Random(f"{seed}:{split}:{i}").choice(docs)
        out.append(Prompt(f"{split}:{i}", parent, code, directive, doc))
    return out


def reward(att: DesignAttempt, scoring: ScoringConfig) -> float:
    """1 for an accepted design; else the graded rejection reward of its failure and progress
    (``scoring.rejected_reward``), as a round scores a rejected design."""
    if att.accepted:
        return 1.0
    kind = att.failure_kind or "rejected"
    if kind == "parse":
        progress = parse_progress(att.completion)
    else:
        progress = float((att.verdict or {}).get("progress") or 0.0)
    return get_rejected_reward(scoring.rejected_reward)(kind, progress, scoring)


def grouped(attempts: Sequence[DesignAttempt], centre: str) -> list[DesignAttempt]:
    """``attempts`` as the trainer should group them: unchanged for ``"skill"`` (a round's
    designer estimator centres within each skill), or each prompt's answers a group of their
    own for ``"prompt"`` (GRPO's groups; the group a design sample is centred in is its
    attempt's skill, so the copies carry the prompt's slot there)."""
    if centre == "skill":
        return list(attempts)
    if centre != "prompt":
        raise ValueError(f"centre must be 'prompt' or 'skill', not {centre!r}")
    return [dataclasses.replace(a, skill=f"prompt{a.slot}") for a in attempts]


def well_formed(att: DesignAttempt) -> bool:
    """Accepted, or rejected only once it ran as an environment (:data:`WELL_FORMED_TIER`)."""
    return att.accepted or rejected_tier(att.failure_kind or "rejected") >= WELL_FORMED_TIER


def fisher_exact(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided Fisher exact test of ``k1`` of ``n1`` against ``k2`` of ``n2``: the probability,
    with the margins fixed, of a table no more likely than the one seen."""
    k, n = k1 + k2, n1 + n2

    def prob(a: int) -> float:
        return math.comb(n1, a) * math.comb(n2, k - a) / math.comb(n, k)

    seen = prob(k1)
    low, high = max(0, k - n2), min(k, n1)
    return min(1.0, sum(p for a in range(low, high + 1) if (p := prob(a)) <= seen * (1 + 1e-9)))


def sign_test_p(k: int, n: int) -> float:
    """Two-sided exact sign test: the probability under Binomial(n, 1/2) of a split at least as
    uneven as one whose smaller side is ``k`` (McNemar's exact test on ``n`` discordant pairs)."""
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def mcnemar_exact(before: Sequence[bool], after: Sequence[bool]) -> float:
    """Two-sided exact McNemar test of paired outcomes (each prompt answered at two points):
    with no change, a discordant pair (kept at one point only) is kept after with probability
    1/2, so the split of the discordant pairs is Binomial(b + c, 1/2); the probability of a split
    at least as uneven as the one seen. Concordant pairs carry no information about the change."""
    if len(before) != len(after):
        raise ValueError(f"paired outcomes differ in length: {len(before)} and {len(after)}")
    b = sum(x and not y for x, y in zip(before, after, strict=True))  # kept before only
    c = sum(y and not x for x, y in zip(before, after, strict=True))  # kept after only
    return sign_test_p(min(b, c), b + c)


def mcnemar_power(n: int, p0: float, p1: float, alpha: float = 0.05) -> float:
    """Chance that :func:`mcnemar_exact` on ``n`` prompts finds a rise (more kept after, p <
    ``alpha``) when each answer is kept with probability ``p0`` before and ``p1`` after,
    independently (seeded answers rarely repeat their text, so the two points' draws are
    treated as independent; prompts that are kept at both points more often than chance would
    give fewer discordant pairs and more power). The discordant count is Binomial(n, q) with q
    = p0(1 - p1) + p1(1 - p0), and among them the kept-after-only count Binomial(d, p1(1 - p0)
    / q)."""
    q = p0 * (1 - p1) + p1 * (1 - p0)
    if q <= 0:
        return 0.0
    r, total = p1 * (1 - p0) / q, 0.0
    for d in range(1, n + 1):
        p_d = math.comb(n, d) * q**d * (1 - q) ** (n - d)
        for up in range(d // 2 + 1, d + 1):
            if sign_test_p(d - up, d) < alpha:  # every larger ``up`` rejects too: add their mass
                total += p_d * sum(
                    math.comb(d, u) * r**u * (1 - r) ** (d - u) for u in range(up, d + 1)
                )
                break
    return total


def detectable_share(n: int, p0: float, power: float = 0.8, alpha: float = 0.05) -> float | None:
    """The smallest kept share after (to 0.01) that ``n`` paired prompts at base share ``p0``
    show as a rise with probability ``power`` (:func:`mcnemar_power`); None: not even 1.0."""
    for hundredths in range(math.floor(p0 * 100) + 1, 101):
        if mcnemar_power(n, p0, hundredths / 100, alpha) >= power:
            return hundredths / 100
    return None


def request_seed(seed: int, request: ChatRequest) -> int:
    """A sampling seed that depends only on ``seed`` and what the request asks (its messages and
    prefill): the same held-out prompt is sampled under the same seed at every point."""
    key = json.dumps([seed, list(request.messages), request.prefill], sort_keys=True)
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") & 0x7FFFFFFF


class SeededBackend:
    """``backend`` with every request sampled under :func:`request_seed`: the held-out points
    differ by their weights, not by the sampler's draws (the same weights read 4/48 and 9/48
    unseeded), so the points can be compared prompt by prompt (:func:`mcnemar_exact`). Only for
    one answer per prompt: the answers of a training group must differ."""

    def __init__(self, backend: Backend, seed: int) -> None:
        self._backend, self._seed = backend, seed

    @property
    def model_name(self) -> str:
        return self._backend.model_name

    async def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        seeded = [
            dataclasses.replace(
                r, params=dataclasses.replace(r.params, seed=request_seed(self._seed, r))
            )
            for r in requests
        ]
        return await self._backend.complete(seeded)

    def count_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int | None:
        return self._backend.count_tokens(messages, tools)

    async def aclose(self) -> None:  # the pool owns the backend it wraps
        return None


def rates(attempts: Sequence[DesignAttempt]) -> dict[str, float | int]:
    """Counts and shares of one evaluation point's attempts (failed requests left out)."""
    measured = [a for a in attempts if not a.failed]
    n = len(measured)
    kept = sum(a.accepted for a in measured)
    formed = sum(well_formed(a) for a in measured)
    return {
        "n": n,
        "kept": kept,
        "well_formed": formed,
        "kept_share": kept / n if n else 0.0,
        "well_formed_share": formed / n if n else 0.0,
        "kept_if_well_formed": kept / formed if formed else 0.0,
        "failed_requests": len(attempts) - n,
    }


def copied_shares(attempts: Sequence[DesignAttempt], n: int) -> dict[str, float | None]:
    """Share of the answers' tokens copied from their prompts (runs of ``>= n`` tokens found
    there: :func:`spade.training.copied.copied_positions`), over the kept answers and over the
    rest (None: no such answer with tokens): is a kept answer mostly its parent copied?"""
    counts = {True: [0, 0], False: [0, 0]}  # kept -> [copied, tokens]
    for a in attempts:
        for part in a.sampled_parts():
            copied = copied_positions(part["prompt_token_ids"], part["token_ids"], n)
            counts[a.accepted][0] += sum(copied)
            counts[a.accepted][1] += len(copied)
    return {
        f"copied_{name}": (c / t if t else None)
        for name, (c, t) in (("kept", counts[True]), ("rest", counts[False]))
    }


def results_path(root: Path) -> Path:
    return root / "bench" / "results" / "designer_learnability.json"
