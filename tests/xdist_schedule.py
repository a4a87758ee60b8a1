"""How ``make test`` spreads the suite over pytest-xdist workers (``-n auto``).

A work unit is a whole test module, so its module-scoped fixtures (a Prefect test server, a tiny
policy, the demo campaign) start once, on one worker. Modules that share a session-scoped
fixture too costly to start twice form one unit (:data:`SHARED`). Units are handed out
longest first (:data:`LONGEST`, measured), so the run does not end on one worker finishing a
long module while the others idle. Both tables only steer the schedule: a module missing from
them runs all the same, as a unit of its own, after the listed ones.

pytest-xdist's own ``--dist loadgroup`` does not apply here: with pytest 9 it cannot tag a
test's id with its group (xdist 3.8 writes ``Item._nodeid``, which pytest 9 no longer reads).
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

SHARED = {
    # the session's live Prefect server and worker (tests/integration/prefect_live.py)
    "tests/integration/test_prefect_live.py": "prefect-live",
    "tests/integration/test_deployments.py": "prefect-live",
}

LONGEST = [
    # measured: the slowest modules of a one-process ``make test`` (fresh clone, 2 cores:
    # ``--durations``), slowest first; the demo campaign's fixture alone took 94 s
    "tests/dashboard/test_demo_campaign.py",
    "tests/integration/test_deployments.py",
    "tests/flows/test_store_failures.py",
    "tests/flows/test_train_ranks.py",
    "tests/training/test_zero3_checkpoint.py",  # two launches of 2 DeepSpeed ranks
    "tests/flows/test_resume.py",
    "tests/cli/test_run_cli.py",
    "tests/flows/test_round_flow.py",
    "tests/flows/test_dask.py",
    "tests/flows/test_overlap.py",
    "tests/agent/test_smollm2_episode.py",
    "tests/cli/test_selfplay_cli.py",
]


def module_of(nodeid: str) -> str:
    """The test file of a node id (``tests/x/test_y.py::test_z[param]``)."""
    return nodeid.split("::", 1)[0]


def rank(nodeid: str) -> int:
    """Where a test's module comes in the schedule: listed ones by their place, others after."""
    module = module_of(nodeid)
    return LONGEST.index(module) if module in LONGEST else len(LONGEST)


class ModuleScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with a module (or a :data:`SHARED` group) as the unit,
    in collection order (``pytest_collection_modifyitems`` puts :data:`LONGEST` first)."""

    def __init__(self, config, log=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep the collection's order (longest first)

    def _split_scope(self, nodeid: str) -> str:
        module = module_of(nodeid)
        return SHARED.get(module, module)
