"""The configuration reference: the whole :class:`~spade.config.CampaignConfig` tree as
Markdown, one section per sub-model (its dotted path), a table of its keys with their type,
default, bounds or choices and description.

``docs/config.md`` is :func:`reference_markdown`'s output, written by :data:`COMMAND`;
``tests/test_config_reference.py`` fails when the two differ. The output depends on the models
only (field order, defaults, constraints, descriptions, class docstrings): no dates, no paths of
this machine, so regenerating an unchanged tree changes nothing.
"""

from __future__ import annotations

import inspect
import json
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from spade.config.campaign import CampaignConfig

COMMAND = "spade config reference --out docs/config.md"
"""The command that writes ``docs/config.md`` (named in its header)."""

MAX_DEFAULT_CHARS = 60  # a longer default is summarised (count of items, where it is defined)
_RST_ROLE = re.compile(r":\w+:`~?([^`]+)`")  # :class:`~spade.x.Y` -> `spade.x.Y`
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


@dataclass(frozen=True)
class Section:
    """One sub-model of the tree: where it sits and what it is."""

    path: str  # dotted, from the root ("" for the root, "run.heldout_suites[]" for list items)
    model: type[BaseModel]
    note: str = ""  # how the parent holds it (optional, a list), when not plainly

    @property
    def title(self) -> str:
        return f"`{self.path}`" if self.path else "Top level"


def sections(root: type[BaseModel] = CampaignConfig) -> list[Section]:
    """Every sub-model of ``root``, depth-first in field order, the root first."""
    return list(_walk(root, "", ""))


def _walk(model: type[BaseModel], path: str, note: str) -> Iterator[Section]:
    yield Section(path, model, note)
    for name, field in model.model_fields.items():
        found = _nested(field.annotation)
        if found is not None:
            child, how = found
            dotted = f"{path}.{name}" if path else name
            yield from _walk(child, dotted + ("[]" if how == "list" else ""), how)


def _nested(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The sub-model a field holds and how: ``""`` (always), ``"optional"`` or ``"list"``."""
    if _is_model(annotation):
        return annotation, ""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if _is_union(annotation) and len(args) == 1 and _is_model(args[0]):
        return args[0], "optional"
    if get_origin(annotation) is list and args and _is_model(args[0]):
        return args[0], "list"
    return None


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but ``-`` and ``_``
    dropped, spaces as ``-``."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _link(section: Section) -> str:
    return f"[{section.title}](#{anchor(section.title)})"


def type_name(annotation: Any) -> str:
    """How a field's type reads in the table: ``int``, ``float or null``, ``list of str``."""
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    if _is_model(annotation):
        return "section"
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "path"
    if isinstance(annotation, type):
        return annotation.__name__
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return type_name(type(args[0]))
    if _is_union(annotation):
        return " or ".join(type_name(a) for a in args)
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is tuple:
        return f"({', '.join(type_name(a) for a in args)})"
    if origin is dict:
        return "mapping"
    return str(annotation)


def _choices(annotation: Any) -> tuple[str, ...]:
    """The allowed values of a Literal field (or of a list's items, or an optional one's)."""
    if get_origin(annotation) is Literal:
        return tuple(str(a) for a in get_args(annotation))
    for arg in get_args(annotation):
        if found := _choices(arg):
            return found
    return ()


def bounds(field: FieldInfo) -> str:
    """The field's constraints: an interval (``[0, 1]``, ``(0, 7200]``, ``≥ 1``), a minimum
    length, a pattern, or its choices."""
    lo = hi = ""
    parts = []
    for meta in field.metadata:
        if isinstance(meta, at.Ge):
            lo = f"[{_number(meta.ge)}"
        elif isinstance(meta, at.Gt):
            lo = f"({_number(meta.gt)}"
        elif isinstance(meta, at.Le):
            hi = f"{_number(meta.le)}]"
        elif isinstance(meta, at.Lt):
            hi = f"{_number(meta.lt)})"
        elif isinstance(meta, at.MinLen):
            parts.append(f"at least {meta.min_length} {_units(field.annotation)}")
        elif isinstance(meta, at.MaxLen):
            parts.append(f"at most {meta.max_length} {_units(field.annotation)}")
        elif (pattern := getattr(meta, "pattern", None)) is not None:
            parts.append(f"matches `{pattern}`")
    if lo and hi:
        parts.insert(0, f"{lo}, {hi}")
    elif lo:
        parts.insert(0, ("≥ " if lo[0] == "[" else "> ") + lo[1:])
    elif hi:
        parts.insert(0, ("≤ " if hi[-1] == "]" else "< ") + hi[:-1])
    if choices := _choices(field.annotation):
        each = "each " if get_origin(field.annotation) is list else ""
        parts.append(f"{each}one of " + ", ".join(f"`{c}`" for c in choices))
    return "; ".join(parts)


def _units(annotation: Any) -> str:
    """What a length bound counts: characters of a string, items of a list."""
    if get_origin(annotation) in (list, tuple, dict):
        return "item(s)"
    return "character(s)" if str in (annotation, *get_args(annotation)) else "item(s)"


def _number(value: Any) -> str:
    return repr(value)


def default_text(model: type[BaseModel], field: FieldInfo) -> str:
    """The default as YAML would write it, in a code span (required: *required*)."""
    if field.is_required():
        return "*required*"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return ""
    text = _yaml(value)
    if len(text) > MAX_DEFAULT_CHARS and isinstance(value, list | tuple | dict):
        where = model.__module__.replace(".", "/") + ".py"  # where the default is defined
        return f"{len(value)} items (`{where}`)"
    return f"`{text}`"


def _yaml(value: Any) -> str:
    """A value in YAML's flow style: ``null``, ``true``, ``[a, b]``, ``{}``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, str):
        plain = value and value.isprintable() and value.strip() == value and "`" not in value
        return value if plain else json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, default=str)


def _cell(text: str) -> str:
    """Text safe in a table cell: one line, ``|`` escaped, ``<`` outside code spans as an
    entity (so ``<name>`` is not read as HTML)."""
    text = " ".join(text.split()).replace("|", "\\|")
    out, last = [], 0
    for span in _CODE_SPAN.finditer(text):
        out += [text[last : span.start()].replace("<", "&lt;"), span[0]]
        last = span.end()
    return "".join([*out, text[last:].replace("<", "&lt;")])


def _prose(docstring: str | None) -> str:
    """A class docstring as Markdown paragraphs (reST's ````x```` and roles as code spans)."""
    paragraphs = inspect.cleandoc(docstring or "").split("\n\n")
    text = "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())
    return _RST_ROLE.sub(r"`\1`", text.replace("``", "`"))


def _first_sentence(docstring: str | None) -> str:
    return _prose(docstring).split("\n\n")[0]


NOTES = {
    "optional": "Optional: `null` (the default) leaves it out; set it to a mapping of these keys.",
    "list": "A list; each item is a mapping of these keys.",
}


def _table(section: Section, children: dict[str, Section]) -> list[str]:
    rows = ["| key | type | default | bounds / choices | description |", "|---|---|---|---|---|"]
    for name, field in section.model.model_fields.items():
        dotted = f"{section.path}.{name}" if section.path else name
        child = children.get(dotted) or children.get(dotted + "[]")
        if child is not None:
            described = field.description or _first_sentence(child.model.__doc__)
            kind = type_name(field.annotation)
            row = [f"`{name}`", kind, default_text(section.model, field), "",
                   f"{_cell(described)} See {_link(child)}."]  # fmt: skip
        else:
            row = [f"`{name}`", type_name(field.annotation), default_text(section.model, field),
                   _cell(bounds(field)), _cell(field.description or "")]  # fmt: skip
        rows.append("| " + " | ".join(row) + " |")
    return rows


def reference_markdown(root: type[BaseModel] = CampaignConfig) -> str:
    """The reference of ``root``'s tree as one Markdown document (``docs/config.md``)."""
    found = sections(root)
    children = {s.path: s for s in found if s.path}
    lines = [
        "# Configuration reference",
        "",
        f"Generated from the pydantic models in `spade/config/` by `{COMMAND}`: do not edit"
        " by hand (`tests/test_config_reference.py` fails when it is out of date).",
        "",
        "A campaign config is a YAML file of these sections; every key is optional and a"
        " missing one takes its default. A key's dotted path (`designer.envs_per_round`) is"
        " where it sits in the YAML. Unknown keys and values out of bounds are errors, and a"
        " few rules across sections are checked on load too (the models' validators in"
        " `spade/config/`). A default of `null` is YAML's None, which the descriptions name.",
        "",
        "Sections:",
        "",
    ]
    for section in found:
        depth = section.path.replace("[]", "").count(".") + (1 if section.path else 0)
        lines.append(f"{'  ' * depth}- {_link(section)}")
    for section in found:
        lines += ["", f"## {section.title}", "", _prose(section.model.__doc__)]
        if section.note:
            lines += ["", NOTES[section.note]]
        lines += ["", *_table(section, children)]
    return "\n".join(lines) + "\n"
