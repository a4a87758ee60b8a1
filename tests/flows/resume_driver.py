"""Run a campaign in a child process (the SIGKILL test kills this process mid-round).

Usage: python -m tests.flows.resume_driver CONFIG_JSON CAMPAIGN_ID [ROUNDS]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from flows.campaign import campaign_flow
from spade.config import CampaignConfig

if __name__ == "__main__":
    config = CampaignConfig.model_validate_json(Path(sys.argv[1]).read_text())
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else None  # as `spade run --rounds N`
    asyncio.run(campaign_flow(config=config, campaign_id=sys.argv[2], rounds=rounds))
