"""What a design is: one attempt at a designer slot (prompt, answer, code, what became of it),
the verifier's verdict on a design, and the classified failures verdicts and plays carry.

The failure vocabulary (:class:`FailureKind`) is data every layer reads (verdicts, rewards,
reports); :mod:`spade.sandbox.failures` classifies what a jailed process did into it.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


def env_id_for(code: str) -> str:
    """Content address of a design: the same code is the same environment."""
    return "env-" + hashlib.sha256(code.encode("utf-8")).hexdigest()[:16]


INFERENCE = "inference"
"""Failure kind of an attempt whose design or repair request failed on our side."""


class FailureKind(StrEnum):
    """Why a sandboxed environment (or one of its calls) failed."""

    SYNTAX = "syntax"  # the code does not parse
    IMPORT_DENIED = "import_denied"  # imports a module outside the allow-list
    POLICY_DENIED = "policy_denied"  # uses a forbidden builtin or escape attribute
    CONTRACT = "contract"  # API shape wrong: no Env class, bad types, reward out of range
    CRASH = "crash"  # the environment raised an exception
    TIMEOUT = "timeout"  # a call or the session ran past its wall or CPU limit
    SESSION_EXPIRED = "session_expired"  # the session's wall limit ran out while the episode
    # waited on our side (model turns): the environment's own calls took under half of it
    MEMORY = "memory"  # out of memory (MemoryError or the memory cgroup)
    OUTPUT_LIMIT = "output_limit"  # a message or the log exceeded its size limit
    FS_DENIED = "fs_denied"  # touched a path the jail does not provide or allow
    NET_DENIED = "net_denied"  # tried to use the network
    PROC_LIMIT = "proc_limit"  # tried to start more processes than allowed
    DISK_LIMIT = "disk_limit"  # filled its tmpfs or exceeded the file size limit
    EXITED = "exited"  # the interpreter exited or was killed by a signal mid-session
    PROTOCOL = "protocol"  # garbled or unexpected message on the session channel
    NONDETERMINISTIC = "nondeterministic"  # same seed and actions, different transcript
    NO_TERMINATION = "no_termination"  # an episode did not end within max_turns
    INFEASIBLE = "infeasible"  # solution() replayed does not reach the goal
    TRIVIAL = "trivial"  # empty or random play reaches the goal
    SEED_INDEPENDENT = "seed_independent"  # every seed gives the same instance
    DUPLICATE = "duplicate"  # a near-verbatim copy of a reference, or plays exactly like one
    UNSOLVABLE = "unsolvable"  # the designer's auditor: the goal cannot be derived from what
    # the agent is told (spade.designer.solvability; judged by a model, not run)
    LEAKS_ANSWER = "leaks_answer"  # a reader that submits what it sees wins (spade.verify.leaks)
    PERVERSE_CREDIT = "perverse_credit"  # credit rewards the wrong thing (spade.verify.credit)


@dataclass(frozen=True)
class Failure:
    """One classified failure: a kind, a one-line reason and the environment's traceback."""

    kind: FailureKind
    reason: str
    traceback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"kind": str(self.kind)}


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict: passed or not, and why."""

    name: str
    passed: bool
    reason: str
    kind: str | None = None
    traceback: str | None = None
    seconds: float = 0.0
    waived: bool = False  # failed, but the import waived this check (VerifyConfig.waive)

    @property
    def holds(self) -> bool:
        """Passed, or failed and waived: it does not reject the design."""
        return self.passed or self.waived


@dataclass
class Verdict:
    """A design's verdict: the checks that ran, in order, and the first failure if any."""

    checks: list[CheckResult] = field(default_factory=list)
    failure: Failure | None = None
    class_name: str | None = None
    skill: str | None = None
    tool_use: bool = False
    hint: str | None = None
    solution: list[str] = field(default_factory=list)
    seconds: float = 0.0
    similarity: float | None = None  # source similarity of the closest reference, if compared
    progress: float = 0.0  # how far a rejected design got in its failure's tier: see _progress

    @property
    def solution_length(self) -> int:
        return len(self.solution)

    @property
    def accepted(self) -> bool:
        return self.failure is None and bool(self.checks) and all(c.holds for c in self.checks)

    @property
    def failed_check(self) -> str | None:
        failed = self.rejecting_check
        return failed.name if failed is not None else None

    @property
    def rejecting_check(self) -> CheckResult | None:
        """The first check that failed and was not waived (None: accepted so far)."""
        return next((c for c in self.checks if not c.holds), None)

    @property
    def waived(self) -> list[str]:
        """The checks that failed but were waived (reported, never silently skipped)."""
        return [c.name for c in self.checks if c.waived]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``spade env check --json`` (without the path)."""
        return {
            "accepted": self.accepted,
            "checks": [
                {"name": c.name, "passed": c.passed, "reason": c.reason}
                | ({"waived": True} if c.waived else {})
                for c in self.checks
            ],
            "failure": {"kind": str(self.failure.kind), "reason": self.failure.reason}
            if self.failure
            else None,
            "similarity": self.similarity,
            "progress": self.progress,
        }


@dataclass
class DesignAttempt:
    """One try at one slot: the prompt, the completion, and what became of it.

    ``messages``, ``completion`` and the token fields are the first answer's (what the designer
    trains on); ``code``, ``env_id``, ``verdict``, ``accepted`` and the failure are the final
    ones, after any repair turns. A repaired attempt keeps its first answer's code and failure
    in ``first_code`` / ``first_failure_kind`` / ``first_failure_reason`` / ``first_progress``
    (how far through the verifier it got: what its own reward is graded on), and the repair
    conversation (user feedback, assistant answer, ...) in ``repair_messages``.
    ``strategy`` is how the design was asked for ("write", or "edit" of the memory record
    ``parent_id``; an edit slot with no parent is written). ``references`` are the designs it
    must not copy, ``{"name": env id, "code": whole code}``: its parent and its prompt's examples.
    ``inherited`` names the parent's module-level definitions an edit used without writing them,
    carried over into ``code`` (:func:`spade.designer.inherit.inherit_missing`).
    A splice (:mod:`spade.designer.splice`) rewrote the methods ``spliced`` of its parent
    under the rule-level ``directive``, as the class ``class_name``. ``prefill`` is where the
    harness started the answer (prompt tokens, never trained; ``completion`` continues it) and
    ``stop`` where its sampling stopped. ``sample`` numbers the designs sampled together for
    one slot and attempt (``designer.samples_per_slot``). A scaffolded design
    (:mod:`spade.designer.scaffold`) was sampled one body at a time: ``segments`` holds each
    body's ``prompt_token_ids``, ``token_ids``, ``logprobs`` and ``text`` (each a training
    sample of its own), and the top-level token fields stay empty. ``solvability`` is the
    optional auditor's ``{"solvable": bool | None, "reason"}`` (:mod:`spade.designer.solvability`).
    ``failure_kind == INFERENCE`` (:attr:`failed`): a design or repair request failed on our
    side; a failed repair keeps the code and verdict it was repairing, for the record.
    """

    slot: int
    attempt: int
    skill: str
    doc_id: str
    messages: list[dict[str, Any]]
    completion: str = ""
    model: str = ""
    code: str | None = None
    env_id: str | None = None
    accepted: bool = False
    failure_kind: str | None = None  # INFERENCE, parse, or the verifier's failure kind
    failure_reason: str | None = None
    verdict: dict[str, Any] | None = None
    tool_use: bool = False
    solution: list[str] = field(default_factory=list)
    hint: str | None = None
    hint_note: str | None = None
    prompt_token_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    strategy: str = "write"
    parent_id: str | None = None
    references: list[dict[str, str]] = field(default_factory=list)
    first_code: str | None = None
    first_failure_kind: str | None = None
    first_failure_reason: str | None = None
    first_progress: float = 0.0
    repair_messages: list[dict[str, Any]] = field(default_factory=list)
    inherited: list[str] = field(default_factory=list)
    prefill: str = ""
    stop: list[str] = field(default_factory=list)
    directive: str | None = None
    class_name: str | None = None
    spliced: list[str] = field(default_factory=list)
    sample: int = 0
    segments: list[dict[str, Any]] = field(default_factory=list)
    solvability: dict[str, Any] | None = None

    def add_segment(
        self, prompt_token_ids: list[int], token_ids: list[int], logprobs: list[float], text: str
    ) -> None:
        """One separately sampled part of the answer (a scaffold's body, a splice's follow-up),
        trained as a sample of its own with the design's reward."""
        self.segments.append(
            {
                "prompt_token_ids": prompt_token_ids,
                "token_ids": token_ids,
                "logprobs": logprobs,
                "text": text,
            }
        )

    def sampled_parts(self) -> list[dict[str, Any]]:
        """What the designer sampled: each segment (a scaffolded body, a splice's follow-up),
        else the one answer, as ``prompt_token_ids``/``token_ids``/``logprobs`` (the trainer's
        samples, :func:`spade.training.samples.samples_from_design_attempts`)."""
        return self.segments or [
            {
                "prompt_token_ids": self.prompt_token_ids,
                "token_ids": self.token_ids,
                "logprobs": self.logprobs,
            }
        ]

    @property
    def failed(self) -> bool:
        """A request of this attempt failed on our side: it measures nothing about the designer."""
        return self.failure_kind == INFERENCE

    @property
    def repairs(self) -> int:
        """Repair turns this attempt took (answers after the first)."""
        return sum(m["role"] == "assistant" for m in self.repair_messages)

    @property
    def accepted_after_repair(self) -> bool:
        """Accepted, but not on the first answer."""
        return self.accepted and self.repairs > 0

    @property
    def last_answer(self) -> str:
        """The newest answer's text: the last repair's, else the first completion."""
        return self.repair_messages[-1]["content"] if self.repairs else self.completion

    def to_dict(self) -> dict[str, Any]:
        """The fields, plus ``accepted_after_repair`` for readers of the JSON."""
        return asdict(self) | {"accepted_after_repair": self.accepted_after_repair}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DesignAttempt:
        """Inverse of :meth:`to_dict`; other keys (a scored row's ``reward``, ...) are ignored."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
