"""A migrated Prefect database for the suite's Prefect servers, made once per test session.

A Prefect server on a new SQLite file creates its tables by running every migration: ~9 s of
CPU on these cores, for each temporary API (``prefect_test_harness``) and each embedded server
of a fresh ``PREFECT_HOME`` a test starts (``spade run`` in a subprocess). A copy of a database
already at the head migration starts in ~0.05 s: the server checks the version and goes on.
The copy is a file the first server of the session made, by Prefect's own code, in a process
of its own (the test process's database interface is left as it was).

:func:`seed_home` gives a fresh ``PREFECT_HOME`` the copy (where its server looks for its
database), :func:`home_env` a subprocess's environment on it; `seeded_harness` is Prefect's ``prefect_test_harness`` on a copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

_ENV = "SPADE_TEST_PREFECT_DB"  # where the session's migrated copy is (set for the workers)
_MIGRATE = (
    "import asyncio\n"
    "from prefect.server.database import provide_database_interface\n"
    "asyncio.run(provide_database_interface().create_db())\n"
)


def _folder() -> Path:
    """A folder every process of this test session shares: pytest-xdist's workers inherit the
    controller's environment, where the session's first call names one."""
    named = os.environ.get(_ENV)
    if named:
        return Path(named)
    folder = Path(tempfile.mkdtemp(prefix="spade-prefect-db-"))
    os.environ[_ENV] = str(folder)
    return folder


def configure_session() -> None:
    """Name the session's folder in the controller (``pytest_configure``), before the workers
    start, so they share one migrated copy instead of one each."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        _folder()


def unconfigure_session() -> None:
    """Remove the session's folder (the controller, ``pytest_unconfigure``: after the workers)."""
    named = os.environ.get(_ENV)
    if named and "PYTEST_XDIST_WORKER" not in os.environ:
        shutil.rmtree(named, ignore_errors=True)


def migrated_db() -> Path:
    """The session's database at the head migration (made by the first caller, under a lock
    that the other workers wait on)."""
    folder = _folder()
    db = folder / "prefect.db"
    with FileLock(str(folder / "lock")):
        if not db.exists():
            partial = folder / "partial.db"
            partial.unlink(missing_ok=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
            env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{partial}"
            env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
            env["PREFECT_HOME"] = str(folder / "home")
            subprocess.run([sys.executable, "-c", _MIGRATE], env=env, check=True, timeout=300)
            partial.rename(db)  # whole or not at all: a killed migration leaves no copy
    return db


def seed_home(home: Path) -> Path:
    """A fresh ``PREFECT_HOME`` whose embedded server finds its database migrated (Prefect's
    default location, ``$PREFECT_HOME/prefect.db``); a home that has one keeps it."""
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "prefect.db").exists():
        shutil.copyfile(migrated_db(), home / "prefect.db")
    return home


def home_env(home: Path) -> dict[str, str]:
    """The environment of a process whose embedded Prefect server uses ``home`` (seeded:
    :func:`seed_home`): this one's without any PREFECT_* setting, analytics off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return env | {"PREFECT_HOME": str(seed_home(home)), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


@contextmanager
def seeded_harness(startup_timeout: int = 60) -> Iterator[None]:
    """``prefect_test_harness`` whose temporary database starts as a migrated copy: the
    harness names its database ``prefect-test.db`` in a folder of ``mkdtemp``'s, so the folder
    it gets already holds one."""
    import prefect.testing.utilities as harness_module

    def seeded_mkdtemp() -> str:
        folder = tempfile.mkdtemp()
        shutil.copyfile(migrated_db(), Path(folder) / "prefect-test.db")
        return folder

    real = harness_module.mkdtemp
    harness_module.mkdtemp = seeded_mkdtemp  # type: ignore[assignment]
    try:
        with harness_module.prefect_test_harness(server_startup_timeout=startup_timeout):
            harness_module.mkdtemp = real  # only the harness's own folder is seeded
            yield
    finally:
        harness_module.mkdtemp = real
