"""Tool schemas are checked as JSON Schema (the jsonschema library), plus the shape we read."""

import pytest

from spade.agent.prompts import system_prompt, tool_lines
from spade.sandbox.schemas import check_tools, schema_problem


def _tool(properties, **function):
    params = {"type": "object", "properties": properties}
    return {"type": "function", "function": {"name": "f", "parameters": params, **function}}


def test_schemas_our_runtime_builds_pass():
    from spade.envs import ToolUseEnv

    class Shop(ToolUseEnv):
        def tool_price(self, item: str, count: int = 1) -> str:
            """Price of an item.

            Args:
                item: what to price
            """
            return item

    assert check_tools(Shop().tools()) is None
    assert check_tools([]) is None
    assert schema_problem({"function": {"name": "g"}}) is None  # no parameters: none taken


BAD_SCHEMAS = {
    "property given as a type name": _tool({"x": "string"}),
    "property given as true": _tool({"x": True}),
    "unknown type": _tool({"x": {"type": "strin"}}),
    "required not a list": {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "required": "x"}},
    },
    "parameters of an array": {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "array"}},
    },
    "parameters not an object": {"type": "function", "function": {"name": "f", "parameters": 3}},
    "no name": {"type": "function", "function": {"parameters": {}}},
    "not a function": {"type": "retrieval", "function": {"name": "f"}},
    "not an object": "f",
    "description not a string": _tool({}, description=["d"]),
    # re.compile of a pattern nested 100,000 deep raises RecursionError inside the validator
    "pattern nested 100,000 deep": _tool({"x": {"type": "string", "pattern": "(" * 10**5}}),
}


@pytest.mark.attack
@pytest.mark.parametrize("tool", BAD_SCHEMAS.values(), ids=BAD_SCHEMAS.keys())
def test_malformed_schemas_have_a_reason(tool):
    problem = check_tools([tool])
    assert problem and problem.startswith("tool ")


def test_property_given_as_a_type_name_says_what_to_write():
    problem = check_tools([_tool({"x": "string"})])
    assert problem is not None and "not a valid JSON Schema" in problem and "'f'" in problem


def test_tools_result_that_is_not_a_list():
    assert check_tools({"name": "f"}) == "tools() must return a list of schemas, got dict"


@pytest.mark.attack
@pytest.mark.parametrize("tool", BAD_SCHEMAS.values(), ids=BAD_SCHEMAS.keys())
def test_prompt_builder_reads_any_schema_without_raising(tool):
    """It raised AttributeError on ``"x": "string"``, outside the rollout's try."""
    assert tool_lines([tool]).startswith("- ")
    assert "Tools:" in system_prompt(True, [tool])


def test_prompt_lists_well_formed_tools():
    tool = _tool({"item": {"type": "string"}, "n": {}}, description="Price.")
    assert tool_lines([tool]) == "- f(item: string, n: any): Price."
