"""Novel acceptance: how many design attempts pass the verifier and are new, per designer variant.

One model and backend, one batch of ``--attempts`` design slots (one attempt each, the same
seeded documents for every variant), and for each variant of the designer:

- ``write-bare``: the paper's strategy with an empty memory (no examples in the prompt);
- ``write-examples``: the memory seeded with the bundled examples that are not held out (whole
  examples only, framed as format not to copy);
- ``write-repair``: as ``write-examples`` with one repair turn (the verifier's named failure back
  to the model once);
- ``edit``: ACCEL-style editing of a whole parent from the same pool into a variant on the
  document;
- ``edit-repair``: ``edit`` with one repair turn;
- ``splice``: method-level mutation of a whole parent from the same pool under one seeded rule-level
  directive (the answer prefilled with the first asked method's signature, for ``clue`` and
  ``credit`` its docstring too, and stopped at the closing fence, a module-level ``def`` or
  ``class``, ``if __name__``, ``__init__`` and, for ``clue`` and ``credit``, the next method; the
  harness splices the methods into the parent; up to two follow-up requests ask for an asked hook it
  left unwritten or a method it calls and never wrote);
- ``splice-once``: ``splice`` without follow-ups (the answer as first sampled);
- ``splice-rules``: ``splice`` drawing only the rule directives (``clue``, ``credit``): the
  answer is one small rule method of the parent, its signature and docstring prefilled (a
  parent without one gets a hook-level directive);
- ``scaffold``: as ``write-examples``, but the harness writes the frame (fence, class header,
  skill, hook signatures) and each hook's body is sampled on its own.

Accepted designs passed every check, ``novelty`` included (no near-verbatim copy and no
behavioural duplicate of the parent or the examples shown). As a second line of defence the
table also counts accepted designs that are near-verbatim copies (the verifier's rule: source
similarity at least ``max_similarity`` with only literals differing) of ANY bundled example
(held-out ones included, shown or not) or of a design the variant accepted before, and those
the verifier's novelty check (side-by-side play included) calls duplicates of a design the
variant accepted before: neither is counted as novel.

**Worth keeping** (issues 34 and 49): the verifier's checks that read a design as a player
would — ``winnable`` (the parent's observation-only player loses: a clue that lies or is noise),
``leaks_answer`` (a reader wins by submitting what it sees, or a simple function of it) and
``perverse_credit`` (a credit rule that rewards the wrong thing) — are the last rungs before
novelty. A design rejected by one
of them is verified again with those checks waived: if it passes everything else, it is a
design the verifier before them accepted, and the table counts it as ``caught``. So
``accepted`` (the verifier without them), ``novel`` (of those) and ``kept`` (novel and passing
them) read left to right, and every kept design is printed as its diff from its parent (its
head when it has none), so one screen shows what the designer made.

The figure the demo's choice rests on is **novel accepted designs per minute** (wall time of
generation, verification, repair and hints, on this machine). Benchmarks report; they do not
assert. JSON goes to ``bench/results/designs-<model>.json``.

Usage: ``.venv/bin/python bench/designs.py [--model ALIAS] [--attempts 16] [--variants a,b]``
(``--quick``: SmolLM2, 2 attempts, two variants; the smoke test).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import time
from collections import Counter
from pathlib import Path
from typing import Any

from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

from spade.config import CampaignConfig, load_config
from spade.designer.corpus import Corpus
from spade.designer.designer import design_batch, verify_design
from spade.designer.followup import parent_code
from spade.envs.examples import example_paths
from spade.inference.factory import open_backend
from spade.pipeline.state import seed_memory
from spade.records import DesignAttempt
from spade.sandbox.policy import SandboxPolicy, load_policy
from spade.verify.novelty import literal_edits_only, similarity, source_tokens

RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLES = str(Path(example_paths()[0]).parent)


def _variant(strategy: str, examples: bool, repair: int, followups: int = 2) -> dict[str, Any]:
    return {
        "designer.strategy": strategy,
        "memory.seed_pool": EXAMPLES if examples else None,
        "designer.repair_turns": repair,
        "designer.followups": followups,
    }


VARIANTS: dict[str, dict[str, Any]] = {
    "write-bare": _variant("write", False, 0),
    "write-examples": _variant("write", True, 0),
    "write-repair": _variant("write", True, 1),
    "edit": _variant("edit", True, 0),
    "edit-repair": _variant("edit", True, 1),
    "splice": _variant("splice", True, 0),
    "splice-once": _variant("splice", True, 0, followups=0),  # no follow-up requests
    # one rule method of the parent (clue or credit) where it has one
    "splice-rules": _variant("splice", True, 0) | {"designer.directives": ["clue", "credit"]},
    "scaffold": _variant("scaffold", True, 0),
}
# the demo's held-out environments (absolute: the bench runs from bench/), never shown
HELDOUT = [
    str(Path(EXAMPLES) / f"{n}.py") for n in ("code_breaker", "maze_walk", "sequence_oracle")
]


def base_config(args: argparse.Namespace) -> dict[str, Any]:
    """The settings every variant shares: the demo's designer budget on ``--attempts`` slots."""
    return {
        "name": "bench-designs",
        "seed": args.seed,
        "model.name_or_path": args.model,
        "inference.backend": args.backend,
        "inference.request_timeout_s": 3600.0,
        "corpus.path": "builtin:wiki",
        "corpus.max_words_games": 120,
        "designer.envs_per_round": args.attempts,
        "designer.attempts_per_slot": 1,
        "designer.max_tokens": args.max_tokens,
        "designer.active_skills": 3,
        "sandbox.workers": 2,
        "run.heldout_envs": HELDOUT,
        "training.lora.enabled": True,  # the llama.cpp backend serves trained weights as LoRA
    }


def variant_config(args: argparse.Namespace, name: str) -> CampaignConfig:
    return load_config(None, base_config(args) | VARIANTS[name])


NEW_CHECKS = ("winnable", "leaks_answer", "perverse_credit")
"""The checks that read a design as a player would (issues 34 and 49): what they reject is
``caught``."""


def caught(
    attempts: list[DesignAttempt], cfg: CampaignConfig, policy: SandboxPolicy
) -> dict[int, str]:
    """By index in ``attempts``: the check that rejected a design that passes every other
    check (verified again with :data:`NEW_CHECKS` waived), i.e. one the verifier before them
    accepted."""
    out = {}
    for i, a in enumerate(attempts):
        check = (a.verdict or {}).get("failed_check")
        if (
            a.code
            and check in NEW_CHECKS
            and verify_design(a.code, cfg, policy, a.references, waive=NEW_CHECKS).accepted
        ):
            out[i] = str(check)
    return out


def diff_from_parent(att: DesignAttempt, lines: int = 40) -> str:
    """``att``'s code as a unified diff from its parent's (the reference its prompt showed by
    the parent's name), at most ``lines`` lines; the head of the code when it has no parent."""
    code = att.code or ""
    parent = parent_code(att)
    if parent is None:
        return "\n".join(code.splitlines()[:lines])
    diff = difflib.unified_diff(
        parent.splitlines(), code.splitlines(), str(att.parent_id), "design", n=1, lineterm=""
    )
    return "\n".join(list(diff)[:lines])


def pool_copies(attempts: list[DesignAttempt], threshold: float) -> list[tuple[float, bool]]:
    """Each design's (``attempts``: the accepted ones) highest normalised source similarity to
    any bundled example and to every design the variant accepted before it (a second copy of
    one new game is not a second novel design), and whether it is a near-verbatim copy of one
    of them by the verifier's rule (that similar, and only literals differ:
    ``novelty.near_verbatim``)."""
    refs = [source_tokens(p.read_text(), 6000) for p in example_paths()]
    out = []
    for a in attempts:
        if a.code:
            mine = source_tokens(a.code, 6000)
            scores = [similarity(mine, r) for r in refs]
            copy = any(  # the verifier's rule (novelty.near_verbatim), each ratio taken once
                score >= threshold and literal_edits_only(mine, r)
                for score, r in zip(scores, refs, strict=True)
            )
            out.append((max(scores, default=0.0), copy))
            refs.append(mine)
    return out


def repeats(
    attempts: list[DesignAttempt], cfg: CampaignConfig, policy: SandboxPolicy
) -> list[bool]:
    """For each design (``attempts``: the accepted ones), whether it is a duplicate of a design
    the variant accepted before it by the verifier's own novelty check (source and side-by-side
    play, in the jail): two answers that write one new rule two ways are one novel design, not
    two."""
    out: list[bool] = []
    earlier: list[dict[str, str]] = []
    for a in attempts:
        if a.code:
            verdict = verify_design(a.code, cfg, policy, earlier) if earlier else None
            kind = verdict.failure.kind if verdict is not None and verdict.failure else None
            out.append(kind == "duplicate")
            earlier.append({"name": f"accepted slot {a.slot} sample {a.sample}", "code": a.code})
    return out


async def run_variant(backend: Any, cfg: CampaignConfig, name: str) -> dict[str, Any]:
    policy = load_policy(cfg.sandbox.policy_path)
    memory = seed_memory(cfg)
    started = time.perf_counter()
    attempts = await design_batch(backend, Corpus.load(cfg.corpus), memory, cfg, policy)
    minutes = (time.perf_counter() - started) / 60
    threshold = cfg.sandbox.verify.max_similarity
    catches = caught(attempts, cfg, policy)
    admitted = [a for i, a in enumerate(attempts) if a.accepted or i in catches]
    copies = pool_copies(admitted, threshold)
    repeated = repeats(admitted, cfg, policy)
    novel_ids = {
        id(a)
        for a, (_, copy), again in zip(admitted, copies, repeated, strict=True)
        if not copy and not again
    }
    kept = [a for a in admitted if id(a) in novel_ids and a.accepted]
    accepted, novel = len(admitted), len(novel_ids)  # accepted: by the verifier before NEW_CHECKS
    kinds = Counter(a.failure_kind or "accepted" for a in attempts)
    first = Counter((a.first_failure_kind or a.failure_kind or "accepted") for a in attempts)
    return {
        "variant": name,
        "attempts": len(attempts),
        "accepted": accepted,
        "after_repair": sum(a.accepted_after_repair for a in attempts),
        "novel": novel,
        "novel_share": novel / len(attempts) if attempts else 0.0,
        "minutes": minutes,
        "novel_per_min": novel / minutes if minutes else 0.0,
        "kept": len(kept),
        "kept_share": len(kept) / len(attempts) if attempts else 0.0,
        "kept_per_min": len(kept) / minutes if minutes else 0.0,
        "caught": dict(Counter(catches.values())),
        "tokens": sum(
            len(a.token_ids) + sum(len(s["token_ids"]) for s in a.segments) for a in attempts
        ),
        "final_kinds": dict(kinds),
        "first_kinds": dict(first),
        "max_pool_similarity": [top for top, _ in copies],
        "pool_copy": [copy for _, copy in copies],
        "repeats_earlier": repeated,
        "strategies": dict(Counter(a.strategy for a in attempts)),
        "designs": [
            {
                "slot": a.slot,
                "skill": a.skill,
                "strategy": a.strategy,
                "parent": a.parent_id,
                "directive": a.directive,
                "spliced": a.spliced,
                "accepted": a.accepted,
                "repaired": a.accepted_after_repair,
                "failure": a.failure_kind,
                "reason": (a.failure_reason or "")[:300],
                "first_failure": a.first_failure_kind,
                "caught_by": catches.get(i),
                "kept": id(a) in novel_ids and a.accepted,
                "diff": diff_from_parent(a) if a.accepted and id(a) in novel_ids else None,
                "code": a.code,
            }
            for i, a in enumerate(attempts)
        ],
    }


def show(console: Console, model: str, rows: list[dict[str, Any]]) -> None:
    table = Table(title=f"Designs worth keeping: {model}", title_justify="left")
    cols = ("variant", "tries", "acc", "repaired", "novel", "kept", "caught", "min", "kept/min")
    for col in cols:
        table.add_column(col, justify="right" if col not in ("variant", "caught") else "left")
    for r in rows:
        caught = ", ".join(f"{n} {k}" for k, n in r["caught"].items()) or "-"
        table.add_row(
            r["variant"], str(r["attempts"]), str(r["accepted"]), str(r["after_repair"]),
            str(r["novel"]), str(r["kept"]), caught, f"{r['minutes']:.1f}",
            f"{r['kept_per_min']:.2f}",
        )  # fmt: skip
    console.print(table)
    for r in rows:
        console.print(f"{r['variant']}: first answers {r['first_kinds']}; final {r['final_kinds']}")
        for d in r["designs"]:
            if d["kept"]:
                what = f"{d['strategy']} {d['directive'] or ''} of {d['parent'] or 'nothing'}"
                console.rule(f"kept: slot {d['slot']}, {what}")
                console.print(d["diff"], markup=False, highlight=False)


async def main(args: argparse.Namespace) -> None:
    console = Console()
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    rows = []
    async with open_backend(variant_config(args, names[0])) as backend:
        for name in names:
            console.print(f"[bold]{name}[/] ...")
            rows.append(await run_variant(backend, variant_config(args, name), name))
            show(console, args.model, rows[-1:])
            write_json(args.out, _report(args, rows))
    show(console, args.model, rows)
    console.print(f"JSON: {args.out}")


def _report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> dict[str, Any]:
    settings = vars(args) | {"out": str(args.out)}
    return {"machine": machine() | {"timestamp": timestamp()}, "settings": settings, "rows": rows}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    p.add_argument("--backend", default="llamacpp", choices=["llamacpp", "transformers"])
    p.add_argument("--attempts", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=1200)
    p.add_argument("--seed", type=int, default=0)
    known = ", ".join(VARIANTS)
    p.add_argument("--variants", default="", help=f"comma-separated subset of: {known}")
    p.add_argument("--quick", action="store_true", help="SmolLM2, 2 attempts, 2 variants")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.model, args.attempts, args.max_tokens = "smollm2-135m-instruct", 2, 64
        args.variants = args.variants or "write-bare,edit-repair"
    if args.out is None:
        args.out = RESULTS / f"designs-{args.model}.json"
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
