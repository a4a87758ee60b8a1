"""``spade env check`` and ``spade env play``: verify designs, or play one by hand."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from spade.cli.common import fail
from spade.cli.report import print_traceback, summary_table, verdict_json, verdict_table
from spade.config import VerifyConfig
from spade.errors import ConfigError, SandboxError
from spade.records import Verdict
from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy, load_policy
from spade.verify import Reference, verify_file

env_app = typer.Typer(help="Check and play environment files.", no_args_is_help=True)
PolicyOpt = Annotated[
    Path | None, typer.Option("--policy", help="Sandbox policy YAML (default: infra/sandbox.yaml).")
]


def _policy(path: Path | None) -> SandboxPolicy:
    try:
        return load_policy(path)
    except ConfigError as exc:
        raise fail(str(exc)) from None


def expand_paths(paths: list[Path]) -> list[Path]:
    """Files as given, and the ``*.py`` files (not ``__init__.py``) of folders."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.glob("*.py") if f.name != "__init__.py")
        elif p.is_file():
            out.append(p)
        else:
            raise fail(f"no such file or folder: {p}")
    if not out:
        raise fail("no environment files found")
    return out


def load_references(paths: list[Path]) -> list[tuple[Path, Reference]]:
    """Reference environments, each with its resolved path (a file is never its own
    reference, so a folder can be checked against itself)."""
    return [
        (p.resolve(), Reference(str(p), p.read_text(encoding="utf-8", errors="replace")))
        for p in paths
    ]


@env_app.command("check")
def check(
    paths: Annotated[
        list[Path], typer.Argument(help="Environment files (one class each) or folders of them.")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per file per line.")
    ] = False,
    policy_path: PolicyOpt = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the instance the checks play.")] = 1234,
    max_turns: Annotated[
        int, typer.Option(min=1, max=1000, help="Turn bound for every episode.")
    ] = 25,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Files verified in parallel.")] = 2,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show every check and tracebacks.")
    ] = False,
    reference_paths: Annotated[
        list[Path] | None,
        typer.Option(
            "--reference",
            "-r",
            help=(
                "Reference environment file or folder (repeatable): a design that is a"
                " near-verbatim copy of one, or plays exactly like one, is a duplicate."
            ),
        ),
    ] = None,
) -> None:
    """Verify environment files in the sandbox. Exit 0 if all are accepted, 1 if any is rejected."""
    files = expand_paths(paths)
    references = load_references(expand_paths(reference_paths) if reference_paths else [])
    policy = _policy(policy_path)
    config = VerifyConfig(seed=seed, max_turns=max_turns)
    console = Console(stderr=as_json, width=None if sys.stdout.isatty() else 120)
    results: list[tuple[Path, Verdict]] = []
    with (
        ThreadPoolExecutor(max_workers=workers) as pool,
        Progress(console=console, transient=True, disable=as_json) as bar,
    ):
        task = bar.add_task("verifying", total=len(files))
        futures = [
            pool.submit(
                verify_file,
                f,
                config=config,
                policy=policy,
                references=[ref for path, ref in references if path != f.resolve()],
            )
            for f in files
        ]
        for path, future in zip(files, futures, strict=True):
            try:
                verdict = future.result()
            except SandboxError as exc:  # the sandbox cannot run at all: a set-up problem
                raise fail(f"sandbox unavailable: {exc}") from None
            results.append((path, verdict))
            bar.advance(task)
            if as_json:
                sys.stdout.write(verdict_json(path, verdict) + "\n")
                sys.stdout.flush()
            elif verbose or not verdict.accepted:
                console.print(verdict_table(path, verdict))
                if verbose:
                    print_traceback(console, verdict)
    if not as_json:
        console.print(summary_table(results))
    raise typer.Exit(0 if all(v.accepted for _, v in results) else 1)


@env_app.command("play")
def play(
    path: Annotated[
        Path, typer.Argument(help="Environment file to play.", exists=True, dir_okay=False)
    ],
    seed: Annotated[int | None, typer.Option(help="Instance seed (default: random).")] = None,
    hint: Annotated[
        bool,
        typer.Option("--hint", help="Show the environment's own hint with the first observation."),
    ] = False,
    hint_text: Annotated[str | None, typer.Option(help="Show this hint instead.")] = None,
    policy_path: PolicyOpt = None,
    max_turns: Annotated[int, typer.Option(min=1, max=1000)] = 25,
) -> None:
    """Play an environment in the terminal, through the sandbox. ':quit' or Ctrl-D ends."""
    from spade.cli.play import play_session

    code = path.read_text(encoding="utf-8", errors="replace")
    try:
        rc = play_session(
            code,
            _policy(policy_path),
            seed=seed,
            use_hint=hint,
            hint_text=hint_text,
            max_turns=max_turns,
        )
    except EnvFailure as exc:  # the design cannot even start: say why, as data
        Console(stderr=True).print(
            f"[red]environment failed:[/] {exc.failure.kind}: {escape(exc.failure.reason)}"
        )
        if exc.failure.traceback:
            Console(stderr=True).print(exc.failure.traceback, markup=False, highlight=False)
        raise typer.Exit(1) from None
    raise typer.Exit(rc)
