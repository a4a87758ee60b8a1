import ast

import pytest

from spade.records import Failure, FailureKind
from spade.sandbox.policy import ImportPolicy, load_policy
from spade.verify.static import (
    import_violations,
    module_table,
    name_violations,
    parse_source,
    parsed_share,
)

POLICY = ImportPolicy()


def _tree(code: str) -> ast.Module:
    tree = parse_source(code, 100_000)
    assert isinstance(tree, ast.Module)
    return tree


def test_parse_failures_are_syntax_with_reasons():
    for code in ("def (:", "x = 1\x00"):
        result = parse_source(code, 1000)
        assert isinstance(result, Failure) and result.kind is FailureKind.SYNTAX
    too_big = parse_source("x = 1\n" * 100, 50)
    assert isinstance(too_big, Failure) and "limit" in too_big.reason


WHOLE = "import re\n\nX = 1\n\n\nclass AEnv:\n    def f(self):\n        return X\n"


def test_parsed_share_is_the_share_of_lines_in_the_longest_parsing_prefix():
    assert parsed_share(WHOLE) == 1.0 and parsed_share("") == 0.0
    assert parsed_share("def (:\n    pass\n") == 0.0  # the first statement is broken
    cut = WHOLE + "\ndef g(:\n"  # a whole class, then a statement cut in the middle
    assert parsed_share(cut) == 9 / 10  # up to the line where the broken statement starts
    mid_class = WHOLE.replace("return X", "return (X")  # broken inside the class
    assert parsed_share(mid_class) == 5 / 8  # the lines before the class parse
    assert parsed_share("x = 1\x00\n") == 0.0  # what ast refuses is not parsed


@pytest.mark.parametrize(
    ("code", "violations"),
    [
        ("import os", ["os (line 1)"]),
        ("import os.path", ["os.path (line 1)"]),
        ("from os import path", ["os (line 1)", "os.path (line 1)"]),
        ("import socket as s", ["socket (line 1)"]),
        ("from . import x", [". (line 1): relative imports are not allowed"]),
        ("from subprocess import run", ["subprocess (line 1)", "subprocess.run (line 1)"]),
        ("import ctypes", ["ctypes (line 1)"]),
    ],
)
def test_disallowed_imports(code, violations):
    """Each disallowed import is named (module and line), and nothing else is."""
    assert import_violations(_tree(code), POLICY) == violations


@pytest.mark.parametrize(
    "code",
    [
        "import math, random",
        "from collections import Counter",
        "from spade.envs import TextEnv, ToolUseEnv",
        "import collections.abc",
        "from __future__ import annotations",
    ],
)
def test_allowed_imports(code):
    assert import_violations(_tree(code), POLICY) == []


@pytest.mark.parametrize(
    ("code", "violations"),
    [
        ("open('/etc/shadow')", ["name 'open' (line 1)"]),
        ("eval('1')", ["name 'eval' (line 1)"]),
        ("__import__('os')", ["name '__import__' (line 1)"]),
        (
            "().__class__.__bases__[0].__subclasses__()",
            ["attribute '__bases__' (line 1)", "attribute '__subclasses__' (line 1)"],
        ),
        ("f.__globals__", ["attribute '__globals__' (line 1)"]),
        ("getattr(x, '__globals__')", ["getattr(..., '__globals__') (line 1)"]),
        ("g = globals()", ["name 'globals' (line 1)"]),
    ],
)
def test_forbidden_names(code, violations):
    """Each forbidden name, attribute or getattr string is named (with its line), and only it."""
    assert name_violations(_tree(code), POLICY) == violations


def test_ordinary_code_has_no_name_violations():
    code = "class AEnv:\n    def f(self):\n        self._x = getattr(self, 'tool_' + 'a')\n        return type(self).__name__\n"
    assert name_violations(_tree(code), POLICY) == []


# -- modules reached through allowed modules (needs the jail's interpreter for the table) ------


@pytest.fixture(scope="module")
def table():
    return module_table(load_policy())


@pytest.mark.sandbox
def test_module_table_comes_from_the_jails_interpreter(table):
    assert table["random"].attrs["_os"] == "os"
    assert table["typing"].attrs["sys"] == "sys"
    assert table["collections"].attrs["_sys"] == "sys"
    assert table["dataclasses"].attrs["builtins"] == "builtins"
    assert table["spade.envs.base"].attrs["inspect"] == "inspect"  # our runtime, as jailed
    assert "sys" not in table["typing"].star  # typing.__all__ leaves it out
    assert "os" not in table and "sys" not in table  # only allowed modules are walked


@pytest.mark.sandbox
@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("from random import _os", "random._os (line 1): private to its module"),
        ("from typing import sys as s\ns.modules", "typing.sys (line 1): the module 'sys'"),
        ("import collections\ncollections._sys", "collections._sys (line 2): private"),
        ("import random\nrandom._os.system('id')", "random._os (line 2): private"),
        ("import random as r\nr._inst", "random._inst (line 2): private"),
        ("import typing\ntyping.sys.modules", "typing.sys (line 2): the module 'sys'"),
        ("import dataclasses\ndataclasses.builtins.open", "dataclasses.builtins (line 2)"),
        ("import typing\ngetattr(typing, 'sys')", "typing.sys (line 2): the module 'sys'"),
        ("from random import __builtins__ as b", "random.__builtins__ (line 1): private"),
        ("from spade.envs.base import inspect", "spade.envs.base.inspect (line 1): the module"),
        ("from spade.envs import base\nbase.inspect", "spade.envs.base.inspect (line 2)"),
        ("import spade.envs\nspade.envs.base.inspect", "spade.envs.base.inspect (line 2)"),
        ("import calendar\ncalendar.datetime.sys", "datetime.sys (line 2): the module 'sys'"),
        ("import collections.abc as c\nc._x", "collections.abc._x (line 2): private"),
        ("from spade.envs.base import *", "spade.envs.base.inspect (line 1): the module"),
        ("from calendar import *", None),  # calendar.__all__ holds no module: allowed
        ("import json\njson.codecs", "json.codecs (line 2): the module 'codecs'"),
    ],
)
def test_modules_reached_through_allowed_ones_are_violations(table, code, says):
    found = import_violations(_tree(code), POLICY, table)
    if says is None:
        assert found == []
    else:
        assert any(says in v for v in found), found
        assert import_violations(_tree(code), POLICY) == []  # the import statements alone pass


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "code",
    [
        "import collections.abc\nisinstance(1, collections.abc.Mapping)",
        "from collections import abc, Counter\nabc.Sequence",
        "from typing import *\nfrom math import *",
        "import math\nmath.__name__, math.__doc__",
        "import json\njson.decoder.JSONDecodeError",
        "from spade.envs import base, TextEnv\nbase.TextEnv",
        "import re, random\nclass AEnv:\n    def f(self):\n        return self._x, random.Random",
        "import datetime\ndatetime.datetime.strptime('2020', '%Y')",
    ],
)
def test_ordinary_module_use_is_no_violation(table, code):
    assert import_violations(_tree(code), POLICY, table) == []


@pytest.mark.sandbox
def test_an_open_allow_list_checks_no_attributes(table):
    everything = ImportPolicy(allow=["*"])
    assert import_violations(_tree("import random\nrandom._os"), everything, table) == []


@pytest.mark.sandbox
@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("random._os", "random._os (line 1): private"),  # the prelude binds random, unimported
        ("x = typing.sys", "typing.sys (line 1): the module 'sys'"),
        ("def f(collections):\n    return collections._sys", None),  # the design's own name
        ("for random in []:\n    random._os", None),
        ("re._x", "re._x (line 1): private"),
    ],
)
def test_prelude_modules_count_as_imported(table, code, says):
    found = import_violations(_tree(code), POLICY, table)
    assert (found == []) if says is None else any(says in v for v in found), found


@pytest.mark.sandbox
def test_a_policy_without_the_module_binds_no_prelude_name(table):
    narrow = ImportPolicy(allow=[a for a in POLICY.allow if a != "random"])
    assert import_violations(_tree("random._os"), narrow, table) == []  # a NameError, not a reach
