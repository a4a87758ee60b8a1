"""One tick of a scheduled campaign in a child process: the next N rounds of a named campaign.

Usage: python -m tests.flows.tick_driver CONFIG_JSON CAMPAIGN_ID MORE_ROUNDS
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from flows.campaign import campaign_flow
from spade.config import CampaignConfig

if __name__ == "__main__":
    config = CampaignConfig.model_validate_json(Path(sys.argv[1]).read_text())
    more = int(sys.argv[3])
    asyncio.run(campaign_flow(config=config, campaign_id=sys.argv[2], more_rounds=more))
