"""Stage declarations: each stage module says its name, config sections and entry functions
(spade.pipeline.stage), and the cache-key machinery reads them from the source."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from spade.pipeline import keys
from spade.pipeline.stage import declared_in
from spade.storage import STAGES

TALLY = """
from spade.pipeline.stage import declared_in


def tally(ctx, evaluations):
    return len(evaluations)


STAGE = Stage("tally", sections=("evaluation", "run.rounds"), entries=("spade.x:y",), run=tally)
"""


def test_a_new_module_declares_a_new_stage(tmp_path: Path) -> None:
    (tmp_path / "tally.py").write_text(TALLY)
    (tmp_path / "helpers.py").write_text("def f():\n    return 1\n")  # declares nothing
    assert keys.read_stages(tmp_path) == {
        "tally": (
            ("evaluation", "run.rounds"),
            ("spade.pipeline.tally:tally", "spade.x:y"),
        )
    }


def test_a_tuple_declares_two_stages_and_bare_entries_are_the_modules(tmp_path: Path) -> None:
    (tmp_path / "two.py").write_text(
        'STAGE = (Stage("a", ("seed",), ("f",)), Stage(name="b", sections=(), entries=("g",)))\n'
    )
    assert keys.read_stages(tmp_path) == {
        "a": (("seed",), ("spade.pipeline.two:f",)),
        "b": ((), ("spade.pipeline.two:g",)),
    }


@pytest.mark.parametrize(
    "source",
    [
        'SECTIONS = ("seed",)\nSTAGE = Stage("a", sections=SECTIONS)\n',  # not literal
        'STAGE = Stage(sections=("seed",))\n',  # no name
        'STAGE = make_stage("a")\n',  # not a Stage(...)
    ],
)
def test_a_declaration_that_cannot_be_read_is_refused(tmp_path: Path, source: str) -> None:
    (tmp_path / "bad.py").write_text(source)
    with pytest.raises(ValueError, match=r"bad\.py"):
        keys.read_stages(tmp_path)


def test_a_stage_declared_twice_is_refused(tmp_path: Path) -> None:
    for name in ("one", "two"):
        (tmp_path / f"{name}.py").write_text('STAGE = Stage("same", sections=())\n')
    with pytest.raises(ValueError, match="declared twice"):
        keys.read_stages(tmp_path)


def test_what_the_source_says_is_what_the_modules_declare() -> None:
    modules = sorted(p.stem for p in keys.PIPELINE.glob("*.py"))
    runtime = {
        s.name: s
        for m in modules
        for s in declared_in(importlib.import_module(f"spade.pipeline.{m}"))
    }
    assert set(runtime) == set(keys.STAGE_SECTIONS) == set(STAGES)  # no extra stage today
    for name, stage in runtime.items():
        assert stage.sections == keys.STAGE_SECTIONS[name]
        if stage.run is not None:
            run = f"{stage.run.__module__}:{stage.run.__name__}"
            assert keys.STAGE_ENTRIES[name][0] == run
    assert keys.EXTRA_STAGES == ()
