"""The prelude: names a design finds bound before its code runs, through the import guard."""

import pytest

from spade.envs.prelude import PRELUDE_MODULES, PRELUDE_NAMES, describe_prelude, prelude_bindings
from spade.records import FailureKind
from spade.sandbox import EnvFailure, JailedSession
from spade.sandbox.policy import DEFAULT_ALLOWED_MODULES
from tests.sandbox.attack_kit import with_changes

# Uses prelude names only: no import statement at all.
NO_IMPORTS = """
@dataclass
class Box:
    items: List[int] = field(default_factory=list)


class NoImportsEnv(TextEnv):
    def setup(self):
        pick: Callable[[int], Optional[int]] = lambda n: self.rng.randint(1, n)
        self.box = Box([pick(9)])
        words = [
            str(math.isqrt(16)),
            json.dumps({"a": 1}),
            str(isinstance(random.Random(1), random.Random)),
            str(len(string.ascii_lowercase)),
            str(collections.Counter("aab")["a"]),
            str(issubclass(ToolUseEnv, TextEnv) and issubclass(ToolError, Exception)),
        ]
        return " ".join(words)

    def play(self, move):
        if move == "private":
            return str(random._os), 0.0, False
        if move == "module":
            return str(typing.sys), 0.0, False
        return "ok", 1.0, True

    def solution(self):
        return ["\\\\boxed{x}"]
"""


@pytest.mark.sandbox
def test_a_design_without_imports_finds_the_contract_names(policy):
    with JailedSession(NO_IMPORTS, policy=policy) as s:
        obs, _ = s.reset(1)
        assert s.step("\\boxed{x}")[1:3] == (1.0, True)
    assert obs == '4 {"a": 1} True 26 2 True'


@pytest.mark.sandbox
@pytest.mark.parametrize(("move", "name"), [("private", "random._os"), ("module", "typing.sys")])
def test_prelude_modules_are_guarded_views(move, name, policy):
    with JailedSession(NO_IMPORTS, policy=policy) as s:
        s.reset(1)
        with pytest.raises(EnvFailure) as exc:
            s.step("\\boxed{" + move + "}")
    assert exc.value.failure.kind is FailureKind.IMPORT_DENIED
    assert exc.value.failure.reason == f"imports outside the allow-list: {name}"


OWN_NAMES_WIN = """
from collections.abc import Callable
import random as rnd

from spade.envs import TextEnv

field = "mine"


class OwnEnv(TextEnv):
    def setup(self):
        return " ".join([Callable.__module__, field, str(rnd is random), str(Optional)])

    def play(self, move):
        return "ok", 1.0, True

    def solution(self):
        return ["\\\\boxed{x}"]
"""


@pytest.mark.sandbox
def test_the_designs_own_imports_and_definitions_win(policy):
    with JailedSession(OWN_NAMES_WIN, policy=policy) as s:
        obs, _ = s.reset(1)
    assert obs == "collections.abc mine True typing.Optional"


@pytest.mark.sandbox
def test_a_policy_without_a_module_does_not_bind_it(policy):
    allow = [a for a in DEFAULT_ALLOWED_MODULES if a != "re"]
    without_re = with_changes(policy, allow=allow)
    code = NO_IMPORTS.replace('json.dumps({"a": 1})', "re.escape('.')")
    with pytest.raises(EnvFailure) as exc, JailedSession(code, policy=without_re) as s:
        s.reset(1)
    assert exc.value.failure.kind is FailureKind.CRASH
    assert exc.value.failure.reason == "NameError: name 're' is not defined"


def test_bindings_follow_the_allow_list():
    everything = prelude_bindings(DEFAULT_ALLOWED_MODULES)
    assert set(PRELUDE_MODULES) <= set(everything)  # the checked-in policy binds it all
    assert everything["random"] == ("random", None)
    assert everything["TextEnv"] == ("spade.envs", "TextEnv")
    assert everything["Optional"] == ("typing", "Optional")
    assert everything["dataclass"] == ("dataclasses", "dataclass")
    narrow = prelude_bindings(["random", "spade"])  # a package allows its submodules
    assert narrow == {"random": ("random", None)} | {
        n: ("spade.envs", n) for n in PRELUDE_NAMES["spade.envs"]
    }
    assert prelude_bindings([]) == {}


def test_prelude_modules_are_top_level_and_names_do_not_clash():
    # The server binds a module with a plain import, which returns the top-level package.
    assert all("." not in m for m in PRELUDE_MODULES)
    names = [n for group in PRELUDE_NAMES.values() for n in group]
    assert len(set(names)) == len(names) and not set(names) & set(PRELUDE_MODULES)


def test_describe_prelude_is_python_that_names_everything():
    text = describe_prelude(DEFAULT_ALLOWED_MODULES)
    lines = text.splitlines()
    assert lines[0] == "import " + ", ".join(PRELUDE_MODULES)
    assert "from spade.envs import TextEnv, ToolUseEnv, ToolError" in lines
    compile(text, "prelude", "exec")  # valid import statements, never executed here
