"""Tool schemas a design returns from ``tools()``, checked on the host.

Each must be an OpenAI function schema, ``{"type": "function", "function": {"name": str,
"description": str, "parameters": {...}}}``, whose ``parameters`` is a valid JSON Schema (checked
against its metaschema by the ``jsonschema`` library) of an object whose ``properties`` are each
a schema object: the shape the agent's prompt (:mod:`spade.agent.prompts`), the verifier's
malformed calls and the chat templates read. The verifier checks it once (``tool_schemas``); the
session checks it again on every ``tools`` reply, so a design cannot pass with one answer and
play with another.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator


def schema_problem(tool: Any, index: int = 0) -> str | None:
    """Why ``tool`` is not a usable function schema, or None when it is."""
    where = f"tool {index}"
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        return f'{where} is not an object of "type": "function"'
    fn = tool.get("function")
    if not isinstance(fn, dict):
        return f'{where} has no "function" object'
    name = fn.get("name")
    if not isinstance(name, str) or not name.strip():
        return f'{where} has no "name" string'
    where = f"tool {name[:60]!r}"
    if not isinstance(fn.get("description", ""), str):
        return f'{where}: "description" is not a string'
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, dict):
        return f'{where}: "parameters" is not an object'
    try:
        Draft202012Validator.check_schema(params)
    # The validator walks a design's schema, regexes in "pattern" included: whatever it raises
    # (SchemaError, or RecursionError on a regex nested thousands deep) is a bad schema.
    except Exception as exc:
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        return f'{where}: "parameters" is not a valid JSON Schema: {str(message)[:200]}'
    if params.get("type", "object") != "object":
        return f'{where}: "parameters" must describe an object'
    props = params.get("properties", {})
    bad = [str(p)[:40] for p, spec in props.items() if not isinstance(spec, dict)]
    if bad:
        example = '{"type": "string"}'
        return f"{where}: properties {', '.join(bad)} are not schema objects (e.g. {example})"
    return None


def check_tools(tools: Any) -> str | None:
    """Why the ``tools()`` result is not a list of usable function schemas, or None."""
    if not isinstance(tools, list):
        return f"tools() must return a list of schemas, got {type(tools).__name__}"
    for i, tool in enumerate(tools):
        if problem := schema_problem(tool, i):
            return problem
    return None
