"""The trusted side of the BFCL suite: bfcl-eval's files turned into what a task embeds.

bfcl-eval is installed without its SDK dependencies, so only its pure constant modules are
imported; everything else is read as data or source text: the multi-turn entries and their
ground truth, the function docs (converted to OpenAI tool schemas as BFCL's ``convert_to_tool``
converts them), the simulated API classes' source (imports the jail cannot serve commented out)
and the long-context extension data. Ground-truth calls such as ``cd(folder='document')`` are
parsed with ``ast`` into a name and literal arguments: nothing here is evaluated.
"""

from __future__ import annotations

import ast
import copy
import json
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from bfcl_eval.constants.executable_backend_config import (
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
)
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
_LONG_CONTEXT_MODULE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.long_context"

Call = tuple[str, dict[str, Any]]


def _package_file(module_or_path: str) -> Traversable:
    """A file of the installed bfcl_eval package, from a dotted module or a slash path."""
    if "/" not in module_or_path:
        *parts, last = module_or_path.split(".")[1:]
        return files("bfcl_eval").joinpath(*parts, last + ".py")
    return files("bfcl_eval").joinpath(*module_or_path.split("/"))


def _json_lines(path: str) -> list[dict[str, Any]]:
    text = _package_file(path).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@cache
def load_entries(category: str) -> tuple[dict[str, Any], ...]:
    """A category's entries in benchmark order, each with its ``ground_truth`` turns."""
    answers = {
        a["id"]: a["ground_truth"]
        for a in _json_lines(f"data/possible_answer/BFCL_v4_{category}.json")
    }
    entries = _json_lines(f"data/BFCL_v4_{category}.json")
    return tuple({**e, "ground_truth": answers[e["id"]]} for e in entries)


def _import_stand_in(node: ast.Import | ast.ImportFrom, source: str) -> str | None:
    """Why a top-level import is commented out for the jail, or None to keep it."""
    modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
    if modules == ["subprocess"]:
        if source.count("subprocess") != 1:  # a newer bfcl-eval would need a stand-in
            raise ValueError("bfcl-eval API source uses subprocess")
        return "unused by the API, and not importable in the jail"
    if modules == ["mpmath"]:
        return "not in the jail: the task provides a stand-in (spade/benchmarks/bfcl_mpmath.py)"
    if modules == [_LONG_CONTEXT_MODULE]:
        return "the task defines these names when the entry is long-context"
    if any(m is None or m.split(".")[0] == "bfcl_eval" for m in modules):
        raise ValueError(f"unexpected bfcl-eval import in an API source: {modules}")
    return None


@cache
def api_source(class_name: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """An API class's module source, runnable in the jail; the long-context names it uses; the
    modules it needs a stand-in for.

    Only import lines change (each commented out with the reason), so line numbers and every
    other character stay as bfcl-eval ships them.
    """
    source = _package_file(CLASS_FILE_PATH_MAPPING[class_name]).read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    long_names: list[str] = []
    stand_ins: list[str] = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        why = _import_stand_in(node, source)
        if why is None:
            continue
        if isinstance(node, ast.ImportFrom) and node.module == _LONG_CONTEXT_MODULE:
            long_names += [a.name for a in node.names]
        elif isinstance(node, ast.Import) and node.names[0].name == "mpmath":
            stand_ins.append("mpmath")
        end = node.end_lineno or node.lineno
        for i in range(node.lineno - 1, end):
            lines[i] = "# " + lines[i]
        lines[end - 1] = lines[end - 1].rstrip("\n") + f"  # spade: {why}\n"
    return "".join(lines), tuple(long_names), tuple(stand_ins)


@cache
def long_context_source(names: tuple[str, ...]) -> str:
    """The assignments of ``names`` from bfcl-eval's long_context module, as source."""
    source = _package_file(_LONG_CONTEXT_MODULE).read_text(encoding="utf-8")
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = ast.get_source_segment(source, node) or ""
    missing = sorted(set(names) - set(found))
    if missing:
        raise ValueError(f"long_context defines no {missing}")
    return "".join(found[n] + "\n" for n in sorted(set(names)))


@cache
def method_params(class_name: str) -> dict[str, tuple[str, ...]]:
    """Parameter names (after self) of an API class's public methods, from its source."""
    source = _package_file(CLASS_FILE_PATH_MAPPING[class_name]).read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {
                fn.name: tuple(a.arg for a in fn.args.args[1:])
                for fn in node.body
                if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("_")
            }
    raise ValueError(f"no class {class_name} in its bfcl-eval module")


@cache
def function_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """BFCL's function docs of an API class (the ``function`` list of a multi-turn entry)."""
    path = f"data/multi_turn_func_doc/{MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]}"
    return tuple(_json_lines(path))


def _openai_properties(properties: dict[str, Any]) -> dict[str, Any]:
    """BFCL's ``_cast_to_openai_type`` with the GORILLA_TO_OPENAPI mapping (in place)."""
    for value in properties.values():
        if "type" not in value:
            value["type"] = "string"
        else:
            if value["type"] == "float":
                value["format"] = "float"
                value["description"] = value.get("description", "") + " This is a float type value."
            value["type"] = GORILLA_TO_OPENAPI.get(value["type"], "string")
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _openai_properties(value["properties"])
            elif "items" in value:
                items = value["items"]
                items["type"] = GORILLA_TO_OPENAPI[items["type"]]
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = GORILLA_TO_OPENAPI[items["items"]["type"]]
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _openai_properties(items["properties"])
    return properties


def tool_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function schema from a BFCL function doc. The doc's ``response`` schema is left
    out: chat templates and OpenAI-style servers have no field for it."""
    params = copy.deepcopy(doc["parameters"])
    params["type"] = "object"
    params["properties"] = _openai_properties(params.get("properties", {}))
    function = {"name": doc["name"], "description": doc["description"], "parameters": params}
    return {"type": "function", "function": function}


def parse_call(call: str, params: dict[str, tuple[str, ...]]) -> Call:
    """A ground-truth call string as ``(name, keyword arguments)``.

    Positional arguments (``sort('final_report.pdf')``) are named from the method's signature,
    so the call can be sent as a JSON tool call; arguments must be literals that survive JSON.
    """
    node = ast.parse(call.strip(), mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError(f"not a plain function call: {call!r}")
    name = node.func.id
    names = params.get(name, ())
    if len(node.args) > len(names):
        raise ValueError(f"too many positional arguments for {name}: {call!r}")
    arguments = {names[i]: ast.literal_eval(arg) for i, arg in enumerate(node.args)}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ValueError(f"** arguments in a ground-truth call: {call!r}")
        arguments[keyword.arg] = ast.literal_eval(keyword.value)
    if json.loads(json.dumps(arguments)) != arguments:
        raise ValueError(f"arguments do not survive JSON: {call!r}")
    return name, arguments
