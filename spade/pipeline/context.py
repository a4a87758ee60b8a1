"""The round context: what every stage of one round shares, built once per round.

The flow (or the CLI) opens a :class:`RoundContext` at the start of a round: the campaign store
is built once with ``config.storage``'s options, the sandbox policy is read once from
``config.sandbox.policy_path`` (so every verified design and every played environment of the
round runs under the same policy, the one whose digest the verify stage records), and the
weights the round serves are named. Every stage function in :mod:`spade.pipeline` takes it
first; none reloads the policy or rebuilds the store.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from spade.config import CampaignConfig
from spade.pipeline.record import campaign_store
from spade.records import BASE, WeightsRef
from spade.sandbox.policy import SandboxPolicy, load_policy, policy_source
from spade.storage import CampaignStore


@dataclass(frozen=True)
class RoundContext:
    """What every stage of one round shares; built once per round by the flow (or the CLI)."""

    config: CampaignConfig
    campaign_id: str
    round: int
    store: CampaignStore  # built once, with config.storage's options (s3 endpoint etc.)
    policy: SandboxPolicy  # loaded once from config.sandbox.policy_path
    policy_sha256: str
    weights: WeightsRef  # what this round serves (the previous round's published weights)
    staleness: int = 0  # rounds the served weights lag the newest trained (run.overlap)

    @classmethod
    def open(
        cls,
        config: CampaignConfig,
        campaign_id: str,
        round: int,
        weights: WeightsRef | None = None,
    ) -> RoundContext:
        """The context of round ``round``: the store and the policy the config names, and
        ``weights`` (default: the base model; the round flow passes the previous round's
        published weights, :func:`spade.pipeline.state.carried_state`)."""
        policy = load_policy(config.sandbox.policy_path)
        return cls(
            config=config,
            campaign_id=campaign_id,
            round=round,
            store=campaign_store(config, campaign_id),
            policy=policy,
            policy_sha256=policy_source(policy).sha256,
            weights=BASE if weights is None else weights,
        )

    def serving(self, weights: WeightsRef, staleness: int | None = None) -> RoundContext:
        """The same round serving ``weights`` (the store and policy are shared, not rebuilt),
        ``staleness`` rounds behind the newest trained weights (default: as it was)."""
        lag = self.staleness if staleness is None else staleness
        return dataclasses.replace(self, weights=weights, staleness=lag)
