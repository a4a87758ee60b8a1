"""Fixtures shared by the flow tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def nothing_passes():
    """An OpenAI stand-in playing tests/flows/test_closed_loop.py's script: designs that fail
    at different depths of the verifier, the scripted hints and plays."""
    from spade.testing.openai_server import FakeOpenAIServer
    from tests.flows.test_closed_loop import NothingPasses

    with FakeOpenAIServer(script=NothingPasses()) as fake:
        yield fake
