import ast

import pytest

from spade.sandbox.failures import Failure, FailureKind
from spade.sandbox.policy import ImportPolicy
from spade.verify.static import import_violations, name_violations, parse_source

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


@pytest.mark.parametrize(
    "code",
    [
        "import os",
        "import os.path",
        "from os import path",
        "import socket as s",
        "from . import x",
        "from subprocess import run",
        "import ctypes",
    ],
)
def test_disallowed_imports(code):
    assert import_violations(_tree(code), POLICY)


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
    "code",
    [
        "open('/etc/shadow')",
        "eval('1')",
        "__import__('os')",
        "().__class__.__bases__[0].__subclasses__()",
        "import random\nrandom._os.system('id')",
        "f.__globals__",
        "getattr(x, '__globals__')",
        "g = globals()",
    ],
)
def test_forbidden_names(code):
    assert name_violations(_tree(code), POLICY)


def test_ordinary_code_has_no_name_violations():
    code = "class AEnv:\n    def f(self):\n        self._x = getattr(self, 'tool_' + 'a')\n        return type(self).__name__\n"
    assert name_violations(_tree(code), POLICY) == []
