"""A stand-in for the ranks' entry point (``python -m tests.training.sleeping_rank JOB_DIR``):
it writes its pid to ``JOB_DIR/rank-<RANK>.pid`` and sleeps, as a rank in a long step does."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    folder = Path(sys.argv[1])
    (folder / f"rank-{os.environ['RANK']}.pid").write_text(str(os.getpid()))
    time.sleep(600)
