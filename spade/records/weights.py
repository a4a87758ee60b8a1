"""Which weights a stage serves: a version label and the checkpoint that holds them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WeightsRef:
    """Which weights a stage uses: a version label and the checkpoint that holds them."""

    version: str = "base"
    checkpoint: str | None = None  # None: the configured base model
    kind: str = "full"  # "full" or "lora" (the checkpoint's kind)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "checkpoint": self.checkpoint, "kind": self.kind}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WeightsRef:
        return cls(str(data["version"]), data.get("checkpoint"), str(data.get("kind", "full")))


BASE = WeightsRef()
"""The configured base model (no checkpoint)."""
