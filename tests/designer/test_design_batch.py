"""design_batch against the OpenAI stand-in: memory in the prompt, retries, hints, early stop.

Designs that parse are verified in nsjail (those tests are marked ``sandbox``); designs that
fail before verification (inference errors, no code) need no jail.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from spade.config import CampaignConfig, MemoryConfig, load_config
from spade.curriculum.memory import EnvironmentMemory, MemoryRecord
from spade.curriculum.pool import import_pool, seed_records
from spade.designer.corpus import Corpus
from spade.designer.designer import design_batch, env_id_for, hint_designs
from spade.designer.prompts import FORMAT_EXAMPLE
from spade.envs.examples import code_breaker
from spade.inference.factory import open_backend
from spade.records import DesignAttempt
from spade.sandbox.policy import load_policy
from spade.testing.openai_server import FakeOpenAIServer, render_prompt

EXAMPLES = Path(code_breaker.__file__).parent
CODE_BREAKER = Path(code_breaker.__file__).read_text()
# A second valid design (another class, so another env id), same game.
STUBBORN = CODE_BREAKER.replace("CodeBreakerEnv", "StubbornBreakerEnv")
NO_CODE = "Sorry, I cannot design an environment for this document."
CLEAN_HINT = "Test a few digits per guess and keep only codes consistent with the feedback."

MATH, LOGIC, SPATIAL = "mathematical_reasoning", "logical_deduction", "spatial_reasoning"


def fenced(code: str) -> str:
    return f"Here is the environment:\n```python\n{code}```\n"


def secret_of_verified_instance(cfg: CampaignConfig) -> str:
    """The code the verifier's instance hides (trusted example code, run here on purpose)."""
    env = code_breaker.CodeBreakerEnv(max_turns=cfg.sandbox.verify.max_turns)
    env.reset(seed=cfg.sandbox.verify.seed)
    move = env.solution()[-1]  # the last move names the code
    return move.removeprefix("\\boxed{").removesuffix("}")


class Script:
    """Designer and hint writer for the stand-in.

    ``designs[skill]`` is the list of answers to that skill's design requests, in order (the
    last one repeats); ``repairs[skill]`` likewise for its repair turns (default: the answer
    being repaired, again, as small models do); ``hints[class name]`` for hint requests about
    that class.
    """

    def __init__(
        self,
        designs: dict[str, list[str]],
        hints: dict[str, list[str]] | None = None,
        repairs: dict[str, list[str]] | None = None,
    ) -> None:
        self.designs = designs
        self.hints = hints or {}
        self.repairs = repairs or {}
        self.calls: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()

    def _next(self, key: str, answers: list[str]) -> str:
        with self.lock:
            n = self.calls[key]
            self.calls[key] += 1
        return answers[min(n, len(answers) - 1)]

    def __call__(self, request: dict[str, Any]) -> str:
        messages = request["messages"]
        system, user = messages[0]["content"], messages[1]["content"]
        if system.startswith("You write correct"):
            skill = re.search(r"Target skill: (\w+)", user).group(1)  # type: ignore[union-attr]
            if any(m["role"] == "user" for m in messages[2:]):  # a repair turn: the
                # conversation so far, then the feedback (a last assistant turn: a prefill)
                last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
                answered = [m for m in messages[:last_user] if m["role"] == "assistant"][-1]
                prefill = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
                again = [answered["content"].removeprefix(prefill)]
                return self._next(f"repair:{skill}", self.repairs.get(skill, again))
            return self._next(f"design:{skill}", self.designs.get(skill, [NO_CODE]))
        if system.startswith("You coach"):
            cls = re.search(r"class (\w+Env)", user).group(1)  # type: ignore[union-attr]
            return self._next(f"hint:{cls}", self.hints.get(cls, [CLEAN_HINT]))
        raise AssertionError(f"unexpected request: {system!r}")


def write_corpus(path: Path, n: int = 12) -> Path:
    docs = [
        {"id": f"doc{i:02d}", "text": f"DOC{i:02d} " + " ".join(["ore"] * 40)} for i in range(n)
    ]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def config(
    server: FakeOpenAIServer,
    corpus: Path,
    extra: Mapping[str, object] | None = None,
    **designer: object,
) -> CampaignConfig:
    overrides: dict[str, object] = {
        **server.overrides(),
        "inference.max_retries": 0,
        "inference.request_timeout_s": 20.0,
        "corpus.path": str(corpus),
        "sandbox.workers": 2,
        "designer.envs_per_round": 1,
        "designer.attempts_per_slot": 2,
    }
    overrides |= {f"designer.{k}": v for k, v in designer.items()}
    overrides |= extra or {}
    return load_config(overrides=overrides)


def run(
    cfg: CampaignConfig, memory: EnvironmentMemory | None = None, regeneration: int = 0
) -> list[DesignAttempt]:
    async def go() -> list[DesignAttempt]:
        async with open_backend(cfg) as backend:
            return await design_batch(
                backend,
                Corpus.load(cfg.corpus),
                memory if memory is not None else EnvironmentMemory(cfg.memory),
                cfg,
                load_policy(),
                regeneration=regeneration,
            )

    return asyncio.run(go())


def design_requests(server: FakeOpenAIServer) -> list[str]:
    """The user prompt of every first design request (repair turns left out)."""
    return [
        r["messages"][1]["content"]
        for r in server.chat_requests
        if r["messages"][0]["content"].startswith("You write correct") and len(r["messages"]) == 2
    ]


def repair_requests(server: FakeOpenAIServer) -> list[list[dict[str, Any]]]:
    """The whole conversation of every repair turn."""
    return [
        r["messages"]
        for r in server.chat_requests
        if r["messages"][0]["content"].startswith("You write correct") and len(r["messages"]) > 2
    ]


def hint_requests(server: FakeOpenAIServer) -> list[str]:
    return [
        r["messages"][1]["content"]
        for r in server.chat_requests
        if r["messages"][0]["content"].startswith("You coach")
    ]


def document_of(prompt: str) -> str:
    return re.search(r"<document>\n(.*?)\n</document>", prompt, re.DOTALL).group(1)  # type: ignore[union-attr]


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_corpus(tmp_path / "corpus.jsonl")


# every game attempt must not copy the contract's format example either
FORMAT = [{"name": "format_example", "code": FORMAT_EXAMPLE}]


def serve(script: Script) -> FakeOpenAIServer:
    return FakeOpenAIServer(script=script)


# ----------------------------------------------------------------------------- (a) memory


def test_memory_examples_reach_the_prompt(corpus):
    memory_cfg = load_config().memory
    memory = EnvironmentMemory(memory_cfg)
    memory.extend(
        [
            MemoryRecord("pos1", MATH, "class PositiveOneEnv:  # POS-ONE", 0.5, 0.40, round=1),
            MemoryRecord("pos2", MATH, "class PositiveTwoEnv:  # POS-TWO", 0.3, 0.30, round=1),
            MemoryRecord("easy", MATH, "class TooEasyEnv:  # EASY-ONE", 0.95, 0.0, round=1),
            MemoryRecord("other", LOGIC, "class OtherSkillEnv:  # OTHER", 0.5, 0.9, round=1),
            MemoryRecord("hard", LOGIC, "class HardOtherEnv:  # HARD-OTHER", 0.0, 0.0, round=1),
            MemoryRecord("fresh", MATH, "class NeverPlayedEnv:  # FRESH", None, None, round=2),
        ]
    )
    with serve(Script({})) as server:  # no code: nothing is verified
        cfg = config(server, corpus, attempts_per_slot=1)
        attempts = run(cfg, memory)
    (prompt,) = design_requests(server)
    assert f"Target skill: {MATH}" in prompt
    assert "class PositiveOneEnv:  # POS-ONE" in prompt
    assert "class PositiveTwoEnv:  # POS-TWO" in prompt
    assert "agent win rate 0.50, regret 0.40" in prompt
    assert "agent win rate 0.30, regret 0.30" in prompt
    assert prompt.index("POS-ONE") < prompt.index("POS-TWO")  # highest regret first
    assert "Avoid designs like this one: too easy (agent win rate 0.95" in prompt
    assert "EASY-ONE" in prompt
    # another skill's good design is no positive; the same skill's negative is preferred;
    # a never-evaluated design only fills a positive slot that played designs leave empty
    assert "OTHER" not in prompt and "HARD-OTHER" not in prompt and "FRESH" not in prompt
    assert [(a.failure_kind, a.accepted) for a in attempts] == [("parse", False)]
    assert attempts[0].messages[1]["content"] == prompt  # the attempt keeps its prompt


def prompts_by_skill(server: FakeOpenAIServer) -> dict[str, str]:
    return prompts_by_skill_of(design_requests(server))


def prompts_by_skill_of(prompts: list[str]) -> dict[str, str]:
    return {re.search(r"Target skill: (\w+)", p).group(1): p for p in prompts}  # type: ignore[union-attr]


def test_an_imported_pool_reaches_the_prompt_whole_or_not_at_all(corpus):
    seeded = import_pool(EXAMPLES, MemoryConfig())
    memory = EnvironmentMemory(MemoryConfig())
    memory.extend(seeded)
    code = {p.stem: p.read_text() for p in EXAMPLES.glob("*.py")}
    with serve(Script({})) as server:
        cfg = config(server, corpus, envs_per_round=3, attempts_per_slot=1)
        run(cfg, memory)
        budget = cfg.designer.max_example_chars
        assert len(code["code_breaker"]) < budget < len(code["ownership_riddle"])
        assert budget < len(code["maze_walk"])
        run(
            config(server, corpus, envs_per_round=3, attempts_per_slot=1, max_example_chars=6000),
            memory,
        )
    small, large = (
        prompts_by_skill_of(p) for p in (design_requests(server)[:3], design_requests(server)[3:])
    )
    assert set(small) == {MATH, LOGIC, SPATIAL}
    maths, logic, spatial = small[MATH], small[LOGIC], small[SPATIAL]
    assert code["polynomial_probe"] in maths  # whole
    assert code["code_breaker"] in logic
    # over the budget: skipped, never cut (no part of its class shown)
    assert "class OwnershipRiddleEnv" not in logic and "Good earlier design 2" not in logic
    assert "class MazeWalkEnv" not in spatial and "Good earlier design" not in spatial
    assert "Good earlier design 1 (from the seed pool, not yet played)" in maths
    assert "Do not copy them" in maths and "Do not copy them" not in spatial  # no examples
    assert "Avoid designs" not in maths + logic + spatial  # unplayed: never a negative
    assert "class CargoKnapsackEnv" not in maths + logic + spatial  # another skill's design
    # a larger budget shows them whole
    assert code["ownership_riddle"] in large[LOGIC] and code["code_breaker"] in large[LOGIC]
    assert code["maze_walk"] in large[SPATIAL]


def test_played_designs_take_precedence_over_the_seed_pool(corpus):
    memory = EnvironmentMemory(MemoryConfig())
    memory.extend(import_pool(EXAMPLES, MemoryConfig()))  # older than what the run played
    memory.extend(
        [
            MemoryRecord("m1", MATH, "class PlayedMathEnv:  # PLAYED-MATH", 0.5, 0.2, round=0),
            MemoryRecord("l1", LOGIC, "class PlayedLogicOneEnv:  # L-ONE", 0.4, 0.3, round=0),
            MemoryRecord("l2", LOGIC, "class PlayedLogicTwoEnv:  # L-TWO", 0.6, 0.1, round=0),
        ]
    )
    with serve(Script({})) as server:
        run(config(server, corpus, envs_per_round=2, attempts_per_slot=1), memory)
    prompts = prompts_by_skill(server)
    maths, logic = prompts[MATH], prompts[LOGIC]
    # maths: one played design in the band, the seeded one fills the second slot after it
    assert "Good earlier design 1 (agent win rate 0.50, regret 0.20)" in maths
    assert "Good earlier design 2 (from the seed pool, not yet played)" in maths
    assert maths.index("PLAYED-MATH") < maths.index("class PolynomialProbeEnv")
    # logic: two played designs fill both slots; the seeded ones are left out
    assert "L-ONE" in logic and "L-TWO" in logic
    assert "class CodeBreakerEnv" not in logic and "class OwnershipRiddleEnv" not in logic


def test_documents_are_truncated_by_mode(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"text": " ".join(f"w{i}" for i in range(500))}) + "\n")
    with serve(Script({})) as server:
        limits = {"corpus.max_words_games": 100, "corpus.max_words_tool_use": 60}
        run(config(server, path, limits, attempts_per_slot=1))
        run(config(server, path, limits, attempts_per_slot=1, mode="tool_use"))
    game_prompt, tool_prompt = design_requests(server)
    assert document_of(game_prompt).split() == [f"w{i}" for i in range(100)]
    assert document_of(tool_prompt).split() == [f"w{i}" for i in range(60)]
    assert "ToolUseEnv" in tool_prompt and "ToolUseEnv" not in game_prompt


def test_skills_rotate_with_the_regeneration(corpus):
    with serve(Script({})) as server:
        cfg = config(server, corpus, envs_per_round=4, attempts_per_slot=1)
        first = run(cfg, regeneration=0)
        second = run(cfg, regeneration=1)
    assert [a.skill for a in first] == [MATH, LOGIC, SPATIAL, MATH]
    assert [a.skill for a in second] == [
        "pattern_recognition",
        "optimization",
        "causal_inference",
        "pattern_recognition",
    ]


def test_document_sampling_is_seeded(corpus):
    with serve(Script({})) as server:
        cfg = config(server, corpus, envs_per_round=3, attempts_per_slot=2)
        a = [x.doc_id for x in run(cfg)]
        b = [x.doc_id for x in run(cfg)]
        c = [x.doc_id for x in run(cfg, regeneration=1)]
    assert a == b and a != c
    assert len(set(a[:3])) == 3  # slots of one attempt never share a document


# ----------------------------------------------------------------------------- (b) inference


@pytest.mark.sandbox
def test_inference_failure_is_recorded_and_retried_with_a_new_document(corpus):
    with serve(Script({MATH: [fenced(CODE_BREAKER)]})) as server:
        server.plan("500")  # the first request fails, and max_retries=0 gives up at once
        cfg = config(server, corpus, attempts_per_slot=3, max_failed_share=1.0)  # tolerated
        attempts = run(cfg)
    first, second = attempts  # the third attempt never ran
    assert (first.slot, first.attempt, second.slot, second.attempt) == (0, 0, 0, 1)
    assert first.failure_kind == "inference" and first.failed and not first.accepted
    assert "500" in (first.failure_reason or "")
    assert first.code is None and first.verdict is None
    assert second.accepted and second.failure_kind is None
    assert second.code == CODE_BREAKER and second.env_id == env_id_for(CODE_BREAKER)
    assert second.doc_id != first.doc_id
    prompts = design_requests(server)
    assert len(prompts) == 2
    assert document_of(prompts[0]) != document_of(prompts[1])
    assert document_of(prompts[1]).startswith(f"DOC{second.doc_id[3:]}")
    assert second.hint == CLEAN_HINT and second.hint_note is None


def test_a_retry_never_reuses_the_document_it_failed_on(tmp_path):
    path = write_corpus(tmp_path / "two.jsonl", n=2)
    with serve(Script({})) as server:
        repeats = []
        for seed in range(6):
            server.plan("500", "500")
            cfg = config(server, path, attempts_per_slot=2, seed=seed, max_failed_share=1.0)
            first, second = run(cfg)
            assert first.failure_kind == second.failure_kind == "inference"
            if first.doc_id == second.doc_id:
                repeats.append(seed)
    assert repeats == []


# ----------------------------------------------------------------------------- (c) hints


@pytest.mark.sandbox
def test_leaking_hints_are_retried_then_dropped(corpus):
    secret = secret_of_verified_instance(load_config())
    leak = f"Hint: the code is {secret}, type it at once."
    silent = CODE_BREAKER.replace("CodeBreakerEnv", "SilentBreakerEnv")
    script = Script(
        {MATH: [fenced(CODE_BREAKER)], LOGIC: [fenced(STUBBORN)], SPATIAL: [fenced(silent)]},
        hints={
            "CodeBreakerEnv": [leak, CLEAN_HINT],  # leaks once, then a good hint
            "StubbornBreakerEnv": [leak],  # always leaks
            "SilentBreakerEnv": ["   "],  # always empty
        },
    )
    with serve(script) as server:
        cfg = config(server, corpus, envs_per_round=3, attempts_per_slot=3)
        attempts = run(cfg)
    by_skill = {a.skill: a for a in attempts}
    assert len(attempts) == 3 and all(a.accepted for a in attempts)  # no further attempts
    assert len(design_requests(server)) == 3

    good, stubborn, empty = by_skill[MATH], by_skill[LOGIC], by_skill[SPATIAL]
    assert good.solution[-1] == f"\\boxed{{{secret}}}"  # what the leak check compares with
    assert good.hint == CLEAN_HINT and good.hint_note is None
    assert stubborn.hint is None
    assert stubborn.hint_note is not None and "revealed the solution" in stubborn.hint_note
    assert empty.hint is None and empty.hint_note == "empty hint"

    hints = hint_requests(server)
    tries = cfg.designer.hint_tries
    assert tries == 2
    assert len(hints) == 2 + tries + tries  # 1 retry for the good one, 2 tries others
    assert sum("class StubbornBreakerEnv" in h for h in hints) == tries
    assert all(
        "class CodeBreakerEnv" in h or "class StubbornBreakerEnv" in h or "SilentBreakerEnv" in h
        for h in hints
    )
    # the hint prompt carries the design's code
    assert any(good.code and good.code in h for h in hints)


def accepted_attempt(cls: str, solution: list[str]) -> DesignAttempt:
    """An attempt as the verifier leaves an accepted design (hinting needs no jail)."""
    code = f"class {cls}:\n    pass\n"
    attempt = DesignAttempt(0, 0, MATH, "doc00", [], code=code, env_id=env_id_for(code))
    attempt.accepted, attempt.solution = True, solution
    return attempt


def hint(server: FakeOpenAIServer, cfg: CampaignConfig, attempts: list[DesignAttempt]) -> None:
    async def go() -> None:
        async with open_backend(cfg) as backend:
            await hint_designs(attempts, backend, cfg)

    asyncio.run(go())


def test_hint_tries_and_sentences_come_from_the_config(corpus):
    leak = "Type \\boxed{4213} now."
    script = Script(
        {},
        hints={
            "LeakyEnv": [leak, leak, "Start with the corners. Then the edges. Then the rest."],
            "WordyEnv": ["One idea. Two ideas. Three ideas. Four ideas."],
        },
    )
    leaky = accepted_attempt("LeakyEnv", ["\\boxed{4213}"])
    wordy = accepted_attempt("WordyEnv", [])
    with serve(script) as server:
        cfg = config(server, corpus, hint_tries=3, hint_max_sentences=2)
        hint(server, cfg, [leaky, wordy])
        prompts = hint_requests(server)
    assert leaky.hint == "Start with the corners. Then the edges."  # third try, cut to 2
    assert wordy.hint == "One idea. Two ideas."
    assert script.calls == {"hint:LeakyEnv": 3, "hint:WordyEnv": 1}
    assert all("1 to 2 sentences" in p for p in prompts)

    again = accepted_attempt("LeakyEnv", ["\\boxed{4213}"])
    script.calls.clear()
    with serve(script) as server:
        hint(server, config(server, corpus, hint_tries=1), [again])  # default 3 sentences
        (prompt,) = hint_requests(server)
    assert again.hint is None and again.hint_note == "hint revealed the solution"
    assert "1 to 3 sentences" in prompt


# ----------------------------------------------------------------------------- (d) early stop


@pytest.mark.sandbox
def test_attempts_stop_for_slots_that_were_accepted(corpus):
    script = Script(
        {
            MATH: [fenced(CODE_BREAKER)],  # accepted at once
            LOGIC: [NO_CODE, fenced(STUBBORN)],  # accepted on the second attempt
            SPATIAL: ["```python\nclass BrokenEnv(TextEnv):\n    def setup(self"],  # never
        }
    )
    with serve(script) as server:
        cfg = config(server, corpus, envs_per_round=3, attempts_per_slot=3)
        attempts = run(cfg)
    assert [(a.attempt, a.slot) for a in attempts] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 2),
        (2, 2),
    ]
    assert [a.failure_kind for a in attempts] == [None, "parse", "parse", None, "parse", "parse"]
    assert [a.accepted for a in attempts] == [True, False, False, True, False, False]
    assert all("cut off" in (a.failure_reason or "") for a in attempts if a.slot == 2)
    assert len(design_requests(server)) == 3 + 2 + 1
    assert len(hint_requests(server)) == 2  # one per accepted design, asked once each
    # every answer with text but no module got one repair turn (the script repeats itself)
    assert [a.repairs for a in attempts] == [0, 1, 1, 0, 1, 1]
    assert script.calls == {
        f"design:{MATH}": 1,
        f"design:{LOGIC}": 2,
        f"design:{SPATIAL}": 3,
        f"repair:{LOGIC}": 1,
        f"repair:{SPATIAL}": 3,
        "hint:CodeBreakerEnv": 1,
        "hint:StubbornBreakerEnv": 1,
    }
    accepted = [a for a in attempts if a.accepted]
    assert {a.env_id for a in accepted} == {env_id_for(CODE_BREAKER), env_id_for(STUBBORN)}
    assert all(a.verdict and a.verdict["accepted"] for a in accepted)
    assert all(a.token_ids and a.model == server.model for a in attempts)


# ----------------------------------------------------------------------------- (e) strategy


def edit_config(server: FakeOpenAIServer, corpus: Path, **designer: object) -> CampaignConfig:
    """Edit strategy over the bundled examples (the default pool), code_breaker held out."""
    held = {"run.heldout_envs": [str(EXAMPLES / "code_breaker.py")]}
    return config(server, corpus, held, strategy="edit", repair_turns=0, **designer)


def test_edit_prompts_hold_the_parents_whole_code_and_the_document(corpus):
    with serve(Script({})) as server:
        cfg = edit_config(server, corpus, envs_per_round=3, attempts_per_slot=1)
        memory = EnvironmentMemory(cfg.memory)
        memory.extend(seed_records(cfg))
        attempts = run(cfg, memory)
        again = run(cfg, memory)
    code = {p.stem: p.read_text() for p in EXAMPLES.glob("*.py")}
    fitting = {k for k, v in code.items() if len(v) <= cfg.designer.max_example_chars}
    assert [a.strategy for a in attempts] == ["edit"] * 3
    assert [a.parent_id for a in attempts] == [a.parent_id for a in again]  # seeded
    maths, logic, spatial = attempts
    assert maths.parent_id == "polynomial_probe"  # the skill's own, when one fits
    # logic: code_breaker is held out and ownership_riddle over the budget; spatial: maze_walk
    # is over it: another game skill's environment that fits (never a tool-use one)
    assert {logic.parent_id, spatial.parent_id} <= fitting - {"code_breaker", "__init__"}
    assert not {logic.parent_id, spatial.parent_id} & {"bank_transfer", "order_fulfillment"}
    for a in attempts:
        parent, prompt = code[a.parent_id or ""], a.messages[1]["content"]
        assert prompt in design_requests(server)  # what was sent
        assert f"```python\n{parent}\n```" in prompt  # whole
        assert f"<document>\nDOC{a.doc_id[3:]}" in prompt
        assert "Turn it into a NEW environment" in prompt and f'skill = "{a.skill}"' in prompt
        assert a.references == [*FORMAT, {"name": a.parent_id, "code": parent}]
    assert all("class CodeBreakerEnv" not in p for p in design_requests(server))  # held out


def test_edit_without_a_parent_that_fits_writes_and_says_so(corpus):
    with serve(Script({})) as server:
        cfg = edit_config(server, corpus, attempts_per_slot=1, max_example_chars=100)
        memory = EnvironmentMemory(cfg.memory)
        memory.extend(seed_records(cfg))
        (attempt,) = run(cfg, memory)
    (prompt,) = design_requests(server)
    assert (attempt.strategy, attempt.parent_id, attempt.references) == ("write", None, FORMAT)
    assert "Turn it into a NEW environment" not in prompt and "Good earlier design" not in prompt


def _quadratic_probe() -> str:
    """polynomial_probe turned into a quadratic: the class alone, as the 0.5B coder answers an
    edit (the module's regexes, import and docstring left out)."""
    parent = (EXAMPLES / "polynomial_probe.py").read_text()
    cls = parent[parent.index("class PolynomialProbeEnv") :]
    for old, new in [
        ("PolynomialProbeEnv", "QuadraticProbeEnv"),
        ("self.degree = 3", "self.degree = 2"),
        ("for _ in range(3)", "for _ in range(2)"),
        ("a3*x^3 + a2*x^2", "a2*x^2"),
        ("(a3 is not zero)", "(a2 is not zero)"),
        ("a3, a2, a1, a0", "a2, a1, a0"),
        ("answer 1, -2, 0, 7", "answer 1, -2, 7"),
        ("len(nums) != 4", "len(nums) != 3"),
        ("four integers", "three integers"),
        ("right == 4", "right == 3"),
        ("right / 4", "right / 3"),
        ("of 4 coefficients", "of 3 coefficients"),
        ("(0, 1, -1, 2)", "(0, 1, -1)"),
    ]:
        assert old in cls, old
        cls = cls.replace(old, new)
    return cls


@pytest.mark.sandbox
def test_an_edit_that_rewrote_only_the_class_keeps_the_parents_constants(corpus):
    with serve(Script({MATH: [fenced(_quadratic_probe())]})) as server:
        cfg = edit_config(server, corpus, attempts_per_slot=1)
        memory = EnvironmentMemory(cfg.memory)
        memory.extend(seed_records(cfg))
        (attempt,) = run(cfg, memory)
    assert (attempt.strategy, attempt.parent_id) == ("edit", "polynomial_probe")
    assert attempt.inherited == ["re", "TextEnv", "_QUERY", "_INT"]
    assert attempt.code is not None and attempt.env_id == env_id_for(attempt.code)
    assert "# carried over from polynomial_probe, whose class this edits" in attempt.code
    assert attempt.accepted, (attempt.failure_kind, attempt.failure_reason)  # novel, not a crash
    assert "_QUERY = re.compile" not in attempt.completion  # the model's answer is kept as is


def test_write_attempts_carry_their_examples_as_references(corpus):
    memory = EnvironmentMemory(MemoryConfig())
    memory.extend(import_pool(EXAMPLES, MemoryConfig()))
    with serve(Script({})) as server:
        (attempt,) = run(config(server, corpus, attempts_per_slot=1, repair_turns=0), memory)
    assert (attempt.strategy, attempt.parent_id) == ("write", None)
    # the format example, then the memory's designs of the slot's skill that the prompt shows
    assert attempt.references[: len(FORMAT)] == FORMAT
    shown = attempt.references[len(FORMAT) :]
    assert sorted(r["name"] for r in shown) == ["number_hunt", "polynomial_probe"]
    assert all(r["code"] == (EXAMPLES / f"{r['name']}.py").read_text() for r in shown)


# ----------------------------------------------------------------------------- (f) repair

# code_breaker whose solution guesses the code backwards: the verifier finds it infeasible
BACKWARDS = CODE_BREAKER.replace('self.code + "}"', 'self.code[::-1] + "}"')


@pytest.mark.sandbox
def test_a_repair_turn_sends_the_failure_back_and_trains_on_the_first_answer(corpus):
    assert BACKWARDS != CODE_BREAKER
    script = Script(
        {MATH: [fenced(BACKWARDS)], LOGIC: [NO_CODE]},
        repairs={MATH: [fenced(CODE_BREAKER)], LOGIC: [fenced(STUBBORN)]},
    )
    with serve(script) as server:
        attempts = run(config(server, corpus, envs_per_round=2, attempts_per_slot=2))
    infeasible, no_code = attempts  # both accepted after one repair: no second attempt
    assert len(design_requests(server)) == 2 and len(repair_requests(server)) == 2
    for att, first, fixed in ((infeasible, BACKWARDS, CODE_BREAKER), (no_code, NO_CODE, STUBBORN)):
        assert att.accepted and att.accepted_after_repair and att.repairs == 1
        assert att.code == fixed and att.env_id == env_id_for(fixed) and att.failure_kind is None
        assert att.verdict is not None and att.verdict["accepted"] and att.hint == CLEAN_HINT
        # the training tokens are the first answer's, for the first prompt
        first_text = fenced(first) if first != NO_CODE else NO_CODE
        assert att.completion == first_text and att.token_ids == [ord(c) for c in first_text]
        prompt = "".join(map(chr, att.prompt_token_ids))
        assert prompt.startswith(render_prompt(att.messages)) and "corrected" not in prompt
        assert att.to_dict()["accepted_after_repair"] is True
    assert infeasible.first_code == BACKWARDS and infeasible.first_failure_kind == "infeasible"
    assert no_code.first_code is None and no_code.first_failure_kind == "parse"
    conversation = next(
        c for c in repair_requests(server) if f"Target skill: {MATH}" in c[1]["content"]
    )
    assert conversation[:2] == infeasible.messages
    assert conversation[2] == {"role": "assistant", "content": fenced(BACKWARDS)}
    feedback = conversation[3]["content"]
    assert "`feasibility` (infeasible)" in feedback
    assert (infeasible.first_failure_reason or "")[:60] in feedback
    assert "whole corrected module" in feedback
    assert infeasible.repair_messages == [
        conversation[3],
        {"role": "assistant", "content": fenced(CODE_BREAKER)},
    ]
    parse = next(c for c in repair_requests(server) if f"Target skill: {LOGIC}" in c[1]["content"])[
        3
    ]["content"]
    assert "could not be used (parse): the completion contains no Python code block" in parse


@pytest.mark.sandbox
def test_repair_turns_zero_sends_no_repair(corpus):
    script = Script({MATH: [fenced(BACKWARDS)]}, repairs={MATH: [fenced(CODE_BREAKER)]})
    with serve(script) as server:
        attempts = run(config(server, corpus, attempts_per_slot=2, repair_turns=0))
    assert repair_requests(server) == [] and len(design_requests(server)) == 2
    assert [(a.failure_kind, a.repairs, a.first_code) for a in attempts] == [
        ("infeasible", 0, None),
        ("infeasible", 0, None),
    ]


@pytest.mark.sandbox
def test_a_copy_of_an_example_shown_is_rejected_as_a_duplicate(corpus):
    memory = EnvironmentMemory(MemoryConfig())
    memory.extend(import_pool(EXAMPLES / "code_breaker.py", MemoryConfig()))
    with serve(Script({LOGIC: [fenced(CODE_BREAKER)]})) as server:
        cfg = config(server, corpus, envs_per_round=2, attempts_per_slot=1)
        _, copied = run(cfg, memory)
    assert copied.references == [*FORMAT, {"name": "code_breaker", "code": CODE_BREAKER}]
    assert copied.failure_kind == "duplicate" and "code_breaker" in (copied.failure_reason or "")
    assert copied.repairs == 1 and copied.first_failure_kind == "duplicate"  # repeated itself


@pytest.mark.sandbox
def test_a_repair_that_repeats_its_answer_keeps_the_verdict_unverified_again(corpus, monkeypatch):
    """The verifier is deterministic: the same code gets the same verdict without a second
    run in the jail (a small model often answers the feedback with the same module)."""
    import spade.designer.designer as designer_module

    verified: list[str] = []
    real = designer_module.verify_design

    def counting(code, *args, **kwargs):
        verified.append(code)
        return real(code, *args, **kwargs)

    monkeypatch.setattr(designer_module, "verify_design", counting)
    with serve(Script({MATH: [fenced(BACKWARDS)]})) as server:  # repairs repeat the answer
        (attempt,) = run(config(server, corpus, attempts_per_slot=1, repair_turns=2))
    assert len(repair_requests(server)) == 2 and attempt.repairs == 2
    assert verified == [BACKWARDS]  # verified once, not after each repair
    assert attempt.code == BACKWARDS and attempt.failure_kind == "infeasible"
    assert attempt.verdict is not None and attempt.verdict["failed_check"] == "feasibility"
    assert not attempt.accepted and attempt.first_failure_kind == "infeasible"


@pytest.mark.sandbox
def test_a_copy_of_the_contracts_format_example_is_a_duplicate(corpus):
    """The game contract shows one whole game; copying it is not designing."""
    with serve(Script({MATH: [fenced(FORMAT_EXAMPLE)]})) as server:
        (attempt,) = run(config(server, corpus, attempts_per_slot=1, repair_turns=0))
    assert attempt.references == FORMAT
    assert attempt.failure_kind == "duplicate" and "format_example" in (
        attempt.failure_reason or ""
    )


@pytest.mark.sandbox
def test_the_format_example_passes_the_verifier(policy):
    """The contract's example is a real environment of the contract (else it teaches errors)."""
    from spade.verify import verify

    assert verify(FORMAT_EXAMPLE, policy=policy).accepted
