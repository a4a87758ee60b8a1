"""Start the dashboard's Streamlit server warm: what ``spade dashboard`` runs.

    python dashboards/serve.py run dashboards/app.py --server.port 8501 -- --store ./runs \\
        --campaign ID [--storage-options JSON]

The arguments are ``streamlit``'s own. Before Streamlit starts listening, this process imports
what the app's script needs (Streamlit's chart and table code, pandas, pyarrow, the data
layer) and reads the campaign into the loader the app's sessions share
(``spade.dashboard.data.loader``): the overview, the memory, the latest round's details. A
plain ``streamlit run`` does all of that inside the first visitor's page load, where it took
most of the ~5 s; here it is paid once, at server start, before the URL is printed as ready.
Warming is best-effort: if it fails, the app reads the campaign itself and shows any error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def app_settings(app_args: list[str]) -> tuple[str, str | None, str]:
    """Store, campaign and storage options (as the app keys its loader) from the app flags."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--store", default="./runs")
    parser.add_argument("--campaign")
    parser.add_argument("--storage-options", default="{}")
    args, _unknown = parser.parse_known_args(app_args)
    options = json.dumps(json.loads(args.storage_options), sort_keys=True)
    return args.store, args.campaign, options


def warm(app_args: list[str]) -> dict[str, Any]:
    """Import the app's modules and read its campaign; what was done, for the log."""
    import detail_tabs  # noqa: F401  (dashboards/ is sys.path[0]: this script's folder)
    import pandas as pd
    from streamlit import dataframe_util

    from spade.dashboard import charts
    from spade.dashboard.data import loader

    store, campaign, options = app_settings(app_args)
    if not campaign:
        return {"campaign": None}
    ov = loader(store, campaign, options).warm()
    # One chart's and one table's conversion to Arrow: the lazy imports behind them load now.
    spec = charts.lines(charts.per_round({r.round: {"regret": r.regret} for r in ov.rounds}))
    dataframe_util.convert_anything_to_arrow_bytes(spec["datasets"][charts.DATASET])
    dataframe_util.convert_anything_to_arrow_bytes(pd.DataFrame(ov.rows()))
    return {"campaign": campaign, "rounds": len(ov.rounds)}


def main() -> None:
    argv = sys.argv[1:]
    app_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    t0 = time.perf_counter()
    try:  # best-effort: a failure here is the app's to show, on the page
        done = warm(app_args)
        print(f"dashboard warmed in {time.perf_counter() - t0:.1f} s: {done}", flush=True)
    except Exception as exc:
        print(f"dashboard warm-up failed ({exc!r}); the app reads the campaign", flush=True)
    from streamlit.web import cli

    sys.argv = ["streamlit", *argv]
    cli.main()


if __name__ == "__main__":
    main()
