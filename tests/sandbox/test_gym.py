"""Every bundled example is a standard gymnasium.Env through the sandbox adapter."""

import warnings

import pytest
from gymnasium.utils.env_checker import check_env

from spade.sandbox.gym import SandboxedTextEnv, UnicodeText

pytestmark = pytest.mark.sandbox


def test_examples_pass_gymnasium_env_checker(example_path, policy):
    env = SandboxedTextEnv(example_path.read_text(), policy=policy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        check_env(env, skip_render_check=True)
    env.close()


def test_hint_option_and_failure_as_data(policy):
    code = "class FlakyEnv:\n    def reset(self, seed=None):\n        return 'go', {}\n    def step(self, a):\n        raise KeyError(a)\n"
    env = SandboxedTextEnv(code, policy=policy)
    obs, _ = env.reset(seed=1, options={"hint": "look left"})
    assert obs == "go\n\nHINT: look left"
    obs, reward, terminated, truncated, info = env.step("x")
    assert (obs, reward) == ("", 0.0)
    assert truncated and not terminated and info["failure"]["kind"] == "crash"
    env.close()


def test_unicode_text_space_accepts_any_text_and_samples_printable():
    space = UnicodeText(max_length=10)
    assert space.contains("é 😀\n{}") and not space.contains("x" * 11) and not space.contains(3)
    assert space.contains(space.sample())
