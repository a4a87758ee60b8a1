"""docs/architecture.md and the citations of it: every ``§N`` cited exists, nothing cites the
design notes that live outside the repository, and every ``spade/`` or ``flows/`` path the
document names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
SCANNED = ("spade", "flows", "bench", "tests", "infra", "configs", "scripts", "dashboards", "docs")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt"}
TOP_FILES = ("README.md", "Makefile", "pyproject.toml")

HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", re.MULTILINE)
# "docs/architecture.md §2.2, §2.7 and §2.8": the sections cited after one mention
CITATION = re.compile(r"docs/architecture\.md\)?\s+\(?((?:§\d+(?:\.\d+)*(?:,\s*|\s+and\s+)?)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
# The old design notes, spelled so that this file does not match itself.
OLD_NOTES = re.compile("DESIGN" + r"(?:\.md|\s+§|\s+section)")
DOC_PATH = re.compile(r"(?<![\w/.])((?:spade|flows)/[\w/.-]*\w)")


def _sections() -> set[str]:
    return set(HEADING.findall(DOC.read_text()))


def _files() -> list[Path]:
    found = [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]
    for top in SCANNED:
        found += [
            p
            for p in sorted((ROOT / top).rglob("*"))
            if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
        ]
    return found


def _doc_paths() -> list[str]:
    return sorted(set(DOC_PATH.findall(DOC.read_text())))


def test_the_document_has_numbered_sections():
    sections = _sections()
    assert {"1", "2", "2.1", "3", "12"} <= sections
    # top-level sections are numbered 1..N without a gap
    top = sorted(int(s) for s in sections if "." not in s)
    assert top == list(range(1, len(top) + 1))


def test_every_citation_names_a_section_that_exists():
    sections = _sections()
    cited = 0
    bad = []
    for path in _files():
        text = path.read_text(errors="replace")
        for match in CITATION.finditer(text):
            for number in SECTION.findall(match[1]):
                cited += 1
                if number not in sections:
                    line = text.count("\n", 0, match.start()) + 1
                    bad.append(f"{path.relative_to(ROOT)}:{line}: §{number}")
    assert cited > 20  # the docstrings do cite it
    assert not bad, "citations of sections docs/architecture.md does not have:\n" + "\n".join(bad)


def test_the_documents_own_references_name_sections_that_exist():
    sections = _sections()
    missing = sorted(set(SECTION.findall(DOC.read_text())) - sections)
    assert not missing, f"docs/architecture.md refers to §{', §'.join(missing)}"


def test_nothing_cites_the_design_notes_outside_the_repository():
    found = []
    for path in _files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OLD_NOTES.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "cite docs/architecture.md §N instead:\n" + "\n".join(found)


def test_the_readmes_link_the_document():
    for readme in ("README.md", "flows/README.md"):
        assert "docs/architecture.md" in (ROOT / readme).read_text(), readme


# After a merge that moves or renames modules, the failing cases of this test name exactly the
# paths of docs/architecture.md to update (one case per path).
@pytest.mark.parametrize("path", _doc_paths())
def test_every_path_the_document_names_exists(path: str):
    assert (ROOT / path).exists(), f"docs/architecture.md names {path}, which does not exist"
