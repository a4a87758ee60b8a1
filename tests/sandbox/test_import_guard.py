"""The jail's runtime import guard with the checked-in policy: ordinary module use works, and
routes to modules outside the allow-list that the static checks cannot see are denied.

The guard is defence in depth (the jail is the security boundary); these sessions skip the
static checks on purpose, so only the guard stands between a design and the module.
"""

import pytest

from spade.records import FailureKind
from spade.sandbox import EnvFailure, JailedSession

pytestmark = pytest.mark.sandbox

ORDINARY = """
from __future__ import annotations

import collections.abc
import copy
import datetime
import json
import random
from collections import Counter, abc
from dataclasses import dataclass, field
from enum import Enum
from math import *
from typing import *

from spade.envs import *


class Color(Enum):
    RED = 1


@dataclass
class Box:
    items: list = field(default_factory=list)


class MyRandom(random.Random):
    pass


class OrdinaryEnv(TextEnv):
    def setup(self):
        facts = [
            isinstance({}, collections.abc.Mapping),
            issubclass(list, abc.Sequence),
            Counter("aab")["a"] == 2,
            sqrt(16) == 4.0,
            datetime.datetime.strptime("2020", "%Y").year == 2020,
            json.decoder.JSONDecodeError.__name__ == "JSONDecodeError",
            json.__name__ == "json",
            copy.deepcopy(Box([1])) == Box([1]),
            Color.RED.value == 1,
            MyRandom(3).random() == random.Random(3).random(),
            extract_boxed("\\\\boxed{7}") == "7",
            get_type_hints(Box)["items"] is list,
            hasattr(random, "randint") and not hasattr(random, "no_such_name"),
        ]
        return ",".join(str(f) for f in facts)

    def play(self, move):
        return "ok", 1.0, True

    def solution(self):
        return ["\\\\boxed{x}"]
"""


def test_ordinary_use_of_allowed_modules_passes_the_guard(policy):
    with JailedSession(ORDINARY, policy=policy) as s:
        obs, _ = s.reset(1)
        assert s.step("\\boxed{x}")[1:3] == (1.0, True)
    assert obs.split(",") == ["True"] * 13


REACH = """
import random
import typing

from spade.envs import TextEnv


class ReachEnv(TextEnv):
    def setup(self):
        return "ready"

    def play(self, move):
        if move == "alias":
            t = typing
            return str(t.sys), 0.0, False
        if move == "dynamic":
            return str(getattr(random, "_" + "os")), 0.0, False
        if move == "swallowed":
            try:
                typing.sys
            except ImportError:
                return "got away with it", 0.0, False
        return "ok", 0.0, False

    def solution(self):
        return ["\\\\boxed{x}"]
"""


@pytest.mark.parametrize(
    ("move", "name"),
    [
        ("alias", "typing.sys"),  # the static check does not follow assignments
        ("dynamic", "random._os"),  # nor computed attribute names
        ("swallowed", "typing.sys"),  # catching the denial does not undo it
    ],
)
def test_routes_the_static_check_cannot_see_are_denied(move: str, name: str, policy):
    with JailedSession(REACH, policy=policy) as s:
        s.reset(1)
        assert s.step("\\boxed{ok}")[0] == "ok"
        with pytest.raises(EnvFailure) as exc:
            s.step("\\boxed{" + move + "}")
        alive = s.alive
    failure = exc.value.failure
    assert failure.kind is FailureKind.IMPORT_DENIED and exc.value.fatal and not alive
    assert failure.reason == f"imports outside the allow-list: {name}"


def test_a_star_import_that_brings_a_disallowed_module_is_denied(policy):
    # spade.envs.base has no __all__, so * takes its public names, ``inspect`` among them.
    code = ORDINARY.replace("from spade.envs import *", "from spade.envs.base import *")
    session = JailedSession(code, policy=policy)
    try:
        with pytest.raises(EnvFailure) as exc:
            session.start()
    finally:
        session.close()
    assert exc.value.failure.kind is FailureKind.IMPORT_DENIED and exc.value.fatal
    assert exc.value.failure.reason == "imports outside the allow-list: spade.envs.base.inspect"
