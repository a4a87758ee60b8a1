"""The checks of tests/test_docs_links.py, on text: what a Markdown page links to, the repository
paths it names in code, the ``spade`` commands and ``make`` targets it shows. Each function
takes the page's text (and where it lives) and returns its problems as ``file:line: ...``
strings, so the tests can feed them the real pages and synthetic ones alike.

What is not checked, on purpose (each exclusion is spelled out where it applies): URLs and other
schemes, placeholders (``<id>``, ``{name}``, ``...``), glob patterns, absolute and home paths
(this machine's, not the repository's), and output a run writes (``runs/``, ``.venv/``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

# Top-level folders of the repository: a code span or code-block token starting with one of
# these followed by "/" is a repository path that must exist. (Other first components are
# output or example names: `runs/he`, `my_pool/`, `envs/<id>.py`.)
REPO_DIRS = frozenset(
    {".ci", "bench", "configs", "dashboards", "docs", "flows", "infra", "scripts", "spade", "tests"}
)
# Folders a run, a benchmark or the bootstrap writes (the folders .gitignore lists), never
# tracked: references into them are examples of output (`runs/batch0/attempts.jsonl`,
# `bench/results/learning.json`), not files of the repository.
GENERATED = ("runs/", ".venv/", "wandb/", "bench/results/", "test-output/")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)
# [text](target "title") and ![alt](target); the target may be wrapped in <...>
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=[\"']([^\"']+)[\"']", re.IGNORECASE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, s3:, file:, ...
LINE_SUFFIX = re.compile(r":\d+(?:-\d+)?$")  # path:12 or path:12-30
TRIM = "\"'()[],;:.!?"  # punctuation around a token in prose or a command line
# The ways a command line of the README runs the CLI: `spade`, `.venv/bin/spade`, `$ spade`.
SPADE_PREFIXES = (("spade",), (".venv/bin/spade",), ("$", "spade"), ("$", ".venv/bin/spade"))


@dataclass(frozen=True)
class Code:
    """A piece of code on a page: a fenced block's line or an inline span."""

    line: int  # 1-based line of the page where it starts
    text: str
    block: bool  # in a fenced code block (else an inline code span)


def prose_lines(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, line, in a fenced code block) of every line but the fences."""
    fence: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened[1]
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        else:
            yield n, line, fence is not None


def split_page(text: str) -> tuple[str, list[Code]]:
    """The page's prose (code blocks and code spans blanked out, line numbers kept) and its
    code: every line of fenced blocks, every inline span."""
    lines = [""] * len(text.splitlines())
    code: list[Code] = []
    for n, line, in_block in prose_lines(text):
        if in_block:
            code.append(Code(n, line, True))
        else:
            lines[n - 1] = line
    prose = "\n".join(lines)
    blanked = []
    last = 0
    for span in CODE_SPAN.finditer(prose):
        if "\n\n" in span[2]:  # not a span: a lone backtick, and another paragraph's
            continue
        line = prose.count("\n", 0, span.start()) + 1
        code.append(Code(line, " ".join(span[2].split()), False))
        blanked += [prose[last : span.start()], re.sub(r"[^\n]", " ", span[0])]
        last = span.end()
    blanked.append(prose[last:])
    return "".join(blanked), sorted(code, key=lambda c: c.line)


def _where(page: Path, root: Path) -> str:
    try:
        return str(page.relative_to(root))
    except ValueError:
        return str(page)


# --- links ---------------------------------------------------------------------------------


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lower case, punctuation but ``-``
    and ``_`` removed, each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page defines: its headings' (a repeated heading gets ``-1``, ``-2``, as
    on GitHub) and explicit ``<a id=...>`` / ``<a name=...>``."""
    seen: dict[str, int] = {}
    found = set(HTML_ANCHOR.findall(text))
    for _n, line, in_block in prose_lines(text):
        heading = None if in_block else HEADING.match(line)
        if not heading:
            continue
        slug = github_anchor(heading[2])
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def link_targets(text: str) -> Iterator[tuple[int, str]]:
    """(line, target) of every link and image of the page's prose, reference definitions
    included; links inside code are not links."""
    prose, _ = split_page(text)
    for match in [*LINK.finditer(prose), *REF_DEF.finditer(prose)]:
        target = match[1].strip("<>")
        yield prose.count("\n", 0, match.start()) + 1, target


def broken_links(page: Path, text: str, root: Path) -> list[str]:
    """The page's relative links whose file (or heading anchor, in a Markdown file) is
    missing."""
    problems = []
    where = _where(page, root)
    for line, target in link_targets(text):
        if SCHEME.match(target):  # http(s)://, mailto:, s3://: not files of the repository
            continue
        if any(c in target for c in "<>{}") or "..." in target:  # a placeholder, not a path
            continue
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part)
        if path_part.startswith("/"):  # GitHub resolves /x from the repository's root
            file = root / path_part.lstrip("/")
        elif path_part:
            file = page.parent / path_part
        else:  # #anchor: this page
            file = page
        rel = _where(file.resolve(), root.resolve())
        if any(rel.startswith(g) for g in GENERATED):  # output of a run, not in the repository
            continue
        if not file.exists():
            problems.append(f"{where}:{line}: link {target}: no such file {rel}")
        elif (
            anchor
            and file.suffix == ".md"
            and file.is_file()
            and anchor not in anchors(file.read_text(encoding="utf-8", errors="replace"))
        ):
            problems.append(f"{where}:{line}: link {target}: no heading #{anchor} in {rel}")
    return problems


# --- paths named in code ---------------------------------------------------------------------


def repo_path(token: str) -> str | None:
    """The repository path a code token names, or None when it names none: ``spade/x.py``,
    ``configs/demo-cpu.yaml:12`` (the line dropped), ``tests/a.py::test_b`` (the test dropped),
    ``docs/architecture.md#anchor`` (the anchor dropped), ``tracker.md`` (a page name)."""
    token = token.strip(TRIM)
    if "://" in token or (SCHEME.match(token) and not LINE_SUFFIX.search(token)):
        return None  # a URL (s3://bucket/x, https://...), or a scheme such as pool:<name>
    token = token.split("::")[0].split("#")[0]
    token = LINE_SUFFIX.sub("", token).rstrip(TRIM)
    if any(c in token for c in "*?[]{}"):  # a glob pattern (runs/batch0/envs/*.py)
        return None
    if any(c in token for c in "<>$=") or "..." in token:  # a placeholder or a variable
        return None
    if token.startswith(("/", "~")):  # this machine's paths (/usr/bin/chromium), not ours
        return None
    token = token.removeprefix("./")
    if token.startswith(GENERATED):  # what a run or the bootstrap writes
        return None
    first = token.split("/")[0]
    if "/" in token and first in REPO_DIRS:
        return token
    if "/" not in token and token.endswith(".md") and re.fullmatch(r"[\w.-]+", token):
        return token  # another page, by its name: beside the page or at the root
    return None


def missing_paths(page: Path, text: str, root: Path) -> list[str]:
    """Repository paths the page names in code (spans and code blocks) that do not exist."""
    problems = []
    where = _where(page, root)
    seen: set[tuple[int, str]] = set()
    for code in split_page(text)[1]:
        for token in code.text.split():
            path = repo_path(token)
            if path is None or (code.line, path) in seen:
                continue
            seen.add((code.line, path))
            if "/" not in path:  # a page's name, in a span: beside this page or at the root
                # (in a code block a bare name is a listing's, `docs/  architecture.md: ...`)
                found = (page.parent / path).exists() or (root / path).exists()
                if not code.block and not found:
                    problems.append(f"{where}:{code.line}: `{path}`: no such page")
            elif not (root / path).exists() and not _test_under_tests(root, path):
                problems.append(f"{where}:{code.line}: `{path}`: no such file or folder")
    return problems


def _test_under_tests(root: Path, path: str) -> bool:
    """A test module named relative to tests/ (a page may write `flows/test_results.py::test_x`
    for tests/flows/test_results.py)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith("test_") and (root / "tests" / path).exists()


# --- commands --------------------------------------------------------------------------------


def _logical_lines(codes: list[Code]) -> Iterator[tuple[int, str]]:
    """Code-block lines with ``\\`` continuations joined; each inline span on its own."""
    pending: tuple[int, str] | None = None
    for code in codes:
        if pending is not None and code.block:
            line, text = pending[0], pending[1] + " " + code.text.strip()
        else:
            if pending is not None:
                yield pending
            line, text = code.line, code.text.strip()
        if code.block and text.endswith("\\"):
            pending = (line, text[:-1])
        else:
            pending = None
            yield line, text
    if pending is not None:
        yield pending


def _words(text: str) -> list[str] | None:
    try:  # shell quoting, and a comment ends the command
        return shlex.split(text, comments=True)
    except ValueError:  # unbalanced quotes: prose in a span, not a command line
        return None


def commands(text: str, program: str = "spade") -> Iterator[tuple[int, list[str]]]:
    """(line, arguments) of every command line of the page that runs ``program``: in code
    blocks and in inline code spans, after any ``VAR=value`` assignments; for ``spade``, also
    as ``.venv/bin/spade`` or ``$ spade``."""
    prefixes = SPADE_PREFIXES if program == "spade" else ((program,), ("$", program))
    for line, logical in _logical_lines(split_page(text)[1]):
        words = _words(logical)
        if not words:
            continue
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # env assignments
            words = words[1:]
        for prefix in prefixes:
            if tuple(words[: len(prefix)]) == prefix:
                yield line, words[len(prefix) :]
                break


def _flags(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(param.opts)
        names.update(param.secondary_opts)  # --no-live
    return names


def command_problems(args: list[str], cli: Any) -> list[str]:
    """What is wrong with ``spade ARGS`` against the click command tree ``cli`` (typer's
    ``get_command``; typer ships its own click, so groups are told by their ``commands``): an
    unknown subcommand, or a flag the command it reaches does not have."""
    path = ["spade"]
    command = cli
    problems = []
    tokens = [t.strip("[]") for t in args]  # [--rounds N]: an optional flag, shown as such
    for token in tokens:
        if not token or token == "...":
            continue
        subcommands = getattr(command, "commands", None)
        if subcommands is not None and not token.startswith("-"):
            sub = subcommands.get(token)
            if sub is None:
                problems.append(f"{' '.join(path)} has no command {token!r}")
                return problems
            command, path = sub, [*path, token]
            continue
        if re.fullmatch(r"-{1,2}[A-Za-z][\w-]*(=.*)?", token):
            flag = token.split("=", 1)[0]
            if flag not in _flags(command):
                problems.append(f"{' '.join(path)} has no option {flag}")
    return problems


def bad_commands(page: Path, text: str, root: Path, cli: Any) -> list[str]:
    """The page's ``spade`` command lines that name a command or a flag the CLI lacks."""
    where = _where(page, root)
    return [
        f"{where}:{line}: `spade {' '.join(args)}`: {problem}"
        for line, args in commands(text)
        for problem in command_problems(args, cli)
    ]


def make_targets(makefile: str) -> set[str]:
    """The targets a Makefile defines (``name:`` rules; not ``name :=`` assignments)."""
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile, re.MULTILINE))


def missing_make_targets(page: Path, text: str, root: Path, makefile: str) -> list[str]:
    """``make TARGET`` lines of the page whose target the Makefile does not define."""
    where = _where(page, root)
    targets = make_targets(makefile)
    problems = []
    for line, args in commands(text, "make"):
        for target in args:
            if target.startswith("-") or "=" in target:  # make's own flags, VAR=value
                continue
            if target not in targets:
                problems.append(f"{where}:{line}: `make {target}`: no such Makefile target")
    return problems
