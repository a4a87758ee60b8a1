"""Fixtures shared by the flow tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    """A tiny Llama policy folder (random weights, real tokenizer) the rounds train."""
    from spade.testing.scripted_designer import write_tiny_policy

    return write_tiny_policy(tmp_path_factory.mktemp("tiny-policy"))


@pytest.fixture
def nothing_passes():
    """An OpenAI stand-in playing tests/flows/test_closed_loop.py's script: designs that fail
    at different depths of the verifier, the scripted hints and plays."""
    from spade.testing.openai_server import FakeOpenAIServer
    from tests.flows.test_closed_loop import NothingPasses

    with FakeOpenAIServer(script=NothingPasses()) as fake:
        yield fake
