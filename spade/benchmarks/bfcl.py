"""BFCL v4 multi-turn (``bfcl-eval``) as held-out tool-use environments.

Each entry becomes one environment whose source is self-contained for the jail: the runtime
(:mod:`spade.benchmarks.bfcl_runtime`, shipped as text), the source of the entry's simulated API
classes (GorillaFileSystem, MathAPI, MessageAPI, TwitterAPI, TicketAPI, TradingBot, TravelAPI,
VehicleControlAPI: pure standard-library Python; see :mod:`spade.benchmarks.bfcl_data` for the
imports that change), the entry's ``initial_config``, user turns, tool schemas and its
ground-truth calls, parsed here into JSON. The API methods are the tools; the agent's calls run
on its instances inside the jail, and a reply without a tool call ends the current user turn:
the environment then runs the turn's ground-truth calls on its own instances, applies BFCL's
state and response checks, and shows the next turn. Reward 1.0 when every turn passes, 0.0 at
the first that fails (BFCL marks the entry wrong); the reward is the item's score.

Categories (``subsets``; default ``multi_turn_base``):

- ``multi_turn_base``;
- ``multi_turn_miss_param``: some turns lack information; their ground truth is empty, so
  nothing is checked there (the agent should ask);
- ``multi_turn_miss_func``: functions are withheld from the tool list until a later turn
  announces them with their schemas in its text, as BFCL's prompting mode does (the tool list
  the rollout sends is fixed for an episode);
- ``multi_turn_long_context``: the APIs load BFCL's long-context extension data.

The short names ``base``, ``miss_func``, ``miss_param`` and ``long_context`` work too.

``tasks(size, seed, subsets)``: ``size`` entries drawn with ``random.Random(seed).sample`` from
the named categories together, returned in benchmark order.
"""

from __future__ import annotations

import json
import random
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
from bfcl_eval.constants.executable_backend_config import STATELESS_CLASSES

from spade.benchmarks import bfcl_mpmath, bfcl_runtime
from spade.benchmarks.base import HeldoutTask, episode_score, task_header
from spade.benchmarks.bfcl_data import (
    CATEGORIES,
    Call,
    api_source,
    function_docs,
    load_entries,
    long_context_source,
    method_params,
    parse_call,
    tool_schema,
)
from spade.errors import ConfigValueError

if TYPE_CHECKING:
    from spade.records import Trajectory

NAME = "bfcl_multi_turn"
DEFAULT_SUBSETS = ("multi_turn_base",)
# Replies per episode. The gold play needs two per user turn (its calls, then the answer): 16 at
# most (8 turns, miss_func/miss_param). The rest is room for a real agent to look around (BFCL
# allows 20 steps per turn) without letting a stuck one run on.
DEFAULT_MAX_TURNS = 40


def category_name(name: str) -> str:
    """``multi_turn_<x>`` for ``<x>`` or the full name; ValueError naming the valid ones."""
    full = name if name.startswith("multi_turn_") else f"multi_turn_{name}"
    if full not in CATEGORIES:
        raise ConfigValueError(
            f"unknown BFCL multi-turn category {name!r}; valid: {', '.join(CATEGORIES)}"
        )
    return full


def _method_params(involved: list[str]) -> dict[str, tuple[str, ...]]:
    params: dict[str, tuple[str, ...]] = {}
    for class_name in involved:  # a later class wins a name clash, as in BFCL's dispatch
        params.update(method_params(class_name))
    return params


def ground_truth(entry: dict[str, Any]) -> list[list[Call]]:
    """The entry's ground truth per turn as ``(name, arguments)`` calls."""
    params = _method_params(entry["involved_classes"])
    return [[parse_call(call, params) for call in turn] for turn in entry["ground_truth"]]


def _tools(entry: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    """The schemas offered from the start, and per turn the withheld ones it announces.

    Like BFCL's ``populate_test_cases_with_predefined_functions``: the involved classes' docs
    in order, minus each ``missed_function`` (its first doc of that name).
    """
    docs = [doc for c in entry["involved_classes"] for doc in function_docs(c)]
    held: dict[int, list[dict[str, Any]]] = {}
    for turn, names in entry.get("missed_function", {}).items():
        for name in names:
            i = next(i for i, doc in enumerate(docs) if doc["name"] == name)
            held.setdefault(int(turn), []).append(tool_schema(docs.pop(i)))
    return [tool_schema(doc) for doc in docs], held


def _turn_texts(entry: dict[str, Any], held: dict[int, list[dict[str, Any]]]) -> list[str]:
    texts = []
    for i, messages in enumerate(entry["question"]):
        if i in held:  # BFCL's prompting-mode message for a turn that adds functions
            functions = json.dumps([t["function"] for t in held[i]], ensure_ascii=False)
            texts.append(functions + "\n" + DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC)
            continue
        texts.append(
            "\n".join(
                m["content"] if m["role"] == "user" else f"{m['role']}: {m['content']}"
                for m in messages
            )
        )
    return texts


# Imports the jail cannot serve (see bfcl_data._import_stand_in): the module shipped as text
# into tasks whose API sources need it, and the class of it that stands in.
_STAND_INS = {"mpmath": (bfcl_mpmath, "MpmathShim")}


@cache
def _module_source(module: Any) -> str:
    return Path(module.__file__).read_text(encoding="utf-8")


def render_code(
    data: dict[str, Any], sources: dict[str, str], long_context: str, stand_ins: list[str]
) -> str:
    """The environment source: runtime, stand-ins, API sources, long-context data, entry and
    the task class."""
    classes = ", ".join(data["involved_classes"])
    shims = [_STAND_INS[name] for name in stand_ins]
    makers = ", ".join(
        f"{name!r}: {shim}" for name, (_, shim) in zip(stand_ins, shims, strict=True)
    )
    return "\n".join(
        [
            f"# BFCL v4 {data['category']} entry {data['id']} (bfcl-eval {version('bfcl-eval')})"
            " as a SPADE tool-use environment,",
            "# generated by spade.benchmarks.bfcl: the runtime (spade/benchmarks/bfcl_runtime.py),"
            " stand-ins",
            "# for imports the jail lacks, the entry's simulated API sources, long-context data",
            "# (if any), the entry's data and the task class.",
            _module_source(bfcl_runtime),
            *[_module_source(module) for module, _ in shims],
            "API_SOURCES = {",
            *[f"    {name!r}: {source!r}," for name, source in sources.items()],
            "}",
            f"LONG_CONTEXT_SOURCE = {long_context!r}",
            f"ENTRY = json.loads({json.dumps(data, ensure_ascii=False)!r})",
            "",
            "",
            "class BfclMultiTurnEnv(BfclTaskBase):",
            f'    """BFCL {data["id"]}: {len(data["turns"])} user turns using {classes}."""',
            "",
            "    entry = ENTRY",
            "    api_sources = API_SOURCES",
            "    long_context_source = LONG_CONTEXT_SOURCE",
            f"    stand_ins = {{{makers}}}",
            f"    max_turns_default = {DEFAULT_MAX_TURNS}",
            "",
        ]
    )


def entry_task(entry: dict[str, Any], category: str) -> HeldoutTask:
    """One entry as a held-out task (``entry`` is trusted bfcl-eval data)."""
    involved = list(entry["involved_classes"])
    long_context = "long_context" in category  # BFCL: "long_context" (or "composite") in id
    sources: dict[str, str] = {}
    long_names: set[str] = set()
    stand_ins: list[str] = []
    for class_name in involved:
        sources[class_name], names, needs = api_source(class_name)
        long_names.update(names)
        stand_ins += [n for n in needs if n not in stand_ins]
    truth = ground_truth(entry)
    tools, held = _tools(entry)
    data = {
        "id": entry["id"],
        "category": category,
        "header": task_header(NAME, entry["id"]),
        "turns": _turn_texts(entry, held),
        "ground_truth": truth,
        "involved_classes": involved,
        "initial_config": entry.get("initial_config", {}),
        "stateless_classes": [c for c in involved if c in STATELESS_CLASSES],
        "long_context": long_context,
        "tools": tools,
    }
    extension = long_context_source(tuple(sorted(long_names))) if long_context else ""
    return HeldoutTask(
        suite=NAME,
        task_id=entry["id"],
        code=render_code(data, sources, extension, stand_ins),
        tool_use=True,
        gold=tuple(bfcl_runtime.gold_replies(truth)),
        meta={"category": category, "involved_classes": involved, "turns": len(truth)},
    )


class BfclMultiTurnSuite:
    """The ``bfcl_multi_turn`` held-out suite (see the module docstring)."""

    name = NAME
    default_max_turns = DEFAULT_MAX_TURNS

    def tasks(self, size: int, seed: int, subsets: list[str]) -> list[HeldoutTask]:
        categories = list(dict.fromkeys(category_name(s) for s in subsets or DEFAULT_SUBSETS))
        pool = [(c, e) for c in categories for e in load_entries(c)]
        picked = sorted(random.Random(seed).sample(range(len(pool)), min(size, len(pool))))
        return [entry_task(pool[i][1], pool[i][0]) for i in picked]

    def score(self, task: HeldoutTask, trajectory: Trajectory) -> float:
        return episode_score(trajectory)


SUITE = BfclMultiTurnSuite()
