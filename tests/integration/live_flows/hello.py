"""A tiny flow for live-Prefect tests: a typed (pydantic) parameter and one task writing a file.

Deployed from source (the repository root) by `tests/integration/test_prefect_live.py`; a
process worker imports it as `tests/integration/live_flows/hello.py:hello`. It imports only
prefect and pydantic so the worker's subprocess starts fast.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow, task
from pydantic import BaseModel, Field


class Greeting(BaseModel):
    """Rendered by the Prefect UI as a nested form (`name`, `times`)."""

    name: str = Field(default="world", description="who is greeted")
    times: int = Field(default=1, ge=1, le=10, description="how often")


@task
def write_greeting(greeting: Greeting, out_path: str) -> str:
    text = " ".join([f"hello {greeting.name}"] * greeting.times)
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"text": text, "greeting": greeting.model_dump()}))
    return text


@flow(name="live-hello", persist_result=False)
def hello(out_path: str, greeting: Greeting = Greeting()) -> str:  # noqa: B008
    return write_greeting(greeting, out_path)
