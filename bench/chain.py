"""The round's publish step as the learnability benches drive it, one update at a time."""

from __future__ import annotations

import asyncio
from typing import Any


def publish_step(cfg: Any, campaign: str, step: int, role: str, uri: str) -> Any:
    """Publish the LoRA checkpoint at ``uri`` as update ``step`` of ``role`` (a GGUF adapter
    served by the pool's llama.cpp from then on): the weights to sample the next step with."""
    from spade.pipeline.context import RoundContext
    from spade.pipeline.publish import publish
    from spade.records import WeightsRef

    weights = WeightsRef(f"u{step:04d}-{role}", uri, "lora")
    return asyncio.run(publish(RoundContext.open(cfg, campaign, step), weights))
