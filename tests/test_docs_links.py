"""The README and docs/ stay true to the repository: their relative links reach a file (and a
heading, for a link into a page), the repository paths they name in code exist, the ``spade``
commands they show exist with the flags shown, and so do the ``make`` targets. The checks are
tests/docs_check.py's; the synthetic pages below show that each one catches what it is for.
(docs/config.md, the generated reference, is checked against its generator by
tests/test_config_reference.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from flows.cli import app
from tests.docs_check import (
    anchors,
    bad_commands,
    broken_links,
    commands,
    make_targets,
    missing_make_targets,
    missing_paths,
    repo_path,
)

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
IDS = [str(p.relative_to(ROOT)) for p in PAGES]
CLI = typer.main.get_command(app)  # the whole `spade` command, run/resume/deploy included
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_relative_links_reach_a_file_and_heading(page: Path):
    problems = broken_links(page, _text(page), ROOT)
    assert not problems, "broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_repository_paths_named_in_code_exist(page: Path):
    problems = missing_paths(page, _text(page), ROOT)
    assert not problems, "paths that do not exist:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_spade_commands_shown_exist_with_their_flags(page: Path):
    problems = bad_commands(page, _text(page), ROOT, CLI)
    assert not problems, "commands the CLI does not have:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_make_targets_shown_exist(page: Path):
    problems = missing_make_targets(page, _text(page), ROOT, MAKEFILE)
    assert not problems, "\n".join(problems)


def test_the_readme_shows_commands_the_checks_see():
    # the scanner finds the README's command lines (a scanner that finds nothing passes all)
    found = [args[0] for _line, args in commands(_text(ROOT / "README.md")) if args]
    assert "run" in found
    assert [args for _line, args in commands(_text(ROOT / "README.md"), "make") if args]


# --- each check catches what it is for (synthetic pages) -------------------------------------


def _page(tmp_path: Path, text: str, name: str = "README.md") -> tuple[Path, str]:
    page = tmp_path / name
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text, encoding="utf-8")
    return page, text


def test_a_link_to_a_missing_file_or_heading_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Set up `spade` (CPU)\n")
    page, text = _page(
        tmp_path,
        "See [the guide](docs/guide.md), [set up](docs/guide.md#set-up-spade-cpu),\n"
        "![a chart](docs/img/chart.png) and [gone](docs/gone.md).\n"
        "[no heading](docs/guide.md#nothing-here) and [here](#top)\n\n# Top\n",
    )
    problems = broken_links(page, text, tmp_path)
    assert problems == [
        "README.md:2: link docs/img/chart.png: no such file docs/img/chart.png",
        "README.md:2: link docs/gone.md: no such file docs/gone.md",
        "README.md:3: link docs/guide.md#nothing-here: no heading #nothing-here in docs/guide.md",
    ]


def test_links_that_are_not_files_of_the_repository_are_left_alone(tmp_path):
    page, text = _page(
        tmp_path,
        "[site](https://example.org/x) [mail](mailto:a@b.c) [bucket](s3://b/runs)\n"
        "[a run](runs/demo/round-0000/) [placeholder](<campaign-id>/x)\n"
        "```\n[in code](nowhere.md)\n```\n`[in a span](nowhere.md)`\n",
    )
    assert broken_links(page, text, tmp_path) == []


def test_heading_anchors_follow_github():
    text = "# Running campaigns (`flows/`, `spade run`)\n## Notes\n## Notes\n```\n# not one\n```\n"
    assert anchors(text) == {"running-campaigns-flows-spade-run", "notes", "notes-1"}


def test_a_missing_repository_path_in_code_is_reported(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "designs.py").write_text("")
    (tmp_path / "tests" / "flows").mkdir(parents=True)
    (tmp_path / "tests" / "flows" / "test_x.py").write_text("")
    page, text = _page(
        tmp_path,
        "Run `bench/designs.py --model <alias>` and `bench/gone.py`;\n"
        "see `configs/demo-cpu.yaml:12` and `flows/test_x.py::test_y` and `tracker.md`.\n"
        "```bash\n.venv/bin/python bench/sandbox.py   # and spade/envs/examples/*.py\n```\n",
    )
    assert missing_paths(page, text, tmp_path) == [
        "README.md:1: `bench/gone.py`: no such file or folder",
        "README.md:2: `configs/demo-cpu.yaml`: no such file or folder",
        "README.md:2: `tracker.md`: no such page",
        "README.md:4: `bench/sandbox.py`: no such file or folder",
    ]


@pytest.mark.parametrize(
    "token",
    [
        "runs/batch0/attempts.jsonl",  # what a run writes
        "bench/results/learning.json",  # what a benchmark writes
        ".venv/bin/spade",  # what the bootstrap makes
        "s3://bucket/runs",  # a URL
        "pool:<name>",  # a placeholder
        "spade/envs/examples/*.py",  # a glob
        "envs/<id>.hint.txt",  # a placeholder
        "/usr/bin/chromium",  # this machine's
        "my_env.py",  # an example name, not a repository path
    ],
)
def test_tokens_that_name_no_repository_path(token: str):
    assert repo_path(token) is None


def _toy_cli() -> object:
    """A small `spade`: `run` (with a --live/--no-live pair), `status`, and `env check`."""
    toy = typer.Typer()
    env = typer.Typer()
    toy.add_typer(env, name="env")

    @toy.command("run")
    def run(config: str = typer.Option(""), rounds: int = 1, live: bool = True) -> None: ...

    @toy.command("status")
    def status(campaign: str, store: str = "./runs", json: bool = False) -> None: ...

    @env.command("check")
    def check(files: list[str], reference: str = typer.Option("", "--reference", "-r")) -> None: ...

    return typer.main.get_command(toy)


def test_an_unknown_command_or_flag_is_reported(tmp_path):
    page, text = _page(
        tmp_path,
        "```bash\n"
        "PREFECT_API_URL=http://h:4200/api .venv/bin/spade run --config c.yaml [--rounds N]\n"
        "spade status ID --store ./runs --jsn        # a typo\n"
        "$ spade env check my_env.py -r spade/envs/examples --no-live\n"
        "spade env chek x.py\n"
        ".venv/bin/spade run --config c.yaml \\\n    --no-live --no-such-flag 1\n"
        "```\n"
        "and in prose `spade status ID --json --stor x`.\n",
    )
    assert bad_commands(page, text, tmp_path, _toy_cli()) == [
        "README.md:3: `spade status ID --store ./runs --jsn`: spade status has no option --jsn",
        "README.md:4: `spade env check my_env.py -r spade/envs/examples --no-live`:"
        " spade env check has no option --no-live",
        "README.md:5: `spade env chek x.py`: spade env has no command 'chek'",
        "README.md:6: `spade run --config c.yaml --no-live --no-such-flag 1`:"
        " spade run has no option --no-such-flag",
        "README.md:9: `spade status ID --json --stor x`: spade status has no option --stor",
    ]


def test_an_unknown_make_target_is_reported(tmp_path):
    page, text = _page(tmp_path, "```bash\nmake demo\nmake tset   # a typo\n```\n`make lint`\n")
    makefile = ".PHONY: demo lint\nX := 1\ndemo: bootstrap\n\techo\nlint:\n\techo\n"
    assert make_targets(makefile) == {".PHONY", "demo", "lint"}
    assert missing_make_targets(page, text, tmp_path, makefile) == [
        "README.md:3: `make tset`: no such Makefile target"
    ]
