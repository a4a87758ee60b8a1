"""The optional solvability auditor: verdicts parsed, an unsolvable design rejected, lenient
on a missing verdict."""

from __future__ import annotations

import asyncio

from spade.config import load_config
from spade.designer.solvability import audit_designs, parse_verdict
from spade.inference.factory import open_backend
from spade.records import DesignAttempt
from spade.scoring.rewards import rejected_tier
from spade.testing.openai_server import FakeOpenAIServer


def test_verdicts_are_parsed_with_their_reason():
    assert parse_verdict("VERDICT: SOLVABLE\nBisection finds it.") == (True, "Bisection finds it.")
    assert parse_verdict("<think>hmm</think>verdict: **UNSOLVABLE** 3 clues, 4 unknowns") == (
        False,
        "3 clues, 4 unknowns",
    )
    assert parse_verdict("It looks fine to me.") == (None, "It looks fine to me.")
    assert rejected_tier("unsolvable") == rejected_tier("infeasible")


def _accepted(name: str) -> DesignAttempt:
    code = f"class {name}Env(TextEnv):\n    pass\n"
    return DesignAttempt(0, 0, "s", "d", [], code=code, env_id=name, accepted=True)


def _audit(answers: dict[str, str], **designer: object) -> list[DesignAttempt]:
    def script(body: dict) -> str:
        code = body["messages"][1]["content"]
        return next(a for name, a in answers.items() if f"class {name}Env" in code)

    attempts = [_accepted(name) for name in answers]
    with FakeOpenAIServer(script=script) as server:
        overrides = {**server.overrides(), "inference.max_retries": 0}
        overrides |= {f"designer.{k}": v for k, v in designer.items()}
        cfg = load_config(overrides=overrides)

        async def go() -> None:
            async with open_backend(cfg) as backend:
                await audit_designs(attempts, backend, cfg)

        asyncio.run(go())
        asked = len(server.chat_requests)
    assert asked == (len(answers) if designer.get("solvability_check") else 0)
    return attempts


def test_an_unsolvable_design_is_rejected_and_a_missing_verdict_kept_when_lenient():
    answers = {
        "Cubic": "VERDICT: UNSOLVABLE\nThree clues cannot fix four coefficients.",
        "Hunt": "VERDICT: SOLVABLE\nHigher/lower feedback halves the range.",
        "Vague": "Nice game.",
    }
    cubic, hunt, vague = _audit(answers, solvability_check=True)
    assert not cubic.accepted and cubic.failure_kind == "unsolvable"
    assert "four coefficients" in (cubic.failure_reason or "")
    assert cubic.solvability == {"solvable": False, "reason": answers["Cubic"].split("\n")[1]}
    assert hunt.accepted and hunt.solvability is not None and hunt.solvability["solvable"]
    assert vague.accepted and vague.solvability == {"solvable": None, "reason": "Nice game."}
    (strict,) = _audit({"Vague": "Nice game."}, solvability_check=True, solvability_lenient=False)
    assert not strict.accepted


def test_off_by_default_nothing_is_asked():
    (att,) = _audit({"Cubic": "VERDICT: UNSOLVABLE"})
    assert att.accepted and att.solvability is None
