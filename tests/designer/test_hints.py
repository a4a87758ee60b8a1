"""hint_designs against the OpenAI stand-in: a hint request that failed on our side is asked
again, and a design it leaves without a hint raises InferenceError (its regret would read 0);
a design whose every try answered (empty or leaking) legitimately has no hint."""

from __future__ import annotations

import pytest

from spade.errors import InferenceError
from tests.designer.test_design_batch import (
    CLEAN_HINT,
    Script,
    accepted_attempt,
    config,
    hint,
    hint_requests,
    serve,
    write_corpus,
)

LEAK = "Type \\boxed{4213} now."


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.jsonl")


def test_a_failed_hint_request_is_asked_again(corpus):
    design = accepted_attempt("PatientEnv", ["\\boxed{4213}"])
    with serve(Script({})) as server:
        server.plan("500")  # the first try fails, the second is answered
        hint(server, config(server, corpus), [design])
        assert len(hint_requests(server)) == 2
    assert design.hint == CLEAN_HINT and design.hint_note is None


@pytest.mark.parametrize(
    ("plan", "answers"),
    [(["500", "500"], [CLEAN_HINT]), (["500", "ok"], [LEAK])],  # lost; a try lost, then a leak
)
def test_a_design_left_without_a_hint_by_an_outage_raises(corpus, plan, answers):
    lost = accepted_attempt("LostEnv", ["\\boxed{4213}"])
    fine = accepted_attempt("FineEnv", ["\\boxed{4213}"])
    with serve(Script({}, hints={"LostEnv": answers})) as server:
        server.plan(*plan)  # hint requests of one design go out one try at a time
        with pytest.raises(InferenceError, match=r"1 of 1 accepted designs got no hint.*500"):
            hint(server, config(server, corpus), [lost])
    assert lost.hint is None and lost.hint_note is not None
    with serve(Script({}, hints={"FineEnv": ["   ", LEAK]})) as server:
        hint(server, config(server, corpus), [fine])  # every try answered: no hint, no raise
    assert fine.hint is None and fine.hint_note == "hint revealed the solution"


def test_a_hint_that_repeats_itself_or_the_request_is_asked_again(corpus):
    """Two answers the 1.5B gave on the bundled examples: a label repeated to the length
    limit, and the request's own words (the `strategy` prompt's here) instead of a hint."""
    looped = "The hint is: 'The hint is: " * 40
    echoed = "Describe how to approach the task; do not reveal the answer, secret values."
    design = accepted_attempt("LoopEnv", ["\\boxed{4213}"])
    script = Script({}, hints={"LoopEnv": [looped, echoed, CLEAN_HINT]})
    with serve(script) as server:
        hint(server, config(server, corpus, hint_tries=3), [design])
    assert design.hint == CLEAN_HINT and script.calls == {"hint:LoopEnv": 3}
    tried_twice = accepted_attempt("LoopEnv", ["\\boxed{4213}"])
    script = Script({}, hints={"LoopEnv": [looped, echoed]})
    with serve(script) as server:
        hint(server, config(server, corpus, hint_tries=2), [tried_twice])
    assert tried_twice.hint is None
    assert tried_twice.hint_note == "hint repeated itself or the request"
