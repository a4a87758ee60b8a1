"""Designer learnability: can the designer's half of SPADE learn to write designs worth keeping?

bench/learnability.py measures the agent's half; this measures the designer's the same way. Only
the designer trains, with the demo's strategy (``splice`` under a rule directive, ``clue`` or
``credit``: bench/designer_learnability_task.py) and the chain a round uses: design requests
(follow-ups included) sampled by the pool's managed llama.cpp server at the designer's
temperature, every answer spliced and verified in the jail by the campaign's verifier, one GRPO
update per step by :func:`spade.training.run.update_from_parent` (role ``designer``: LoRA, the
round's advantage estimator, one optimizer carried from checkpoint to checkpoint), each
checkpoint published by :func:`spade.pipeline.publish.publish` (GGUF adapter, server restart)
and served for the next step. The reward needs no agent plays: 1 for a design the verifier
accepts (which is novel and passes ``leaks_answer`` and ``perverse_credit``: worth keeping), the
campaign's graded rejection reward (below 0) for the rest.

1. **Training**: ``--updates`` steps of ``--prompts`` train prompts x ``--samples`` answers
   (16 per update by default), each prompt a train parent, one of its rule methods and a train
   document; each prompt's answers are centred on their own mean (``--centre prompt``, GRPO's
   groups) or, as a round centres a designer's rewards, within each skill (``--centre skill``).
2. **Held-out**: ``--heldout`` prompts of the held-out split (parents and documents never
   trained on), one answer each at the designer's temperature, with the base weights and after
   every ``--eval-every`` updates, each prompt under a sampling seed of its own, the same at
   every point (:class:`SeededBackend`), so the points differ by their weights and are compared
   prompt by prompt: the top-level ``p_value`` is McNemar's two-sided exact test of the last
   point against the base (Fisher's exact test of the two shares, unpaired, beside it); the
   rise is split into well-formed answers (past parse, syntax, policy and contract) and designs
   kept among them. ``detectable_share``: the kept share these prompts would show as a rise
   (p < 0.05) 4 times in 5 from the base's share, answers drawn independently: the smallest
   rise a null result rules out (48 prompts at a base of 0.15: about 0.43).
3. **How far each update moved**: ``training.measure_shift`` scores each update's batch again
   with the new weights: KL from the weights before and the mean log-prob change per token of
   the answers with a positive and a negative advantage (:mod:`spade.training.shift`), so a flat
   curve can be told apart as "the weights barely moved" or "they moved, toward answers that
   do not carry over".

``--quick`` is a smoke run on the shipped SmolLM2-135M. The defaults (Qwen2.5-Coder-0.5B, the
demo's config: 6 updates, held-out points at the base and after update 6) take about 70 min
on 2 cores (about 11 min per update or held-out point on an AVX2-only EPYC, where the updates
train in float32; the issue asked for about 75 min; the default was 12 updates, 2-3 hours,
until the runs of docs/results/designer_learnability.md had used 6). Benchmarks report; they
do not assert. A table prints, JSON goes to ``--out`` (default
bench/results/designer_learnability.json) and the figure beside it (``.png``).

``--split documents`` is a diagnostic: every parent on both sides, only the documents held out
(bench/designer_learnability_task.py), to tell "the designer learns nothing" from "what it
learns on the trained parents does not carry over to other games". The JSON is rewritten after
every update and held-out point (``"partial": true`` until the run ends).

``--heldout 0`` is a training-side run: no held-out point and no p-value, only the updates
(the training answers and how far each moved the policy), e.g. to compare learning rates.

Usage: ``.venv/bin/python bench/designer_learnability.py [--quick] [--updates N] [--lr X]
[--heldout N] [--split parents|documents] [--copy-mask off|positive|all] [--rejected
flat|graded] [--seed S] [--out PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chain import publish_step  # bench/chain.py
from designer_learnability_task import (
    SPLITS,
    Prompt,
    SeededBackend,
    copied_shares,
    detectable_share,
    fisher_exact,
    grouped,
    mcnemar_exact,
    prompts,
    rates,
    results_path,
    reward,
)
from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

from spade.training.copied import COPY_MASKS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

console = Console()
CAMPAIGN = "designer-learnability"
STEP_METRICS = ("mismatch_kl", "mismatch_outside", "zero_variance_groups", "loss", "grad_norm",
                "shift_kl", "shift_up", "shift_down")  # fmt: skip


def build_config(args: argparse.Namespace, store: Path) -> Any:
    from spade.config import load_config

    overrides = {
        "model.name_or_path": args.model,
        "storage.root": str(store),
        "designer.strategy": "splice",
        "designer.directives": ["clue", "credit"],
        "designer.max_tokens": args.max_tokens,
        "training.designer_lr": args.lr,
        "training.lora.enabled": True,
        "training.lora.rank": args.rank,
        "training.lora.alpha": 2 * args.rank,
        "inference.backend": "llamacpp",
        "inference.llamacpp.parallel": 4,
        "run.train": True,
        # how far each update moved the policy, and toward which answers (the learning-rate
        # question a flat held-out curve asks): one more forward pass per update
        "training.measure_shift": True,
        "training.designer_copy_mask": args.copy_mask,
        "training.designer_copy_ngram": args.copy_ngram,
    }
    if args.rejected is not None:  # else the config's (the demo's: graded)
        overrides["scoring.rejected_reward"] = args.rejected
    return load_config(args.config, overrides=overrides)


def attempts_for(cfg: Any, batch: list[Prompt], samples: int) -> list[Any]:
    """``samples`` splice attempts of each prompt (prompt-major), prepared as a round prepares
    one: the parent alone in the memory, the prompt's directive the only one allowed."""
    from spade.curriculum.memory import EnvironmentMemory, MemoryRecord, read_declarations
    from spade.designer.strategies import strategy_for
    from spade.designer.strategies.base import Slot
    from spade.records import DesignAttempt

    splice, out = strategy_for("splice"), []
    for i, p in enumerate(batch):
        skill = read_declarations(p.code).get("skill", "unknown")
        memory = EnvironmentMemory(cfg.memory)
        memory.add(MemoryRecord(p.parent, skill, p.code, round=-1))
        designer = cfg.designer.model_copy(update={"directives": [p.directive]})
        text = p.document.truncated(cfg.corpus.max_words_games).text
        slot = Slot(text, skill, False, random.Random(p.key), memory, designer)
        att = DesignAttempt(slot=i, attempt=0, skill=skill, doc_id=p.document.doc_id, messages=[])
        if not splice.prepare(att, slot):  # every parent of the splits has the method
            raise RuntimeError(f"{p.parent} cannot be spliced under {p.directive}")
        out += [att] + [
            dataclasses.replace(copy.deepcopy(att), sample=j) for j in range(1, samples)
        ]
    return out


def design(
    cfg: Any, weights: Any, attempts: list[Any], policy: Any, seed: int | None = None
) -> None:
    """Sample every attempt with ``weights`` served (each request under a seed of its own made
    from ``seed`` when given: :class:`SeededBackend`), then verify each in the jail."""
    from spade.designer.designer import apply_verdict, awaiting_verdict, generate, verify_design
    from spade.inference.pool import shared_backend

    async def sample() -> None:
        async with shared_backend(cfg, weights) as backend:
            await generate(backend if seed is None else SeededBackend(backend, seed), attempts, cfg)

    asyncio.run(sample())
    pending = awaiting_verdict(attempts)
    with ThreadPoolExecutor(cfg.sandbox.workers) as pool:
        verdicts = pool.map(lambda a: verify_design(a.code, cfg, policy, a.references), pending)
        for att, verdict in zip(pending, verdicts, strict=True):
            apply_verdict(att, verdict)


def evaluate(
    cfg: Any, weights: Any, heldout: list[Prompt], policy: Any, seed: int
) -> dict[str, Any]:
    """One answer to each held-out prompt, sampled under the prompt's own seed (the same at
    every point): the point's rates and each design's outcome, in prompt order."""
    attempts = attempts_for(cfg, heldout, 1)
    design(cfg, weights, attempts, policy, seed=seed)
    # each answer's text and verdict reason too: what changed between two points (the weights,
    # or a flip of the sampler or the verifier under load) is read from them
    return {**rates(attempts), "outcomes": outcomes(heldout, attempts)}


def outcomes(batch: list[Prompt], attempts: list[Any]) -> list[dict[str, Any]]:
    """Each answer's prompt, verdict, text and the code taken from it (``attempts`` prompt-major,
    as many per prompt as :func:`attempts_for` made)."""
    per = len(attempts) // max(len(batch), 1)
    return [
        {"parent": p.parent, "directive": p.directive, "kept": a.accepted,
         "failure": a.failure_kind, "failed": a.failed, "answer": a.last_answer,
         "reason": a.failure_reason, "code": a.code}
        for p, a in zip((p for p in batch for _ in range(per)), attempts, strict=True)
    ]  # fmt: skip


def train_step(
    cfg: Any, parent: str | None, attempts: list[Any], root: str, centre: str
) -> tuple[Any, dict]:
    """One GRPO update of the designer from ``parent`` on the verified attempts, rewards centred
    within each prompt's answers (``centre="prompt"``) or within each skill, as a round does."""
    from spade.training.run import designer_samples, update_from_parent

    measured = [a for a in attempts if not a.failed]  # an outage is no data (as in a round)
    rewards = [reward(a, cfg.scoring) for a in measured]
    samples = designer_samples(cfg, grouped(measured, centre), rewards)
    update = update_from_parent(cfg, "designer", parent, samples, root)
    kinds = Counter(a.failure_kind or "accepted" for a in measured)
    stats = {"reward": sum(rewards) / max(len(rewards), 1), **rates(attempts), "kinds": kinds,
             **copied_shares(measured, cfg.training.designer_copy_ngram),
             "trained_tokens": sum(s.trained_tokens for s in samples)}  # fmt: skip
    return update, stats


def train_run(cfg: Any, args: argparse.Namespace, corpus: Any, heldout: list[Prompt],
              eval_at: set[int],
              save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:  # fmt: skip
    from spade.records import BASE
    from spade.sandbox.policy import load_policy

    policy = load_policy(cfg.sandbox.policy_path)
    root = str(Path(cfg.storage.root) / "checkpoints")
    weights, parent, points = BASE, None, []
    steps: list[dict[str, Any]] = []
    # written after each update and point: a run cut short (hours of work) keeps what it measured
    so_far = {"points": points, "steps": steps}
    if heldout:  # else a training-side run (--heldout 0): the updates and how far they moved
        points.append({"update": 0, **evaluate(cfg, BASE, heldout, policy, args.seed)})
        console.print(f"update 0: held-out kept {points[0]['kept']}/{points[0]['n']}")
        save(so_far)
    for u in range(1, args.updates + 1):
        started = time.perf_counter()
        start = (u - 1) * args.prompts
        batch = prompts(corpus, "train", args.prompts, args.seed, start=start, by=args.split)
        attempts = attempts_for(cfg, batch, args.samples)
        design(cfg, weights, attempts, policy)
        update, stats = train_step(cfg, parent, attempts, root, args.centre)
        parent = update.checkpoint
        weights = publish_step(cfg, CAMPAIGN, u, "designer", parent)
        kept = {k: update.metrics.get(k) for k in STEP_METRICS}
        steps.append({"update": u, **stats, "seconds": time.perf_counter() - started, **kept,
                      "outcomes": outcomes(batch, attempts)})  # fmt: skip
        console.print(
            f"update {u}: reward {stats['reward']:+.2f} kept {stats['kept']}/{stats['n']}"
            f" well formed {stats['well_formed']} flat {kept['zero_variance_groups'] or 0:.2f}"
            f" mismatch {kept['mismatch_kl'] or 0:.4f} moved KL {kept['shift_kl'] or 0:.4f}"
            f" (advantage > 0 {kept['shift_up'] or 0:+.3f}, < 0 {kept['shift_down'] or 0:+.3f}"
            " nats/token)"
            f" copied: kept {_share(stats['copied_kept'])} rest {_share(stats['copied_rest'])}"
            f" ({steps[-1]['seconds']:.0f} s)"
        )
        if u in eval_at and heldout:
            points.append({"update": u, **evaluate(cfg, weights, heldout, policy, args.seed)})
            console.print(f"update {u}: held-out kept {points[-1]['kept']}/{points[-1]['n']}")
        save(so_far)
    return so_far


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def paired_kept(base: dict[str, Any], point: dict[str, Any]) -> tuple[list[bool], list[bool]]:
    """Each prompt's outcome at ``base`` and at ``point``, in prompt order; a prompt whose
    request failed on our side at either point is left out (it measures nothing)."""
    pairs = [(b, a) for b, a in zip(base["outcomes"], point["outcomes"], strict=True)
             if not (b["failed"] or a["failed"])]  # fmt: skip
    return [b["kept"] for b, _ in pairs], [a["kept"] for _, a in pairs]


def paired_p(base: dict[str, Any], point: dict[str, Any]) -> float:
    """McNemar's exact test of ``point`` against ``base``, prompt by prompt."""
    return mcnemar_exact(*paired_kept(base, point))


def summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The last point against the base: McNemar's exact test on the same prompts answered under
    the same seeds (the ``p_value``), Fisher's exact test on the two shares as if unpaired, and
    the rise split into well-formed answers and designs kept among them; and the kept share the
    paired prompts would show as a rise 4 times in 5 (:func:`detectable_share`): what a null
    result can rule out."""
    base, last = points[0], points[-1]
    before, after = paired_kept(base, last)
    base_share = sum(before) / len(before) if before else 0.0
    return {
        "base_kept_share": base["kept_share"], "final_kept_share": last["kept_share"],
        "rise": last["kept_share"] - base["kept_share"],
        "well_formed_rise": last["well_formed_share"] - base["well_formed_share"],
        "kept_if_well_formed_rise": last["kept_if_well_formed"] - base["kept_if_well_formed"],
        "kept_base_only": sum(b and not a for b, a in zip(before, after, strict=True)),
        "kept_last_only": sum(a and not b for b, a in zip(before, after, strict=True)),
        "paired": len(before),
        "p_value": paired_p(base, last),
        "fisher_p": fisher_exact(base["kept"], base["n"], last["kept"], last["n"]),
        "detectable_share": detectable_share(len(before), base_share) if before else None,
    }  # fmt: skip


def print_table(points: list[dict[str, Any]], result: dict[str, Any]) -> None:
    table = Table(title="Designer learnability: held-out designs worth keeping")
    cols = ("update", "kept", "share", "well formed", "kept if well formed", "paired p vs base",
            "Fisher p vs base")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right")
    base = points[0]
    for p in points:
        fisher = fisher_exact(base["kept"], base["n"], p["kept"], p["n"])
        table.add_row(str(p["update"]), f"{p['kept']}/{p['n']}", f"{p['kept_share']:.3f}",
                      f"{p['well_formed_share']:.3f}", f"{p['kept_if_well_formed']:.3f}",
                      f"{paired_p(base, p):.3g}", f"{fisher:.3g}")  # fmt: skip
    console.print(table)
    console.print(
        f"rise {result['rise']:+.3f} (well formed {result['well_formed_rise']:+.3f}, kept among"
        f" well formed {result['kept_if_well_formed_rise']:+.3f}); kept at the base only"
        f" {result['kept_base_only']}, at the last point only {result['kept_last_only']}:"
        f" McNemar p = {result['p_value']:.3g} (Fisher, unpaired: {result['fisher_p']:.3g})"
    )
    if (share := result["detectable_share"]) is not None:
        console.print(
            f"these {result['paired']} prompts show a rise from the base's share to {share:.2f}"
            " at p < 0.05 4 times in 5 (answers drawn independently); a smaller rise mostly"
            " goes unseen: more prompts (--heldout) see smaller ones"
        )


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, steps = data["points"], data["steps"]
    fig, ax = plt.subplots(1, 3, figsize=(14, 4))
    if points:
        xs = [p["update"] for p in points]
        ax[0].plot(xs, [p["kept_share"] for p in points], "o-", label="kept")
        ax[0].plot(xs, [p["well_formed_share"] for p in points], "s--", label="well formed")
        title = f"held-out ({points[0]['n']} prompts)"
        ax[0].set(title=title, xlabel="update", ylim=(-0.05, 1.05))
        ax[0].legend()
    else:  # a training-side run (--heldout 0)
        ax[0].set_axis_off()
    us = [s["update"] for s in steps]
    ax[1].plot(us, [s["reward"] for s in steps], ".-", label="mean reward")
    ax[1].plot(us, [s["kept_share"] for s in steps], "x-", label="kept")
    ax[1].set(title="training answers", xlabel="update")
    ax[1].legend()
    ax[2].plot(us, [s["mismatch_kl"] or 0.0 for s in steps], label="sampler/trainer")
    ax[2].plot(us, [s.get("shift_kl") or 0.0 for s in steps], label="update moved")
    ax[2].set(title="k3 KL (nats/token)", xlabel="update")
    ax[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "demo-cpu.yaml")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--updates", type=int, default=6)
    # 4 prompts x 4 answers, each prompt's answers centred on their own mean (GRPO's groups).
    # The first run (4 x 4 centred per skill, a round's estimator) showed no rise on the training
    # answers either; the second (2 x 8 per prompt) neither, and its training-side reading (the
    # lr 2e-4 run: each update moves the policy 2-16x the sampler/trainer mismatch, the right
    # way, but the kept count swings 0 to 8 of 16 with the update's two prompts) says an update
    # follows whichever two prompts it drew: four per update, the same 16 answers. Chosen from
    # the training answers, before any run at these settings
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--centre", choices=("prompt", "skill"), default="prompt")
    # documents: a diagnostic (every parent on both sides, only the documents held out), to tell
    # "learns nothing" from "learns the trained parents only"; the bench's result splits parents
    ap.add_argument("--split", choices=SPLITS, default="parents")
    # 0: no held-out point (no p-value): the training answers and how far each update moved
    ap.add_argument("--heldout", type=int, default=48)
    ap.add_argument("--eval-every", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=800)
    # bench/learnability.py's learning rate (LoRA's usual 1e-4 to 5e-4, chosen before any run
    # there, not swept): the demo's 2e-5 moves the weights little in a dozen updates
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument(
        "--copy-mask",
        choices=COPY_MASKS,
        default="off",
        help="training.designer_copy_mask: leave copied tokens out of the loss",
    )
    ap.add_argument("--copy-ngram", type=int, default=8, help="training.designer_copy_ngram")
    ap.add_argument(
        "--rejected",
        choices=("flat", "graded"),
        help="scoring.rejected_reward (default: the config's)",
    )
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smoke run on SmolLM2-135M")
    ap.add_argument("--out", type=Path, default=results_path(ROOT))
    args = ap.parse_args()
    if args.quick:
        args.model, args.updates, args.prompts, args.samples = "smollm2-135m-instruct", 1, 2, 2
        args.heldout, args.eval_every, args.max_tokens = min(args.heldout, 2), 1, 64
    return args


def main() -> None:
    args = arguments()
    from spade.designer.corpus import Corpus
    from spade.inference.pool import close_shared_backends

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spade-designer-learnability-") as tmp:
        try:  # the pool's llama.cpp server is stopped whatever happens
            cfg = build_config(args, Path(tmp))
            corpus = Corpus.load(cfg.corpus)
            for split in ("train", "heldout"):  # every (parent, directive) pair prepares, or
                attempts_for(cfg, prompts(corpus, split, 8, args.seed, by=args.split), 1)  # stop
            heldout = prompts(corpus, "heldout", args.heldout, args.seed, by=args.split)
            settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
            data: dict[str, Any] = {"machine": machine() | {"timestamp": timestamp()},
                                    "settings": settings}  # fmt: skip
            eval_at = set(range(args.eval_every, args.updates + 1, args.eval_every))
            data |= train_run(
                cfg,
                args,
                corpus,
                heldout,
                eval_at | {args.updates},
                lambda part: write_json(args.out, data | part | {"partial": True}),
            )
            if data["points"]:
                data["result"] = summary(data["points"])
                data["p_value"] = data["result"]["p_value"]
                print_table(data["points"], data["result"])
        finally:
            asyncio.run(close_shared_backends())
    data["minutes"] = (time.perf_counter() - started) / 60
    write_json(args.out, data)
    plot(data, args.out.with_suffix(".png"))
    console.print(f"{data['minutes']:.1f} min; written: {args.out}")


if __name__ == "__main__":
    main()
