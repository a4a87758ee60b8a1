"""``spade env check`` and ``spade env play`` as a user runs them (a real subprocess)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spade.envs.examples import example_paths
from spade.verify import CHECKS

pytestmark = pytest.mark.sandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "spade" / "envs" / "examples"
SPADE = [sys.executable, "-m", "spade.cli"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SPADE, *args], capture_output=True, text=True, input=stdin, timeout=120)


def test_check_folder_all_accepted_exit_0():
    out = run("env", "check", str(EXAMPLES))
    assert out.returncode == 0, out.stdout + out.stderr
    n = len(example_paths())
    assert f"{n}/{n} accepted" in out.stdout


def test_check_json_lines_shape_and_exit_1_on_rejection(tmp_path):
    bad = tmp_path / "bad_env.py"
    bad.write_text("import os\nclass BadEnv:\n    pass\n")
    out = run("env", "check", "--json", str(EXAMPLES / "maze_walk.py"), str(bad))
    assert out.returncode == 1
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [d["path"] for d in lines] == [str(EXAMPLES / "maze_walk.py"), str(bad)]
    for d in lines:
        assert set(d) == {"path", "accepted", "checks", "failure", "similarity", "progress"}
        assert all(set(c) == {"name", "passed", "reason"} for c in d["checks"])
    assert lines[0]["accepted"] and lines[0]["failure"] is None and lines[0]["progress"] == 1.0
    assert not lines[1]["accepted"] and lines[1]["progress"] == 1 / len(CHECKS)  # parse passed
    assert lines[1]["failure"] == {
        "kind": "import_denied",
        "reason": "imports outside the allow-list: os (line 1)",
    }


def test_check_against_references_rejects_copies_but_not_the_reference_itself(tmp_path):
    copy = tmp_path / "copy.py"
    copy.write_text("# my very own game\n" + (EXAMPLES / "code_breaker.py").read_text())
    files = [str(EXAMPLES / "code_breaker.py"), str(copy)]
    out = run("env", "check", "--json", *files, "--reference", str(EXAMPLES), "-r", str(copy))
    assert out.returncode == 1, out.stdout + out.stderr
    original, copied = (json.loads(line) for line in out.stdout.splitlines())
    # Each file is compared with every reference but itself: the example meets its copy.
    assert original["failure"]["kind"] == copied["failure"]["kind"] == "duplicate"
    assert copied["failure"]["reason"] == (
        f"a near-verbatim copy of {str(EXAMPLES / 'code_breaker.py')!r}: "
        "source similarity 1.000 >= 0.99"
    )
    alone = run("env", "check", "--json", str(EXAMPLES / "code_breaker.py"), "-r", str(EXAMPLES))
    assert alone.returncode == 0, alone.stdout + alone.stderr
    checks = json.loads(alone.stdout)["checks"]
    assert checks[-1]["name"] == "novelty" and checks[-1]["reason"].startswith(
        f"closest of {len(example_paths()) - 1}: "  # every example but itself
    )


@pytest.mark.parametrize(
    "args",
    [
        ("env", "check", "--reference", "/no/such/folder", str(EXAMPLES / "maze_walk.py")),
        ("env", "check", "/no/such/file.py"),
        ("env", "check"),
        ("env", "check", "--seed", "-1", "x.py"),
        ("env", "nope"),
    ],
)
def test_usage_errors_exit_2(args):
    out = run(*args)
    assert out.returncode == 2, out.stdout + out.stderr


def test_check_bad_policy_is_a_usage_error(tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("limits: {processes: 0}\n")
    out = run("env", "check", "--policy", str(policy), str(EXAMPLES / "maze_walk.py"))
    assert out.returncode == 2 and "invalid sandbox policy" in out.stderr


def test_play_through_the_sandbox_with_hint():
    # Seed 1's code is 2140 (see the session test); a person types two guesses.
    out = run(
        "env",
        "play",
        str(EXAMPLES / "code_breaker.py"),
        "--seed",
        "1",
        "--hint",
        stdin="\\boxed{0123}\n\\boxed{2140}\n",
    )
    assert out.returncode == 0, out.stderr
    assert "HINT:" in out.stdout and "1 exact, 2 misplaced" in out.stdout
    assert "episode terminated after 2 turns, final reward 1" in out.stdout


def test_play_tool_use_lists_tools_and_quits():
    out = run("env", "play", str(EXAMPLES / "order_fulfillment.py"), "--seed", "3", stdin=":quit\n")
    assert out.returncode == 0 and "tool search_products" in out.stdout


def test_play_broken_environment_reports_failure(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("raise ValueError('nope')\n")
    out = run("env", "play", str(bad))
    assert out.returncode == 1 and "crash" in out.stderr
