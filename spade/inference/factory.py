"""Build the backend a campaign config asks for (imports only the backend it needs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from spade.config import CampaignConfig
from spade.inference.base import Backend


@asynccontextmanager
async def open_backend(cfg: CampaignConfig) -> AsyncIterator[Backend]:
    """The configured backend, started, and closed (server stopped) on exit."""
    inf = cfg.inference
    backend: Backend
    if inf.backend == "transformers":
        from spade.inference.hf import TransformersBackend

        backend = await asyncio.to_thread(TransformersBackend, cfg.model, inf)
    elif inf.backend == "openai":
        from spade.inference.openai import OpenAIBackend

        backend = OpenAIBackend(inf, inf.served_model or cfg.model.name_or_path)
    else:
        from spade.inference.vllm_server import ManagedVllmBackend

        managed = ManagedVllmBackend(inf, cfg.model.name_or_path)
        await asyncio.to_thread(managed.start)
        backend = managed
    try:
        yield backend
    finally:
        await backend.aclose()
