"""A scripted model for the OpenAI stand-in: it designs three known environments (and two
bad ones), writes hints, and plays so that each environment's regret is known exactly.

- ``SkyWordEnv`` (mathematical_reasoning): the agent wins only with the hint -> regret 1.0.
- ``MetalEnv`` (logical_deduction): the agent always wins -> win rate 1, regret 0.0.
- ``HalfEnv`` (spatial_reasoning): without the hint the agent wins even-numbered puzzles only
  (an even number of consecutive seeds, as every evaluation plays: half of them), with it
  always -> regret 1.0 - 0.5 = 0.5.
- the second mathematical_reasoning slot first gets an infeasible design (its solution is
  wrong), then a completion without code; asked to repair either, it answers the same again.

Each of the three is one fixed instance (one secret word behind a varied opening), which the
verifier's ``seed_dependence`` check rejects: they exist to make regrets exact, not to be good
games. :func:`round_overrides` waives that check, as an imported pool of the reference's
fixed-instance games is verified (``sandbox.verify.waive``); the waived failure stays in each
verdict.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SKY = """
from spade.envs import TextEnv


class SkyWordEnv(TextEnv):
    skill = "mathematical_reasoning"

    def setup(self):
        self.tries = 0
        # The round number makes each seed its own instance (the verifier's seed_dependence).
        return f"Name the secret word in \\\\boxed{{}}. You have 3 tries. Round {self.rng.randint(1, 999)}."

    def play(self, move):
        self.tries += 1
        if move.strip().lower() == "azure":
            return "Correct!", 1.0, True
        if self.tries >= 3:
            return "Out of tries.", 0.0, True
        return "No.", 0.0, False

    def solution(self):
        return ["\\\\boxed{azure}"]
"""

METAL = (
    SKY.replace("SkyWordEnv", "MetalEnv")
    .replace("mathematical_reasoning", "logical_deduction")
    .replace("Name the secret word", "Guess the hidden metal")
    .replace("azure", "cobalt")
)

HALF = """
from spade.envs import TextEnv


class HalfEnv(TextEnv):
    skill = "spatial_reasoning"

    def reset(self, seed=None, options=None):
        self.puzzle = seed if seed is not None else 0
        return super().reset(seed, options)

    def setup(self):
        self.tries = 0
        return f"Puzzle #{self.puzzle}: say the password in \\\\boxed{{}}. Two tries."

    def play(self, move):
        self.tries += 1
        if move.strip().lower() == "quartz":
            return "Open!", 1.0, True
        if self.tries >= 2:
            return "Locked.", 0.0, True
        return "Wrong.", 0.0, False

    def solution(self):
        return ["\\\\boxed{quartz}"]
"""

INFEASIBLE = SKY.replace("SkyWordEnv", "BrokenEnv").replace(
    'return ["\\\\boxed{azure}"]', 'return ["\\\\boxed{teal}"]'
)

HINTS = {
    "azure": "Think of a fancy word for the colour of a clear sky.",
    "cobalt": "It is a blue-tinged transition metal.",
    "quartz": "The password is a very common crystal.",
}


class ScriptedModel:
    """Callable script for FakeOpenAIServer: designer, hint writer and agent in one."""

    def __init__(self) -> None:
        self.math_designs = 0
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> str:
        messages = request["messages"]
        system = messages[0]["content"]
        if system.startswith("You write correct"):
            if len(messages) > 2:  # a repair turn: it repeats its answer, as small models do
                return str(messages[-2]["content"])
            return self.design(messages[1]["content"])
        if system.startswith("You coach"):
            code = messages[1]["content"]
            return next(h for word, h in HINTS.items() if word in code)
        return self.play(messages)

    def design(self, prompt: str) -> str:
        skill = re.search(r"Target skill: (\w+)", prompt).group(1)  # type: ignore[union-attr]
        if skill == "logical_deduction":
            return f"```python\n{METAL}```"
        if skill == "spatial_reasoning":
            return f"Here you go:\n```python\n{HALF}```\nEnjoy."
        with self.lock:
            self.math_designs += 1
            n = self.math_designs
        return {1: f"```python\n{SKY}```", 2: f"```python\n{INFEASIBLE}```"}.get(
            n, "Sorry, I cannot."
        )

    def play(self, messages: list[dict[str, Any]]) -> str:
        first = messages[1]["content"]
        hinted = "HINT:" in first
        if first.startswith("Guess the hidden metal"):
            return "\\boxed{cobalt}"
        if first.startswith("Name the secret word"):
            return "\\boxed{azure}" if hinted else "I think \\boxed{red}"
        puzzle = int(re.search(r"Puzzle #(\d+)", first).group(1))  # type: ignore[union-attr]
        return "\\boxed{quartz}" if hinted or puzzle % 2 == 0 else "\\boxed{slate}"


# The regrets and rewards this script implies (see the module docstring), per environment class.
EXPECTED = {
    "SkyWordEnv": {"win_rate": 0.0, "hinted_win_rate": 1.0, "regret": 1.0},
    "MetalEnv": {"win_rate": 1.0, "hinted_win_rate": 1.0, "regret": 0.0},
    "HalfEnv": {"win_rate": 0.5, "hinted_win_rate": 1.0, "regret": 0.5},
}


def write_corpus(path: Path) -> Path:
    """A small JSONL corpus the scripted designer is grounded on."""
    docs = [
        {"text": f"Document {i} about minerals, skies and locked doors. " * 5} for i in range(10)
    ]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def round_overrides(server: Any, corpus: Path) -> dict[str, object]:
    """Config overrides for one round against the scripted model on ``server``: 4 slots of 2
    attempts (so the broken designs of the second math slot are seen), 2 + 2 plays (the
    fewest that keep :data:`EXPECTED`: HalfEnv's two unhinted plays are one even puzzle and
    one odd), and :data:`FIXED_INSTANCES`."""
    return {
        **server.overrides(),
        "corpus.path": str(corpus),
        "designer.envs_per_round": 4,
        "designer.attempts_per_slot": 2,
        "evaluation.unhinted_plays": 2,
        "evaluation.hinted_plays": 2,
        **FIXED_INSTANCES,
    }


FIXED_INSTANCES: dict[str, object] = {"sandbox.verify.waive": ["seed_dependence"]}
"""The override that lets this script's fixed-instance games through the verifier (see the
module)."""


def env_class(code: str | None) -> str:
    match = re.search(r"class (\w+Env)", code or "")
    assert match is not None, "a design without an Env class"
    return match.group(1)


def check_expected_round(attempts: Sequence[Any], evaluations: Sequence[Any]) -> dict[str, Any]:
    """Assert the round this script implies; return the evaluations by environment class."""
    kinds = sorted(a.failure_kind or "accepted" for a in attempts)
    assert kinds == ["accepted", "accepted", "accepted", "infeasible", "parse"]
    code = {a.env_id: a.code for a in attempts if a.accepted}
    by_class = {env_class(code[ev.env_id]): ev for ev in evaluations}
    assert set(by_class) == set(EXPECTED)
    for name, want in EXPECTED.items():
        ev = by_class[name]
        got = {"win_rate": ev.win_rate, "hinted_win_rate": ev.hinted_win_rate, "regret": ev.regret}
        assert got == want, name
    return by_class


TINY_CONTEXT_TOKENS = 16384
"""The longest conversation the tiny policy takes (its ``max_position_embeddings``)."""


def tiny_policy_overrides(policy: Path) -> dict[str, object]:
    """Config overrides that serve and train ``policy`` (a :func:`write_tiny_policy` folder):
    the conversations its positions allow, and the designer trained from the first round."""
    return {
        "model.name_or_path": str(policy),
        "model.max_context_tokens": TINY_CONTEXT_TOKENS,
        "training.designer_delay_steps": 0,
    }


def write_tiny_policy(folder: Path) -> Path:
    """A random-weight tiny Llama whose vocabulary covers the stand-in's token ids (code
    points below 1,024: the prompts and the script are ASCII but for a few marks), so
    trajectories from the scripted server can be trained on."""
    import torch
    from transformers import LlamaForCausalLM

    from spade.testing.tiny_models import char_tokenizer, tiny_llama_config

    tok = char_tokenizer(
        ["<unk>", "<pad>", "<|im_end|>"], "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    )
    torch.manual_seed(0)
    config = tiny_llama_config(
        1024,
        hidden=16,
        layers=1,
        heads=2,
        kv_heads=1,
        max_position_embeddings=TINY_CONTEXT_TOKENS,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    folder.mkdir(parents=True, exist_ok=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
