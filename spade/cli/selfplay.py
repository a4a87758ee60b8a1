"""``spade design`` and ``spade evaluate``: one batch of designs, or hinted/unhinted plays.

They compose the library functions a round's stages use (the designer's batch: design, verify,
repair, hint; the stage functions that describe and hint environment files, shared with the
held-out stage: :mod:`spade.pipeline.hint`), and write plain files instead of stage records:
JSON lines, code, hints.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from spade.cli.common import ConfigOpt, config_or_exit, fail
from spade.config import CampaignConfig
from spade.errors import SpadeError
from spade.stats import mean

if TYPE_CHECKING:  # the CLI imports the designer only when a command runs
    from spade.records import DesignAttempt, EnvEvaluation

console = Console()


def _num(value: float | None, digits: int) -> str:
    """A table cell: "–" where there is nothing to show (no plays), not a made-up 0."""
    return "–" if value is None else f"{value:.{digits}f}"


def _paired(value: float | None, interval: list[float] | None) -> str:
    """The paired regret and its interval, ``0.250 [0.00, 0.50]``; "–" without one."""
    if value is None or not interval:
        return "–"
    return f"{value:.3f} [{interval[0]:.2f}, {interval[1]:.2f}]"


Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )


async def run_design(
    cfg: CampaignConfig, out: Path, *, regeneration: int = 0, progress: Progress = _quiet
) -> list[DesignAttempt]:
    """Design one batch; write ``attempts.jsonl``, ``envs/<id>.py`` (+ ``.hint.txt``), config."""
    from spade.designer.corpus import Corpus
    from spade.designer.designer import design_batch
    from spade.inference.factory import open_backend
    from spade.pipeline.state import seed_memory
    from spade.sandbox.policy import load_policy

    policy = load_policy(cfg.sandbox.policy_path)
    corpus = Corpus.load(cfg.corpus)
    memory = seed_memory(cfg)
    progress(f"corpus: {len(corpus)} documents; memory: {len(memory)} designs")
    async with open_backend(cfg) as backend:
        progress(f"model: {backend.model_name}")
        attempts = await design_batch(
            backend, corpus, memory, cfg, policy, regeneration=regeneration
        )
    envs = out / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(cfg.resolved_yaml(), encoding="utf-8")
    _write_jsonl(out / "attempts.jsonl", [a.to_dict() for a in attempts])
    for a in attempts:
        if a.accepted and a.code and a.env_id:
            (envs / f"{a.env_id}.py").write_text(a.code, encoding="utf-8")
            if a.hint:
                (envs / f"{a.env_id}.hint.txt").write_text(a.hint + "\n", encoding="utf-8")
    return attempts


async def run_evaluate(
    cfg: CampaignConfig, paths: Sequence[Path], out: Path | None, *, progress: Progress = _quiet
) -> list[EnvEvaluation]:
    """Hinted and unhinted plays of environment files; optionally written to ``out``."""
    from spade.agent.evaluate import evaluate_envs
    from spade.inference.factory import open_backend
    from spade.pipeline.hint import env_specs
    from spade.sandbox.policy import load_policy

    policy = load_policy(cfg.sandbox.policy_path)
    async with open_backend(cfg) as backend:
        specs, notes = await env_specs(paths, cfg, policy, backend)
        for path, note in zip(paths, notes, strict=True):
            if note:
                progress(f"{path.name}: no hint ({note}), so no hinted plays")
        n = len(specs) * (cfg.evaluation.unhinted_plays + cfg.evaluation.hinted_plays)
        progress(f"model: {backend.model_name}; playing up to {n} episodes")
        results = await evaluate_envs(backend, specs, cfg, policy, round=None)  # fixed instances
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(cfg.resolved_yaml(), encoding="utf-8")
        _write_jsonl(
            out / "evaluations.jsonl",
            [
                r.summary() | {"path": str(p), "hint": s.hint, "hint_note": note}
                for r, p, s, note in zip(results, paths, specs, notes, strict=True)
            ],
        )
        _write_jsonl(
            out / "trajectories.jsonl", [t.to_dict() for r in results for t in r.trajectories]
        )
    return results


def design(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for designs, verdicts and hints.")
    ],
    config: ConfigOpt = None,
    regeneration: Annotated[
        int, typer.Option(min=0, help="Regeneration index (selects the active skills).")
    ] = 0,
) -> None:
    """Design one batch of environments, verify them in the sandbox and write hints."""
    cfg = config_or_exit(config)
    try:
        attempts = asyncio.run(
            run_design(cfg, out, regeneration=regeneration, progress=console.print)
        )
    except SpadeError as exc:
        raise fail(exc) from None
    table = Table(title=f"Designs (regeneration {regeneration})", title_justify="left")
    for col in ("slot", "try", "skill", "strategy", "result", "env / reason"):
        table.add_column(col, overflow="fold")
    for a in attempts:
        table.add_row(
            str(a.slot), str(a.attempt), a.skill, _strategy(a), _result(a),
            Text(((a.env_id if a.accepted else a.failure_reason) or "")[:120]),  # not markup
        )  # fmt: skip
    console.print(table)
    console.print(design_summary(attempts) + f"; written to {out}")


def _strategy(a: DesignAttempt) -> str:
    if a.strategy == "splice":
        return f"splice {a.parent_id} ({a.directive})"
    return f"edit {a.parent_id}" if a.strategy == "edit" else a.strategy


def _result(a: DesignAttempt) -> str:
    """accepted / the failure kind, and the first answer's failure when a repair turn ran."""
    result = "[green]accepted[/]" if a.accepted else f"[red]{a.failure_kind}[/]"
    if a.repairs:
        result += f" after {a.repairs} repair{'s' if a.repairs > 1 else ''}"
        result += f" (first: {a.first_failure_kind})"
    return result


def design_summary(attempts: list[DesignAttempt]) -> str:
    """ "A of N attempts accepted (R after a repair turn); strategy: ..." for a batch."""
    accepted = sum(a.accepted for a in attempts)
    repaired = sum(a.accepted_after_repair for a in attempts)
    strategies = Counter(a.strategy for a in attempts)
    used = ", ".join(f"{n} {s}" for s, n in sorted(strategies.items()))
    return (
        f"{accepted} of {len(attempts)} attempts accepted ({repaired} after a repair turn);"
        f" strategy: {used or 'none'}"
    )


def evaluate(
    envs: Annotated[
        list[Path],
        typer.Argument(help="Environment files (a .hint.txt beside one supplies its hint)."),
    ],
    config: ConfigOpt = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Folder for trajectories and the regret table."),
    ] = None,
) -> None:
    """Play environments with and without their hint and print the regret table."""
    missing = [p for p in envs if not p.is_file()]
    if missing:
        raise fail(f"no such file: {missing[0]}")
    cfg = config_or_exit(config)
    try:
        results = asyncio.run(run_evaluate(cfg, envs, out, progress=console.print))
    except SpadeError as exc:
        raise fail(exc) from None
    table = Table(title="Regret", title_justify="left")
    for col in (
        "environment",
        "skill",
        "unhinted win",
        "hinted win",
        "mean unhinted",
        "mean hinted",
        "regret",
        "paired [95%]",
        "failed plays",
    ):
        table.add_column(col)
    for path, ev in zip(envs, results, strict=True):
        table.add_row(
            Text(path.name), Text(ev.skill), f"{ev.win_rate:.2f}", _num(ev.hinted_win_rate, 2),
            _num(mean(ev.unhinted_returns), 3), _num(mean(ev.hinted_returns), 3),
            f"{ev.regret:.3f}", _paired(ev.paired_regret, ev.paired_regret_interval),
            str(ev.failed_plays),
        )  # fmt: skip
    console.print(table)
    if out:
        console.print(f"trajectories and summary in {out}")
