"""spade.testing is for the tests and the benchmarks: nothing else in spade imports it, and it
imports neither Prefect nor anything under tests/ (bench/ uses it without the test suite)."""

from __future__ import annotations

import ast
from pathlib import Path

SPADE = Path(__file__).resolve().parents[2] / "spade"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_only_tests_and_benchmarks_import_spade_testing():
    users = [
        str(p.relative_to(SPADE))
        for p in SPADE.rglob("*.py")
        if "testing" not in p.relative_to(SPADE).parts[:1]
        and any(n == "spade.testing" or n.startswith("spade.testing.") for n in _imports(p))
    ]
    assert users == []


def test_spade_testing_needs_neither_prefect_nor_the_test_suite():
    for path in (SPADE / "testing").rglob("*.py"):
        roots = {name.split(".")[0] for name in _imports(path)}
        assert not roots & {"prefect", "flows", "tests", "pytest"}, path.name
