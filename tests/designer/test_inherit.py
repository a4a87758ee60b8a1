"""An edit keeps the parent's module-level definitions it uses and does not write."""

import ast
from pathlib import Path

from spade.designer.inherit import inherit_missing

EXAMPLES = Path(__file__).parents[2] / "spade" / "envs" / "examples"

PARENT = '''"""A parent."""

from __future__ import annotations

import re

from spade.envs import TextEnv

_QUERY = re.compile(r"^f\\((\\d+)\\)$")
_UNUSED = 3


def _helper(x):
    return _QUERY.match(x)


class _Item:
    size = 2


class ParentEnv(TextEnv):
    def setup(self) -> str:
        return "go"
'''


def _class_only(body: str) -> str:
    return f"from spade.envs import TextEnv\n\n\nclass ChildEnv(TextEnv):\n{body}"


def test_a_constant_the_edit_uses_comes_with_what_it_needs_and_nothing_else():
    code = _class_only(
        "    def play(self, move):\n        return str(_QUERY.match(move)), 0.0, True\n"
    )
    out, names = inherit_missing(code, PARENT, "env-parent")
    assert names == ["re", "_QUERY"]
    tree = ast.parse(out)
    bound = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets]
    assert bound == ["_QUERY"] and "_UNUSED" not in out and "_helper" not in out
    assert out.index("import re") < out.index("_QUERY =") < out.index("class ChildEnv")
    assert "# carried over from env-parent, whose class this edits: re, _QUERY" in out
    # after the edit's own imports, so the carried lines can use them
    assert out.index("from spade.envs import TextEnv") < out.index("# carried over")


def test_helpers_and_helper_classes_come_transitively_the_env_class_and_future_never():
    code = _class_only(
        "    def play(self, move):\n"
        "        return str(_helper(move)) + str(_Item.size), 0.0, ParentEnv is None\n"
    )
    out, names = inherit_missing(code, PARENT)
    assert names == ["re", "_QUERY", "_helper", "_Item"]
    assert "class ParentEnv" not in out and "__future__" not in out
    compile(out, "<design>", "exec")  # parses; it is never run outside the jail


def test_nothing_missing_or_nothing_to_parse_leaves_the_code_as_it_is():
    whole = (EXAMPLES / "polynomial_probe.py").read_text(encoding="utf-8")
    assert inherit_missing(whole, whole) == (whole, [])
    broken = "class X(TextEnv:\n    _QUERY\n"
    assert inherit_missing(broken, PARENT) == (broken, [])
    assert inherit_missing(_class_only("    x = _QUERY\n"), "def (:") == (
        _class_only("    x = _QUERY\n"),
        [],
    )
    # a name the edit binds itself, or a builtin, is never taken from the parent
    own = "_QUERY = 1\n" + _class_only("    x = _QUERY + len('a')\n")
    assert inherit_missing(own, PARENT) == (own, [])


def test_the_bundled_parent_whose_constants_the_small_model_drops():
    """The 0.5B coder's usual edit of polynomial_probe: the class alone."""
    parent = (EXAMPLES / "polynomial_probe.py").read_text(encoding="utf-8")
    cls = parent[parent.index("class PolynomialProbeEnv") :]
    out, names = inherit_missing('"""An edit."""\n' + cls, parent, "polynomial_probe")
    assert names == ["re", "TextEnv", "_QUERY", "_INT"]  # the import too: a whole module
    assert out.startswith('"""An edit."""\n# carried over from polynomial_probe')
    compile(out, "<design>", "exec")
