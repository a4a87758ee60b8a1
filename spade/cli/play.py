"""The interactive loop of ``spade env play``: a person is the agent.

Everything the design wrote (names, observations, tool schemas, failure reasons) is shown as
plain text, never read as rich markup: ``[/]`` in an observation would raise MarkupError.
"""

from __future__ import annotations

import json

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy
from spade.sandbox.session import JailedSession


def play_session(
    code: str,
    policy: SandboxPolicy,
    *,
    seed: int | None,
    use_hint: bool,
    hint_text: str | None,
    max_turns: int,
    console: Console | None = None,
) -> int:
    """Run one episode against stdin; return 0 when it ended (or the player quit)."""
    console = console or Console()
    with JailedSession(code, policy=policy, env_kwargs={"max_turns": max_turns}) as session:
        info = session.info
        assert info is not None
        hint = hint_text or (info.hint if use_hint else None)
        if use_hint and not hint:
            console.print("[yellow]this environment has no built-in hint; playing without one[/]")
        who = f"[bold]{escape(info.class_name)}[/] ({escape(info.skill or 'unknown skill')})"
        console.print(f"{who}, seed {seed}")
        if info.tool_use:
            for tool in session.tools():
                fn = tool.get("function", {})
                name, about = escape(str(fn.get("name"))), escape(str(fn.get("description", "")))
                console.print(f"  tool [cyan]{name}[/]: {about}")
                console.print(
                    f"    parameters: {json.dumps(fn.get('parameters', {}).get('properties', {}))}",
                    markup=False,
                )
        obs, _ = session.reset(seed, hint=hint)
        console.print(Panel(Text(obs), title="observation", title_align="left"))
        total_turns = 0
        while True:
            try:
                action = console.input("[bold]action>[/] ")
            except EOFError:  # Ctrl-D: the player leaves
                console.print("\nbye")
                return 0
            if action.strip() == ":quit":
                return 0
            try:
                obs, reward, terminated, truncated, _ = session.step(action)
            except EnvFailure as exc:  # the design broke: show it and stop
                console.print(
                    f"[red]environment failed:[/] {exc.failure.kind}: {escape(exc.failure.reason)}"
                )
                return 1
            total_turns += 1
            console.print(
                Panel(
                    Text(obs), title=f"turn {total_turns} · reward {reward:g}", title_align="left"
                )
            )
            if terminated or truncated:
                ended = "terminated" if terminated else "truncated"
                console.print(
                    f"[bold]episode {ended}[/] after {total_turns} turns, final reward {reward:g}"
                )
                return 0
