"""What every command shares: the one way to say an error and exit, the campaign config and
object-store options as a user gives them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from spade.config import CampaignConfig, load_config
from spade.errors import ConfigError

USAGE_ERROR = 2
"""Exit status of bad input (a missing file, an invalid config, an unreachable store)."""

err = Console(stderr=True, soft_wrap=True)  # an error's paths and commands stay whole

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Campaign YAML (default: built-in defaults).")
]
StorageOptionsOpt = Annotated[
    str | None,
    typer.Option(
        "--storage-options",
        help="fsspec options of the store as JSON: '{\"endpoint_url\": ...}' (an S3 endpoint).",
    ),
]


def fail(message: object, *, console: Console | None = None, code: int = USAGE_ERROR) -> typer.Exit:
    """Print ``error: <message>`` (on stderr unless ``console`` is given) and return the exit
    to raise: ``raise fail(exc) from None``."""
    (console or err).print(f"[red]error:[/] {message}")
    return typer.Exit(code)


def config_or_exit(path: Path | None) -> CampaignConfig:
    """The campaign config at ``path`` (the defaults without one); an invalid one is the
    user's to fix: one error, exit 2."""
    try:
        return load_config(path)
    except ConfigError as exc:
        raise fail(exc) from None


def storage_options(text: str | None) -> dict[str, Any]:
    """``--storage-options``' JSON object (empty without the flag); malformed is exit 2."""
    if not text:
        return {}
    try:  # a malformed flag is the user's to fix, said plainly
        options = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"--storage-options is not JSON: {exc}") from None
    if not isinstance(options, dict):
        raise fail("--storage-options must be a JSON object")
    return options
