"""Verification cost: seconds per design of this tree's verifier against a baseline commit's.

The designer's bench and the demo verify every design the designer writes, so a check added to
the verifier is paid on each of them. This bench verifies the same designs with the verifier of
this working tree and with the one of a baseline commit (``--baseline``, default ``HEAD~1``),
each in its own process (``spade`` imported from that tree, its sandbox policy loaded there), in
alternating rounds so both meet the same load on the machine, and prints seconds per design and
the ratio. The designs:

- ``examples``: each bundled example with the other bundled examples as references (a new game:
  no variant parent);
- ``variants``: the hand-written variants of ``tests/verify/lookalikes.py`` (small real changes
  of an example) with their example as reference: the designer's usual splice or edit;
- ``redteam``: the red team of ``tests/verify/redteam.py`` with its parent, when it exists.

Every design is verified ``--rounds`` times per tree; the table gives the median seconds per
design of each group and the ratio this tree / baseline, and whether each verdict (accepted or
the check that failed) moved. Results go to ``bench/results/verify_cost.json``. Benchmarks
report; they do not assert.

Usage: ``.venv/bin/python bench/verify_cost.py [--baseline REV] [--rounds N] [--groups ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("examples", "variants", "redteam")


def designs(groups: tuple[str, ...]) -> list[dict[str, Any]]:
    """The designs to verify: name, group, code, references ((name, code) pairs)."""
    sys.path.insert(0, str(ROOT))
    from tests.verify.lookalikes import EXAMPLES, VARIANTS

    out: list[dict[str, Any]] = []
    if "examples" in groups:
        for name, code in EXAMPLES.items():
            refs = [(k, v) for k, v in EXAMPLES.items() if k != name]
            out.append({"name": name, "group": "examples", "code": code, "refs": refs})
    if "variants" in groups:
        for name, (origin, code) in VARIANTS.items():
            refs = [(origin, EXAMPLES[origin])]
            out.append({"name": name, "group": "variants", "code": code, "refs": refs})
    if "redteam" in groups and (ROOT / "tests" / "verify" / "redteam.py").exists():
        from tests.verify import redteam

        for d in redteam.DESIGNS:
            refs = [(d.parent, EXAMPLES[d.parent])]
            out.append({"name": d.name, "group": "redteam", "code": d.code, "refs": refs})
    return out


def worker(tree: str) -> None:
    """In a child process: verify the designs read from stdin with ``tree``'s ``spade``."""
    sys.path.insert(0, tree)
    import spade
    from spade.sandbox.policy import load_policy
    from spade.verify import verify
    from spade.verify.novelty import Reference

    assert Path(spade.__file__).resolve().is_relative_to(Path(tree).resolve()), spade.__file__
    policy = load_policy()
    results = []
    for d in json.load(sys.stdin):
        refs = [Reference(n, c) for n, c in d["refs"]]
        t0 = time.perf_counter()
        verdict = verify(d["code"], policy=policy, references=refs)
        seconds = time.perf_counter() - t0
        outcome = "accepted" if verdict.accepted else (verdict.failed_check or "rejected")
        results.append({"name": d["name"], "seconds": seconds, "outcome": outcome})
    json.dump(results, sys.stdout)


def baseline_tree(rev: str, into: Path) -> Path:
    """``spade`` and ``infra`` (its sandbox policy) of commit ``rev`` unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "spade", "infra"],
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(mode=0o755)
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_tree(tree: Path, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # never write .pyc into either tree
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", str(tree)],
        input=json.dumps(batch),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode:
        raise SystemExit(f"worker for {tree} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def measure(batch: list[dict[str, Any]], trees: dict[str, Path], rounds: int) -> dict[str, Any]:
    """Seconds and outcomes per design and tree, rounds alternating which tree goes first."""
    seconds: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    outcomes: dict[str, dict[str, str]] = {t: {} for t in trees}
    order = list(trees)
    for r in range(rounds):
        for label in order if r % 2 == 0 else order[::-1]:
            for row in run_tree(trees[label], batch):
                seconds[label].setdefault(row["name"], []).append(row["seconds"])
                outcomes[label][row["name"]] = row["outcome"]
    return {"seconds": seconds, "outcomes": outcomes}


def table(batch: list[dict[str, Any]], result: dict[str, Any], console: Console) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    t = Table(title="verify() seconds per design (median over rounds)")
    for col in ("group", "designs", "baseline s", "this tree s", "ratio", "verdicts moved"):
        t.add_column(col, justify="right" if col != "group" else "left")
    groups = dict.fromkeys(d["group"] for d in batch)
    for group in [*groups, "all"]:
        names = [d["name"] for d in batch if group in ("all", d["group"])]
        base = sum(statistics.median(result["seconds"]["baseline"][n]) for n in names) / len(names)
        head = sum(statistics.median(result["seconds"]["head"][n]) for n in names) / len(names)
        moved = [
            f"{n}: {result['outcomes']['baseline'][n]} -> {result['outcomes']['head'][n]}"
            for n in names
            if result["outcomes"]["baseline"][n] != result["outcomes"]["head"][n]
        ]
        summary[group] = {
            "designs": len(names),
            "baseline_s": base,
            "head_s": head,
            "ratio": head / base,
            "moved": moved,
        }
        t.add_row(
            group,
            str(len(names)),
            f"{base:.2f}",
            f"{head:.2f}",
            f"{head / base:.2f}",
            str(len(moved)),
        )
    console.print(t)
    for group, s in summary.items():
        if group != "all":
            for line in s["moved"]:
                console.print(f"  {group}: {line}")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", default="HEAD~1", help="commit of the baseline verifier")
    parser.add_argument(
        "--head", default=None, help="commit to measure instead of the working tree (its spade)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="verifications per design and tree")
    parser.add_argument("--groups", nargs="+", choices=GROUPS, default=list(GROUPS))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "verify_cost.json")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    console = Console()
    batch = designs(tuple(args.groups))
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    head = args.head or f"the working tree {ROOT}"
    console.print(f"{len(batch)} designs x {args.rounds} rounds; baseline {rev}, head {head}")
    with tempfile.TemporaryDirectory(prefix="spade-verify-base-") as tmp:
        Path(tmp).chmod(0o755)  # the jail's user reads the package it mounts from there
        trees = {"baseline": baseline_tree(rev, Path(tmp) / "baseline"), "head": ROOT}
        if args.head:
            trees["head"] = baseline_tree(args.head, Path(tmp) / "head")
        result = measure(batch, trees, args.rounds)
    summary = table(batch, result, console)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "baseline": rev,
                "rounds": args.rounds,
                "summary": summary,
                "cpus": os.cpu_count(),
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **result,
            },
            indent=1,
        )
    )
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
