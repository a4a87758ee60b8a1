"""``spade config reference``: every key of the campaign config, as Markdown
(``docs/config.md`` is its output)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

config_app = typer.Typer(help="The campaign configuration's reference.", no_args_is_help=True)


@config_app.command("reference")
def reference(
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write the Markdown to this file (default: stdout)."),
    ] = None,
) -> None:
    """Print every config key as Markdown (docs/config.md is the output).

    One section per config section (its dotted path), each key with its type, default, bounds
    or choices and description. `spade config reference --out docs/config.md` regenerates the
    repository's copy."""
    from spade.config.reference import reference_markdown

    text = reference_markdown()
    if out is None:
        typer.echo(text, nl=False)
        return
    out.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {out}")
