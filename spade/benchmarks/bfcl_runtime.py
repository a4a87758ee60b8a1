"""BFCL v4 multi-turn in the jail: one entry's simulated APIs, played turn by turn and checked.

This module's text is shipped verbatim into every ``bfcl_multi_turn`` task (see
:mod:`spade.benchmarks.bfcl`), followed by stand-ins for imports the jail lacks (mpmath, for
MathAPI), the entry's API sources and data, and one subclass of :class:`BfclTaskBase` holding
them. So it runs under Debian's Python 3.11 with the standard
library and ``spade.envs`` only; the host imports it only to test the checker.

What it reproduces of bfcl-eval (``eval_checker/multi_turn_eval``):

- instances: one per involved API class, ``_load_scenario`` on a deep copy of the entry's
  ``initial_config`` (stateless classes skip it), as ``execute_multi_turn_func_call`` does;
  the model's and the ground truth's instances live on across the entry's turns;
- dispatch: every public bound method of the involved instances, by bare name (a later class
  wins a clash); results rendered as BFCL renders them; an exception becomes
  ``Error during execution: <message>``;
- the verdict of ``multi_turn_checker`` at the end of each turn whose ground truth is not
  empty: the model made at least one call in the turn; ``state_checker`` (every public
  attribute of each ground-truth instance equals the model instance's); ``response_checker``
  (the turn's ground-truth results are a sub-multiset of every result the model got so far);
- an entry fails at its first failing turn, and when a turn takes more than
  ``MAXIMUM_STEP_LIMIT`` (20) steps with calls.

Where the text interface differs from BFCL's: a turn ends with a reply that has no
``<tool_call>`` (an ``<answer>`` is the documented way), like BFCL's "no decodable call" step;
a malformed ``<tool_call>`` is answered with an error and the turn goes on.
"""

import copy
import json
from typing import Any, ClassVar

from spade.envs import ToolCallError, ToolUseEnv, parse_tool_call, tool_call_bodies

MAXIMUM_STEP_LIMIT = 20  # bfcl_eval.constants.default_prompts: steps with calls per turn
# execute_multi_turn_func_call refuses these names before it evaluates a call.
BLOCKED_CALLS = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")
# The results one reply shows are cut to this many characters in all, so a reply stays far
# below the jail's 1 MB message limit (the largest ground-truth result is ~32k characters, in
# long_context); the checks always see the whole results.
MAX_SHOWN_CHARS = 300_000
_MISSING = object()


def render_result(result: Any) -> str:
    """A call's result as BFCL records it: str as is, dict as JSON (else str), anything else str."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):  # e.g. an object inside: BFCL falls back to str()
            return str(result)
    return str(result)


def load_api_classes(
    code: dict[str, Any], provided: dict[str, Any], module_name: str
) -> dict[str, type]:
    """Each API module run in a namespace of its own (they all define ``DEFAULT_STATE``, and
    one's ``datetime`` module is another's ``datetime`` class); ``provided`` stands in for the
    imports the host removed. The namespace takes the caller's builtins and module name, so
    in the jail the import guard checks the API sources' own imports like the design's."""
    classes = {}
    for class_name, compiled in code.items():
        namespace: dict[str, Any] = {"__name__": module_name, **provided}
        exec(compiled, namespace)
        classes[class_name] = namespace[class_name]
    return classes


def make_instances(
    classes: dict[str, type],
    involved: list[str],
    initial_config: dict[str, Any],
    stateless: list[str],
    long_context: bool,
) -> dict[str, Any]:
    """Fresh instances of the involved classes, loaded as BFCL loads them."""
    instances: dict[str, Any] = {}
    for class_name in involved:
        instance = classes[class_name]()
        if class_name not in stateless:
            config = copy.deepcopy(initial_config.get(class_name, {}))
            instance._load_scenario(config, long_context=long_context)
        instances[class_name] = instance
    return instances


def method_table(instances: dict[str, Any]) -> dict[str, Any]:
    """Public bound methods by name (``inspect.ismethod`` in BFCL; inspect is not importable)."""
    table = {}
    for instance in instances.values():  # involved order: a later class wins, as in BFCL
        for name in dir(instance):
            if name.startswith("_"):
                continue
            value = getattr(instance, name)
            if type(value).__name__ == "method":
                table[name] = value
    return table


def execute_call(table: dict[str, Any], name: str, arguments: dict[str, Any]) -> str:
    """One call, rendered as BFCL's ``execute_multi_turn_func_call`` renders its outcome."""
    if name in BLOCKED_CALLS:
        return f"Error during execution: Function call {name} is not allowed."
    method = table.get(name)
    if method is None:  # BFCL evaluates the bare name: a NameError
        return f"Error during execution: name {name!r} is not defined"
    try:
        result = method(**arguments)
    except Exception as exc:  # wrong arguments break an API call the way BFCL records it
        return f"Error during execution: {exc}"
    return render_result(result)


def state_mismatch(
    model_instances: dict[str, Any], ground_truth_instances: dict[str, Any]
) -> tuple[str, list[str]] | None:
    """``state_checker``: the first class whose public attributes differ, and which ones."""
    for class_name, expected in ground_truth_instances.items():
        actual = model_instances[class_name]
        differing = [
            attr
            for attr in vars(expected)
            if not attr.startswith("_")
            and getattr(actual, attr, _MISSING) != getattr(expected, attr)
        ]
        if differing:
            return class_name, differing
    return None


def missing_results(model_results: list[str], expected_results: list[str]) -> list[str]:
    """``response_checker``: expected results not found among the model's (with multiplicity,
    in any order); the model's are every result it got so far, earlier turns included."""
    pool = list(model_results)
    missing = []
    for item in expected_results:
        try:
            pool.remove(item)
        except ValueError:
            missing.append(item)
    return missing


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def gold_replies(ground_truth: list[list[Any]]) -> list[str]:
    """A perfect agent's replies: per turn, one reply with all its ground-truth calls (run in
    order; one reply per call would break BFCL's step limit in two long-context entries with
    over 20 calls in a turn), then ``<answer>done</answer>``."""
    replies = []
    for turn in ground_truth:
        if turn:
            replies.append("\n".join(tool_call_text(name, args) for name, args in turn))
        replies.append("<answer>done</answer>")
    return replies


class BfclTaskBase(ToolUseEnv):
    """One BFCL multi-turn entry; the generated task class sets the class attributes.

    ``entry`` holds: ``header``, ``turns`` (the user's text per turn), ``ground_truth`` (per
    turn, ``[name, arguments]`` calls), ``involved_classes``, ``initial_config``,
    ``stateless_classes``, ``long_context`` and ``tools`` (the schemas offered at the start).
    """

    entry: ClassVar[dict[str, Any]] = {}
    api_sources: ClassVar[dict[str, str]] = {}
    # Names the host took out of the API sources' imports, and what makes a fresh stand-in.
    stand_ins: ClassVar[dict[str, Any]] = {}
    long_context_source = ""
    max_turns_default = 40

    def __init__(self, max_turns: int | None = None, **kwargs: Any) -> None:
        turns = self.max_turns_default if max_turns is None else max_turns
        super().__init__(max_turns=turns, **kwargs)
        self.code = {
            name: compile(source, f"<bfcl {name}>", "exec", dont_inherit=True)
            for name, source in self.api_sources.items()
        }
        self.long_context_code = compile(
            self.long_context_source, "<bfcl long_context>", "exec", dont_inherit=True
        )

    def tools(self) -> list[dict[str, Any]]:
        return list(self.entry["tools"])

    def setup(self) -> str:
        # Fresh module namespaces every episode: some API methods mutate module-level data.
        provided: dict[str, Any] = {"__name__": __name__}
        exec(self.long_context_code, provided)
        provided.update({name: make() for name, make in self.stand_ins.items()})
        classes = load_api_classes(self.code, provided, __name__)
        entry = self.entry
        args = (
            entry["involved_classes"],
            entry["initial_config"],
            entry["stateless_classes"],
            entry["long_context"],
        )
        self.model_instances = make_instances(classes, *args)
        self.truth_instances = make_instances(classes, *args)
        self.model_table = method_table(self.model_instances)
        self.truth_table = method_table(self.truth_instances)
        self.model_results: list[str] = []
        self.turn_index = 0
        self.turn_calls = 0
        self.turn_steps = 0
        return (
            entry["header"] + "\nCarry out each request with the tools. When a request is "
            "done, reply <answer>done</answer> (a reply without a tool call ends the request) "
            "to get the next one.\n\n" + self.turn_text(0)
        )

    def turn_text(self, index: int) -> str:
        turns = self.entry["turns"]
        return f"Request {index + 1} of {len(turns)}:\n{turns[index]}"

    def act(self, action: str) -> tuple[str, float, bool]:
        bodies = tool_call_bodies(action)
        if not bodies:
            return self.finish_turn()
        parts = []
        called = 0
        budget = MAX_SHOWN_CHARS
        for body in bodies:
            try:
                name, arguments = parse_tool_call(body)
            except ToolCallError as exc:  # malformed call: tell the agent, keep the turn going
                parts.append(f"<tool_response>\nError: {exc}\n</tool_response>")
                continue
            result = execute_call(self.model_table, name, arguments)
            self.model_results.append(result)
            called += 1
            shown = result if len(result) <= budget else result[:budget] + " [cut]"
            budget = max(0, budget - len(result))
            parts.append(f"<tool_response>\n{shown}\n</tool_response>")
        self.turn_calls += called
        self.turn_steps += 1 if called else 0
        observation = "\n".join(parts)
        if self.turn_steps > MAXIMUM_STEP_LIMIT:  # BFCL force-quits the entry: it fails
            limit = f"more than {MAXIMUM_STEP_LIMIT} steps in one request"
            return observation + f"\n\nStopped: {limit}. The task is over.", 0.0, True
        return observation, 0.0, False

    def finish_turn(self) -> tuple[str, float, bool]:
        index = self.turn_index
        expected = self.entry["ground_truth"][index]
        truth_results = [execute_call(self.truth_table, n, dict(a)) for n, a in expected]
        failure = self.turn_failure(expected, truth_results)
        self.turn_index += 1
        self.turn_calls = self.turn_steps = 0
        total = len(self.entry["turns"])
        if failure is not None:
            return (
                f"Request {index + 1} was not carried out: {failure}. The task is over.",
                0.0,
                True,
            )
        if self.turn_index == total:
            return f"All {total} requests were carried out.", 1.0, True
        return self.turn_text(self.turn_index), 0.0, False

    def turn_failure(self, expected: list[Any], truth_results: list[str]) -> str | None:
        """Why the turn fails BFCL's checks, or None. A turn without ground truth (the model
        should ask, or lacks a function) is not checked; its calls still count later."""
        if not expected:
            return None
        if self.turn_calls == 0:
            return "no function was called"
        mismatch = state_mismatch(self.model_instances, self.truth_instances)
        if mismatch is not None:
            class_name, attrs = mismatch
            return f"the state of {class_name} differs from the expected one ({', '.join(attrs)})"
        missing = missing_results(self.model_results, truth_results)
        if missing:
            return f"{len(missing)} expected call result(s) never came back"
        return None

    def check_answer(self, answer: str) -> float:  # act() ends turns itself
        raise NotImplementedError

    def solution(self) -> list[str]:
        return gold_replies(self.entry["ground_truth"])
