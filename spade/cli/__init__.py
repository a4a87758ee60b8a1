"""The ``spade`` command line (typer). Subcommands live in sibling modules."""

from __future__ import annotations

import typer

from spade.cli.benchmark import benchmark
from spade.cli.campaign import status, stop
from spade.cli.config import config_app
from spade.cli.dashboard import dashboard
from spade.cli.doctor import doctor
from spade.cli.env import env_app
from spade.cli.infra import infra_app
from spade.cli.plan import plan
from spade.cli.pool import pool_app
from spade.cli.selfplay import design, evaluate
from spade.cli.train import train

app = typer.Typer(
    name="spade",
    help="SPADE: self-play in LLM-designed, sandboxed executable environments.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(env_app, name="env")
app.add_typer(pool_app, name="pool")
app.add_typer(infra_app, name="infra")
app.add_typer(config_app, name="config")
app.command("design")(design)
app.command("evaluate")(evaluate)
app.command("benchmark")(benchmark)
app.command("train")(train)
app.command("plan")(plan)
app.command("doctor")(doctor)
app.command("status")(status)
app.command("stop")(stop)
app.command("dashboard")(dashboard)


def main() -> None:
    app()
