"""How the suite spreads over pytest-xdist workers (``-n``), and the measured durations it
orders by.

A work unit is a whole test module, so its module-scoped fixtures start once, on one worker.
Some modules form one unit (:data:`LANES`): those that share a costly session fixture, and
those that start several processes of their own (DeepSpeed and torchrun ranks, each using a
core): one lane runs them one after another, so two never run side by side and oversubscribe
the cores. Units are handed out longest first by their measured seconds
(``tests/durations.json``), so the run does not end on one worker finishing a long unit while
the other idles; a test not measured yet counts its module's mean, or :data:`UNMEASURED_S`.

The durations are not kept by hand: ``.ci/run`` writes a JUnit report of each part, and
``python -m tests.xdist_schedule record REPORT...`` turns reports into ``tests/durations.json``
(run it after a fresh-clone ``.ci/run`` on the project's kind of machine and commit the file).

pytest-xdist's own ``--dist loadgroup`` does not apply here: with pytest 9 it cannot tag a
test's id with its group (xdist 3.8 writes ``Item._nodeid``, which pytest 9 no longer reads).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

DURATIONS = Path(__file__).with_name("durations.json")
UNMEASURED_S = 2.0  # an unmeasured test's guess: most run below it
NOTED_S = 1.0  # tests this long are recorded by name, shorter ones by their module's mean

LANES = {
    # the session's live Prefect server and worker (tests/integration/prefect_live.py)
    "tests/integration/test_prefect_live.py": "prefect-live",
    "tests/integration/test_deployments.py": "prefect-live",
    # modules that start two or more processes that each keep a core busy
    "tests/training/test_deepspeed.py": "multi-process",
    "tests/training/test_launch.py": "multi-process",
    "tests/training/test_zero3_checkpoint.py": "multi-process",
    "tests/flows/test_train_ranks.py": "multi-process",
    "tests/integration/test_shrunk_preset.py": "multi-process",
}


def module_of(nodeid: str) -> str:
    """The test file of a node id (``tests/x/test_y.py::test_z[param]``)."""
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its module, or the lane its module belongs to."""
    module = module_of(nodeid)
    return LANES.get(module, module)


@cache
def measured() -> tuple[dict[str, float], dict[str, float]]:
    """As last recorded: seconds of each test that took :data:`NOTED_S` or more (by node id),
    and each module's mean over its other tests (both empty without the file)."""
    if not DURATIONS.exists():
        return {}, {}
    data = json.loads(DURATIONS.read_text())
    return data["tests"], data["modules"]


def estimate(nodeid: str) -> float:
    """A test's expected seconds: as measured, else its module's mean, else a guess."""
    tests, modules = measured()
    return tests.get(nodeid, modules.get(module_of(nodeid), UNMEASURED_S))


def order(nodeids: Sequence[str]) -> dict[str, int]:
    """Each node id's place in the run: units longest first (a unit keeps its collection
    order), a unit's estimate the sum of its selected tests' (:func:`estimate`)."""
    seconds: dict[str, float] = defaultdict(float)
    for nodeid in nodeids:
        seconds[unit_of(nodeid)] += estimate(nodeid)
    units = sorted(seconds, key=lambda unit: -seconds[unit])  # stable: ties keep their order
    place = {unit: i for i, unit in enumerate(units)}
    return {nodeid: place[unit_of(nodeid)] for nodeid in nodeids}


class ModuleScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with a module (or a :data:`LANES` group) as the unit,
    in collection order (``pytest_collection_modifyitems`` sorts by :func:`order`)."""

    def __init__(self, config, log=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep the collection's order (longest first)

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)


def junit_seconds(reports: Iterable[Path]) -> dict[str, float]:
    """Node id -> seconds (setup, call and teardown: pytest's JUnit ``time``; module-scoped
    fixtures count in their first test) from JUnit reports."""
    seconds: dict[str, float] = {}
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            module = case.get("classname", "").replace(".", "/") + ".py"
            seconds[f"{module}::{case.get('name')}"] = float(case.get("time") or 0.0)
    return seconds


def record(reports: Sequence[Path], out: Path = DURATIONS) -> dict[str, float]:
    """Write what ``reports`` measured to ``out``: the tests of :data:`NOTED_S` or more, each
    module's mean over the rest; returns each module's total seconds (slowest first)."""
    seconds = junit_seconds(reports)
    totals: dict[str, float] = defaultdict(float)
    rest: dict[str, list[float]] = defaultdict(list)
    noted = {}
    for nodeid, s in seconds.items():
        totals[module_of(nodeid)] += s
        if s >= NOTED_S:
            noted[nodeid] = round(s, 1)
        else:
            rest[module_of(nodeid)].append(s)
    data = {
        "recorded": datetime.now(UTC).strftime("%Y-%m-%d"),
        "from": [p.name for p in reports],
        "tests": dict(sorted(noted.items(), key=lambda kv: -kv[1])),
        "modules": {m: round(sum(v) / len(v), 3) for m, v in sorted(rest.items())},
    }
    out.write_text(json.dumps(data, indent=1) + "\n")
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "record":
        sys.exit("usage: python -m tests.xdist_schedule record REPORT.xml [REPORT.xml ...]")
    done = record([Path(p) for p in sys.argv[2:]])
    total = sum(done.values())
    print(f"{DURATIONS}: {len(done)} modules, {total / 60:.1f} min in all; slowest:")
    for module, s in list(done.items())[:10]:
        print(f"  {s:7.1f} s  {module}")
