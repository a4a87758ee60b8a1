"""Small pools laid out as the reference lays its pools out, built from the bundled examples
(and a few broken or fixed-instance environments), for the pool tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from spade.envs.examples import example_paths
from tests.verify.test_verifier import QUIZ

EXAMPLES = {p.stem: p for p in example_paths()}
GOOD = ("number_hunt", "code_breaker", "switchboard")
BROKEN = "class BrokenEnv(\n"  # does not parse
FIXED = "from spade.envs import TextEnv\n" + QUIZ  # one fixed instance: seed-independent


def renamed(stem: str) -> str:
    """A bundled example with its class renamed and a comment added: a copy."""
    code = EXAMPLES[stem].read_text()
    cls = next(
        line.split()[1].split("(")[0] for line in code.splitlines() if line.startswith("class ")
    )
    return "# my own game\n" + code.replace(cls, "MyOwn" + cls)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def sources(good: tuple[str, ...] = GOOD) -> dict[str, str]:
    """``game_<name>`` -> source: the good examples, a broken one and a fixed instance."""
    out = {f"game_{n}": EXAMPLES[n].read_text() for n in good}
    return out | {"game_broken": BROKEN, "game_fixed": FIXED}


def games_pool(root: Path, envs: dict[str, str], *, tamper: str | None = None) -> Path:
    """``root/games/<name>.py``, ``checksums.sha256`` and ``manifest.jsonl`` (a skill and a
    made-up win rate per game); ``tamper``: that game's file differs from its checksum."""
    (root / "games").mkdir(parents=True)
    sums, rows = [], []
    for name, code in envs.items():
        (root / "games" / f"{name}.py").write_text(code + ("# edited\n" if name == tamper else ""))
        sums.append(f"{sha256(code)}  games/{name}.py\n")
        rows.append({"file": f"games/{name}.py", "sha256": sha256(code), "win_rate": 0.5})
    (root / "checksums.sha256").write_text("".join(sums))
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def rows(envs: dict[str, str]) -> list[dict[str, object]]:
    """The same environments as dataset rows (name, code, sha256)."""
    return [{"name": n, "code": c, "sha256": sha256(c), "skill": "x"} for n, c in envs.items()]
