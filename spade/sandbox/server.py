"""The in-jail session server: loads one environment and serves it over JSON lines.

Runs inside nsjail under Debian's Python 3.11 with ``-s -S -P``; standard library only. It is
never imported by the host. Protocol: one JSON request per line on stdin, one JSON reply per
line on a private copy of the original stdout; fd 1 and ``sys.stdout`` are pointed at stderr,
so whatever the environment prints lands in the captured log, never on the channel.

Every request carries an ``id`` that its reply echoes. Requests:
``{"op": "load", "path", "allow", "kwargs"}`` first, then ``reset`` (seed, options,
hint), ``step`` (action), ``solution``, ``tools``, ``close``. Replies:
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {type, errno, message, traceback}}``,
plus ``"denied": [...]`` whenever the environment tried imports outside the allow-list
(or reached a module outside it through an allowed one; see :func:`_make_guard`).
Before the design's code runs, its module already holds the prelude (:func:`_bind_prelude`),
and the reference implementation's injections that its source names. An environment not built
on this project's bases is served through :class:`spade.envs.reference.ReferenceAdapter`, so
the reference's pools play unchanged. ``SPADE_SEARCH_PATH`` (the policy's environment) names
directories appended to ``sys.path`` after the standard library: the interpreter runs with
``-S``, so Debian's ``dist-packages`` (numpy) is found only through it.
"""

import ast
import builtins
import json
import os
import sys
import traceback
import types
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the spade.envs runtime
sys.path += [p for p in os.environ.get("SPADE_SEARCH_PATH", "").split(os.pathsep) if p]
_CHANNEL = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
os.dup2(2, 1)
sys.stdout = sys.stderr
_RESERVE = [bytearray(1 << 20)]  # freed on MemoryError so the reply can still be built
_DENIED: list = []
_MODULE = "design"
_PID = os.getpid()  # a forked copy of the server must never touch the channel

from spade.envs import reference  # noqa: E402  (found through the path set above)
from spade.envs.actions import box_moves  # noqa: E402
from spade.envs.base import TextEnv, ToolUseEnv  # noqa: E402
from spade.envs.reference import accepts, adapt, env_tools, is_tool_use  # noqa: E402

# The reference's loader also lets a design import its base from this module name.
sys.modules.setdefault("tool_use_base_env", reference)


class ImportDeniedError(ImportError):
    """An import the sandbox policy does not allow."""


# Dunder names a design may read from an allowed module; every other name starting with "_"
# is private (``random._os``, ``collections._sys``, ``x.__builtins__``) and never handed out.
_PUBLIC_DUNDERS = frozenset({"__name__", "__doc__", "__all__", "__version__"})


def _private(name):
    return name.startswith("_") and name not in _PUBLIC_DUNDERS


def _make_guard(allow):
    """The design's ``__import__``. Defence in depth only, not a boundary: the jail
    (namespaces, seccomp, rlimits, an explicit mount list) is the only barrier. Python-level
    policy is sidestepped by introspection (``object.__subclasses__()`` reaches the os module
    and ``sys.modules``, this server's own ``json`` included), so the host trusts nothing this
    process sends (:mod:`spade.sandbox.replies`); this layer makes the easy routes fail loudly.

    Besides the module name, it checks what the design takes from a module: ``from M import
    x`` is denied when ``x`` is private or holds a module outside the allow-list (``from
    typing import sys``), and ``import M`` binds a :func:`_view` of ``M`` that applies the same
    rule to attribute access (``random._os``, ``typing.sys``)."""
    real_import = builtins.__import__
    views = {}

    def allowed(name):
        return any(a == "*" or name == a or name.startswith(a + ".") for a in allow)

    def deny(what, why="is not allowed in a design"):
        _DENIED.append(what)
        return ImportDeniedError(f"{what!r} {why}")

    def check_value(owner, name, value):
        if isinstance(value, types.ModuleType) and not allowed(value.__name__):
            raise deny(f"{owner}.{name}", f"is the module {value.__name__!r}, not allowed")
        return value

    def view(module):
        if module.__name__ not in views:
            views[module.__name__] = _view(module, check_value, deny, view)
        return views[module.__name__]

    def star_names(module):
        names = getattr(module, "__all__", None)
        if names is None:
            names = [n for n in vars(module) if not n.startswith("_")]
        return [str(n) for n in names]

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        # Only imports written in the design itself are checked; the standard library's own
        # internal imports (random importing os, say) go through untouched.
        if globals is None or globals.get("__name__") != _MODULE or "*" in allow:
            return real_import(name, globals, locals, fromlist, level)  # "*": jail-only tests
        full = name if level == 0 else "." * level + name
        if level != 0 or not allowed(name):
            raise deny(full)
        wanted = [str(sub) for sub in fromlist or ()]
        for sub in wanted:
            if sub != "*" and _private(sub):
                raise deny(f"{name}.{sub}", "is private to its module")
        module = real_import(name, globals, locals, fromlist, level)
        if not wanted:  # ``import a.b`` binds the top package ``a``
            return view(module)
        if "*" in wanted:  # star import reads the real module's names: check them all
            for sub in star_names(module):
                if _private(sub):
                    raise deny(f"{name}.{sub}", "is private to its module")
                check_value(name, sub, getattr(module, sub, None))
            return module
        for sub in wanted:
            check_value(name, sub, getattr(module, sub, None))
        return view(module)

    return guarded_import


def _view(module, check_value, deny, view):
    """A design's handle on an allowed module: its public attributes only, and none that holds
    a module outside the allow-list (submodules come back as views too). The real module lives
    only in this closure."""

    class ModuleView(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__") and name.endswith("__") and name not in _PUBLIC_DUNDERS:
                raise AttributeError(name)  # protocol probes (copy, pickle) must see "absent"
            if _private(name):
                raise deny(f"{module.__name__}.{name}", "is private to its module")
            value = check_value(module.__name__, name, getattr(module, name))
            if isinstance(value, types.ModuleType):
                value = view(value)
            setattr(self, name, value)  # cached: later reads are plain attribute reads
            return value

    return ModuleView(module.__name__, module.__doc__)


def _bind_prelude(namespace, guard, allow, tree):
    """Bind the prelude (:mod:`spade.envs.prelude`) in the design's namespace before its code
    runs, with the reference's injections among the names its source (``tree``) reads: each name is
    imported through the design's own guard, as if the design had written the import, so a
    module arrives as a guarded view and the allow-list decides what is bound. The design's
    own imports run later and win."""
    from spade.envs.prelude import design_bindings

    bindings = design_bindings(allow, tree)
    for name, (module, attr) in bindings.items():
        try:
            value = guard(module, namespace, None, (attr,) if attr else (), 0)
            namespace[name] = getattr(value, attr) if attr else value
        except (ModuleNotFoundError, AttributeError):  # not in this interpreter: not promised
            continue


def _error_payload(exc):
    return {
        "type": type(exc).__name__,
        "errno": getattr(exc, "errno", None) if isinstance(exc, OSError) else None,
        "message": str(exc)[:2000],
        "traceback": "".join(traceback.format_exception(exc))[-8000:],
    }


def _find_class(module):
    found = [
        obj
        for name, obj in vars(module).items()
        if isinstance(obj, type)
        and name.endswith("Env")
        and obj.__module__ == _MODULE
        and callable(getattr(obj, "reset", None))
        and callable(getattr(obj, "step", None))
    ]
    if not found:
        raise LookupError("no class whose name ends in 'Env' with reset() and step() methods")
    return found[-1]  # the last defined: helpers and bases come first


class Server:
    def __init__(self):
        self.env: Any = None

    def op_load(self, path, allow, kwargs=None, class_name=None):
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        tree = ast.parse(source, path)
        code = compile(tree, path, "exec")
        module = types.ModuleType(_MODULE)
        module.__file__ = path
        guard = _make_guard(list(allow))
        guarded = dict(vars(builtins))
        guarded["__import__"] = guard
        vars(module)["__builtins__"] = guarded
        sys.modules[_MODULE] = module
        _bind_prelude(vars(module), guard, allow, tree)
        exec(code, vars(module))
        cls = getattr(module, class_name) if class_name else _find_class(module)
        kwargs = dict(kwargs or {})
        if "max_turns" in kwargs and not accepts(cls, "max_turns"):
            kwargs.pop("max_turns")
        raw = cls(**kwargs)
        self.env = adapt(raw)
        hint = getattr(cls, "hint", None)
        skill = getattr(cls, "skill", None)
        return {
            "class": cls.__name__,
            "tool_use": is_tool_use(raw),
            "accepts_options": accepts(raw.reset, "options"),
            "hint": hint if isinstance(hint, str) else None,
            "skill": skill if isinstance(skill, str) else None,
            "max_turns": getattr(self.env, "max_turns", None),
        }

    def op_reset(self, seed=None, options=None, hint=None):
        options = dict(options or {})
        if accepts(self.env.reset, "options"):
            result = self.env.reset(seed=seed, options=options)
        else:
            result = self.env.reset(seed=seed)
        if hint and isinstance(result, tuple) and result and isinstance(result[0], str):
            result = (result[0] + "\n\nHINT: " + hint, *result[1:])
        return result

    def op_step(self, action):
        return self.env.step(action)

    def op_solution(self):
        solution = self.env.solution()
        if isinstance(self.env, TextEnv) and not isinstance(self.env, ToolUseEnv):
            return box_moves(solution)  # a game's bare moves, as the actions an agent sends
        return solution

    def op_tools(self):
        return env_tools(self.env)

    def op_close(self):
        close = getattr(self.env, "close", None)
        if callable(close):
            close()
        return None


def _send(reply):
    if os.getpid() != _PID:  # a fork of the design returned into server code: vanish
        os._exit(0)
    if _DENIED:
        reply["denied"] = list(_DENIED)
    try:
        line = json.dumps(reply, default=repr, ensure_ascii=False)
    except (TypeError, ValueError) as exc:  # e.g. circular structures in info
        line = json.dumps({"ok": False, "error": _error_payload(exc), "encode_error": True})
    _CHANNEL.write(line + "\n")
    _CHANNEL.flush()


def main():
    server = Server()
    for raw in sys.stdin:
        if os.getpid() != _PID:
            os._exit(0)
        try:
            request = json.loads(raw)
            rid = request.pop("id", None)
            op = request.pop("op")
            handler = getattr(server, "op_" + op)
        except (ValueError, KeyError, AttributeError, TypeError) as exc:  # host bug: say so
            _send({"ok": False, "error": _error_payload(exc), "bad_request": True})
            continue
        try:
            result = handler(**request)
            if isinstance(result, tuple):
                result = list(result)
            _send({"id": rid, "ok": True, "result": result})
        except MemoryError as exc:
            _RESERVE.clear()
            _send({"id": rid, "ok": False, "error": _error_payload(exc)})
        except BaseException as exc:  # anything the design raises, SystemExit included, is data
            _send({"id": rid, "ok": False, "error": _error_payload(exc)})
        if op == "close":
            break


if __name__ == "__main__":
    main()
