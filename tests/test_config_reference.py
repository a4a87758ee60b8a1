"""docs/config.md is the generated configuration reference (spade/config/reference.py), and the
reference has every section and key of the config tree with its type, default, bounds and
description."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from typer.testing import CliRunner

from spade.cli import app
from spade.config import CampaignConfig
from spade.config.reference import COMMAND, reference_markdown, sections

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "config.md"


def test_docs_config_md_is_the_generated_reference():
    want = reference_markdown()
    have = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    diff = "".join(
        list(difflib.unified_diff(have.splitlines(True), want.splitlines(True), "docs/config.md",
                                  "generated"))[:60]
    )  # fmt: skip
    assert have == want, f"docs/config.md is out of date: regenerate it with `{COMMAND}`\n{diff}"


def test_every_section_and_key_of_the_tree_is_in_the_reference():
    text = reference_markdown()
    found = sections()
    paths = [s.path for s in found]
    assert paths[:3] == ["", "model", "inference"]
    assert {"training.lora", "sandbox.verify", "inference.vllm.container"} <= set(paths)
    assert "run.heldout_suites[]" in paths  # a list of sub-models: its items' keys
    for section in found:
        heading = f"## `{section.path}`" if section.path else "## Top level"
        assert heading in text
        body = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
        for name, field in section.model.model_fields.items():
            assert f"| `{name}` |" in body, f"{section.path}.{name}"
            assert field.description is None or field.description.split()[0] in body
    assert len(found) == 21 and reference_markdown() == text  # the same text every time


def test_rows_show_type_default_bounds_and_choices():
    rows = {
        line.split(" | ")[0]: line
        for line in reference_markdown().splitlines()
        if line.startswith("| `")
    }
    assert rows["| `envs_per_round`"].startswith("| `envs_per_round` | int | `24` | [1, 10000] |")
    assert "| float | `300.0` | (0, 7200] |" in rows["| `request_timeout_s`"]
    assert "| str | `games` | one of `games`, `tool_use` |" in rows["| `mode`"]
    assert "| path or null | `null` |" in rows["| `policy_path`"]
    assert "13 items (`spade/config/verify.py`)" in rows["| `garbage_actions`"]  # long: summed
    assert "each one of `seed_dependence`" in rows["| `waive`"]
    assert "| `name` | str | *required* |" in reference_markdown()  # a held-out suite's name
    assert "&lt;tool_call>" in rows["| `action_format`"]  # not HTML to a Markdown renderer


class _Inner(BaseModel):
    """Inner settings."""

    level: Literal["low", "high"] | None = Field(None, description="A level | or none.")


class _Outer(BaseModel):
    """Outer settings, ``quoted`` and :class:`~x.Y`."""

    ratio: float = Field(0.5, gt=0.0, lt=1.0, description="A share <of> something.")
    tags: list[str] = Field(default_factory=lambda: ["a", "b"], min_length=1, description="Tags.")
    inner: _Inner = Field(default_factory=_Inner)
    extra: _Inner | None = Field(None, description="Optional inner.")


def test_a_synthetic_tree_renders_as_documented():
    text = reference_markdown(_Outer)
    assert [s.path for s in sections(_Outer)] == ["", "inner", "extra"]
    assert "Outer settings, `quoted` and `x.Y`." in text
    assert "| `ratio` | float | `0.5` | (0.0, 1.0) | A share &lt;of> something. |" in text
    assert "| `tags` | list of str | `[a, b]` | at least 1 item(s) | Tags. |" in text
    assert "| `inner` | section |  |  | Inner settings. See [`inner`](#inner). |" in text
    assert "Optional: `null` (the default) leaves it out" in text
    assert (
        "| `level` | str or null | `null` | one of `low`, `high` | A level \\| or none. |" in text
    )


def test_cli_prints_and_writes_the_reference(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["config", "reference"])
    assert result.exit_code == 0, result.output
    assert result.stdout == reference_markdown()
    out = tmp_path / "config.md"
    result = runner.invoke(app, ["config", "reference", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == reference_markdown()
    assert CampaignConfig.__name__ not in result.stdout and str(out) in result.stdout
