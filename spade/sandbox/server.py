"""The in-jail session server: loads one environment and serves it over JSON lines.

Runs inside nsjail under Debian's Python 3.11 with ``-s -S -P``; standard library only. It is
never imported by the host. Protocol: one JSON request per line on stdin, one JSON reply per
line on a private copy of the original stdout; fd 1 and ``sys.stdout`` are pointed at stderr,
so whatever the environment prints lands in the captured log, never on the channel.

Every request carries an ``id`` that its reply echoes. Requests:
``{"op": "load", "path", "allow", "kwargs"}`` first, then ``reset`` (seed, options,
hint), ``step`` (action), ``solution``, ``tools``, ``close``. Replies:
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {type, errno, message, traceback}}``,
plus ``"denied": [...]`` whenever the environment tried imports outside the allow-list.
"""

import builtins
import inspect
import json
import os
import sys
import traceback
import types
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the spade.envs runtime
_CHANNEL = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
os.dup2(2, 1)
sys.stdout = sys.stderr
_RESERVE = [bytearray(1 << 20)]  # freed on MemoryError so the reply can still be built
_DENIED: list = []
_MODULE = "design"
_PID = os.getpid()  # a forked copy of the server must never touch the channel


class ImportDeniedError(ImportError):
    """An import the sandbox policy does not allow."""


def _make_guard(allow):
    real_import = builtins.__import__

    def allowed(name):
        return any(a == "*" or name == a or name.startswith(a + ".") for a in allow)

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        # Only imports written in the design itself are checked; the standard library's own
        # internal imports (random importing os, say) go through untouched.
        if globals is not None and globals.get("__name__") == _MODULE:
            full = name if level == 0 else "." * level + name
            if level != 0 or not allowed(name):
                _DENIED.append(full)
                raise ImportDeniedError(f"import of {full!r} is not allowed in a design")
            for sub in fromlist or ():
                if not allowed(name) and not allowed(name + "." + sub):
                    _DENIED.append(name + "." + sub)
                    raise ImportDeniedError(f"import of {name}.{sub} is not allowed")
        return real_import(name, globals, locals, fromlist, level)

    return guarded_import


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


def _accepts(fn, name):
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class Server:
    def __init__(self):
        self.env: Any = None

    def op_load(self, path, allow, kwargs=None, class_name=None):
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        code = compile(source, path, "exec")
        module = types.ModuleType(_MODULE)
        module.__file__ = path
        guarded = dict(vars(builtins))
        guarded["__import__"] = _make_guard(list(allow))
        vars(module)["__builtins__"] = guarded
        sys.modules[_MODULE] = module
        exec(code, vars(module))
        cls = getattr(module, class_name) if class_name else _find_class(module)
        kwargs = dict(kwargs or {})
        if "max_turns" in kwargs and not _accepts(cls, "max_turns"):
            kwargs.pop("max_turns")
        self.env = cls(**kwargs)
        hint = getattr(cls, "hint", None)
        skill = getattr(cls, "skill", None)
        return {
            "class": cls.__name__,
            "tool_use": bool(self._tool_names()) or callable(getattr(self.env, "tools", None)),
            "accepts_options": _accepts(self.env.reset, "options"),
            "hint": hint if isinstance(hint, str) else None,
            "skill": skill if isinstance(skill, str) else None,
            "max_turns": getattr(self.env, "max_turns", None),
        }

    def _tool_names(self):
        return sorted(n[5:] for n in dir(type(self.env)) if n.startswith("tool_"))

    def op_reset(self, seed=None, options=None, hint=None):
        options = dict(options or {})
        if _accepts(self.env.reset, "options"):
            result = self.env.reset(seed=seed, options=options)
        else:
            result = self.env.reset(seed=seed)
        if hint and isinstance(result, tuple) and result and isinstance(result[0], str):
            result = (result[0] + "\n\nHINT: " + hint, *result[1:])
        return result

    def op_step(self, action):
        return self.env.step(action)

    def op_solution(self):
        return self.env.solution()

    def op_tools(self):
        tools = getattr(self.env, "tools", None)
        if callable(tools):
            return tools()
        if isinstance(tools, list):
            return tools
        from spade.envs import tool_schema

        return [tool_schema(n, getattr(self.env, "tool_" + n)) for n in self._tool_names()]

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
