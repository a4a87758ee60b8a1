"""Run the named checks over one design and produce its verdict."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from spade.config import VerifyConfig
from spade.records import CheckResult, FailureKind, Verdict
from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy
from spade.verify.checks import CHECKS, Context
from spade.verify.gate import GATE_CHECKS, Design, Finding
from spade.verify.novelty import Reference, similarity, source_tokens
from spade.verify.static import parsed_share

WAIVABLE: dict[str, FailureKind] = {
    "seed_dependence": FailureKind.SEED_INDEPENDENT,
    "informative": FailureKind.UNSOLVABLE,
    "winnable": FailureKind.UNSOLVABLE,
    "leaks_answer": FailureKind.LEAKS_ANSWER,
    "perverse_credit": FailureKind.PERVERSE_CREDIT,
    "novelty": FailureKind.DUPLICATE,
}
"""The failure kind each waivable check (``VerifyConfig.waive``) judges with: only that
judgement is waived, never a crash or a limit met while the check ran."""


def verify(
    code: str,
    *,
    config: VerifyConfig | None = None,
    policy: SandboxPolicy,
    references: Sequence[Reference] = (),
    gate: bool = False,
) -> Verdict:
    """Run every check on ``code`` (in the sandbox where it executes anything). The novelty
    check compares it with ``references`` (its parent, the examples its designer was shown).
    A check named in ``config.waive`` that fails by its own judgement (:data:`WAIVABLE`) is
    recorded failed and ``waived`` and does not stop the run nor reject the design. With
    ``gate``, the static gate (:mod:`spade.verify.gate`, milliseconds) runs first and a design
    it rejects never reaches the jail (:func:`gate_verdict`)."""
    if gate and (gated := gate_verdict(code, config or VerifyConfig(), references)) is not None:
        return gated
    ctx = Context(
        code=code,
        config=config or VerifyConfig(),
        policy=policy,
        references=tuple(references),
    )
    verdict = Verdict()
    t_all = time.perf_counter()
    try:
        for name, check in CHECKS:
            t0 = time.perf_counter()
            try:
                reason = check(ctx)
            except EnvFailure as exc:  # the design failed this check: record it and stop
                f = exc.failure
                waived = name in ctx.config.waive and WAIVABLE.get(name) == f.kind
                verdict.checks.append(
                    CheckResult(
                        name,
                        False,
                        f.reason,
                        str(f.kind),
                        f.traceback,
                        time.perf_counter() - t0,
                        waived=waived,
                    )
                )
                if waived:  # reported in the verdict, marked waived; the next checks run
                    continue
                verdict.failure = f
                break
            verdict.checks.append(CheckResult(name, True, reason, seconds=time.perf_counter() - t0))
    finally:
        ctx.close()
    if ctx.info is not None:
        verdict.class_name, verdict.skill = ctx.info.class_name, ctx.info.skill
        verdict.tool_use, verdict.hint = ctx.info.tool_use, ctx.info.hint
    verdict.solution, verdict.similarity = list(ctx.solution), ctx.similarity
    verdict.progress = _progress(verdict, ctx.config, code)
    verdict.seconds = time.perf_counter() - t_all
    return verdict


def _progress(verdict: Verdict, config: VerifyConfig, code: str) -> float:
    """How far a design got within the failure that stopped it, in [0, 1] (graded designer
    rewards tell apart designs that failed the same way): the share of the checks it passed;
    for a syntax error, the share of the code that parses before it
    (:func:`spade.verify.static.parsed_share`: every syntax error fails the first check); for a
    copy, how far its source similarity lies below a verbatim copy's, as a share of the way to
    the copy threshold (a copy that plays like its reference but reads differently: 1). An
    accepted design: 1."""
    if verdict.failure is None:
        return 1.0 if verdict.accepted else 0.0
    if verdict.failure.kind == FailureKind.SYNTAX:
        if len(code.encode("utf-8", "surrogatepass")) > config.max_code_bytes:
            return 0.0  # not parsed at all: over the size limit
        return parsed_share(code)
    if verdict.failure.kind == FailureKind.DUPLICATE:
        sim = verdict.similarity
        if sim is None or config.max_similarity >= 1.0:
            return 0.0
        return min(1.0, max(0.0, (1.0 - sim) / (1.0 - config.max_similarity)))
    return sum(c.passed for c in verdict.checks) / len(CHECKS)


def gate_verdict(
    code: str, config: VerifyConfig, references: Sequence[Reference] = ()
) -> Verdict | None:
    """The verdict of the static gate on ``code``, or None when it passes: one failed check
    ``gate_<name>`` with the failure kind the jailed verifier would give. The near-copy test
    runs against every reference (unless ``novelty`` is waived)."""
    t0 = time.perf_counter()
    limits = (config.max_similarity, config.similarity_max_tokens, config.max_code_bytes)
    designs = [Design(code, None, "parent", *limits)]
    if "novelty" not in config.waive:
        designs += [Design(code, r.code, r.name, *limits) for r in references]
    for name, check in GATE_CHECKS:
        for design in designs if name == "near_copy" else designs[:1]:
            found = check(design)
            if found is None:
                continue
            failure = found.failure
            verdict = Verdict(failure=failure, seconds=time.perf_counter() - t0)
            verdict.checks.append(
                CheckResult(f"gate_{name}", False, failure.reason, str(failure.kind))
            )
            if failure.kind == FailureKind.DUPLICATE and design.parent is not None:
                verdict.similarity = similarity(
                    source_tokens(code, design.max_tokens),
                    source_tokens(design.parent, design.max_tokens),
                )
            if failure.kind in (FailureKind.SYNTAX, FailureKind.DUPLICATE):
                verdict.progress = _progress(verdict, config, code)
            else:  # no check ran: graded by where the jail would have failed
                verdict.progress = _gate_progress(found, code)
            return verdict
    return None


_FIRST_CALLED_BY = {
    "__init__": "reset_contract",
    "setup": "reset_contract",
    "reset": "reset_contract",
    "solution": "feasibility",
    "module": "class_found",  # read at module level: runs when the class is loaded
}
"""The verifier check that first runs a method in the jail (any other: ``step_contract``)."""


def _gate_progress(found: Finding, code: str) -> float:
    """How far a design the gate rejected would have got in the jail: the share of the
    verifier's checks before the first one that runs the method it names (a crash in
    ``solution`` ranks above one in ``setup``, as the jail's own progress does), plus, within
    that check's step, the share of the code above the offending line. Without a jail run the
    graded rewards of a round's gate rejections would otherwise all tie at 0 (a demo round of
    four gate crashes gave the designer equal rewards and no update)."""
    check = _FIRST_CALLED_BY.get(found.method or "", "step_contract")
    names = [name for name, _ in CHECKS]
    within = found.line / (code.count("\n") + 2) if found.line else 0.0
    return (names.index(check) + min(within, 0.99)) / len(CHECKS)


def verify_file(
    path: str | Path,
    *,
    config: VerifyConfig | None = None,
    policy: SandboxPolicy,
    references: Sequence[Reference] = (),
) -> Verdict:
    """:func:`verify` on a file's text (undecodable bytes are replaced, not fatal)."""
    code = Path(path).read_text(encoding="utf-8", errors="replace")
    return verify(code, config=config, policy=policy, references=references)
