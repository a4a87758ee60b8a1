"""Screenshots of the campaign dashboard for the docs: the rounds page and the designs gallery.

    .venv/bin/python scripts/screenshots.py --store ./runs --campaign demo-cpu --out docs/img

Serves the dashboard for the campaign as ``spade dashboard`` does
(``spade.cli.dashboard.streamlit_command``, in a process group of its own, stopped on the way
out), opens it in Debian's headless Chromium (``spade.testing.processes.chromium``) at a
1400x900 viewport and writes two viewport screenshots (what a reader sees first, not the whole
page): ``dashboard-rounds.png`` once the page's metrics and the charts in view are drawn, and
``dashboard-gallery.png``, scrolled to the tabs, once the "Environments" tab shows a design (or
says it has none).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The page is ready when the app's script run is over and, in the viewport, what `selector`
# names is shown, no skeleton is left and every chart is drawn; an exception is said as such.
READY_JS = """
(selector) => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid="stStatusWidgetRunningIcon"]')) return false;
  if (document.querySelector('[data-testid="stException"]')) return 'exception';
  const inView = (el) => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && r.top < window.innerHeight && r.bottom > 0;
  };
  if (![...document.querySelectorAll(selector)].some(inView)) return false;
  // a chart's code loads lazily: until then a skeleton stands in its place
  if ([...document.querySelectorAll('[data-testid="stSkeleton"]')].some(inView)) return false;
  const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')].filter(inView);
  return charts.every((c) => [...c.querySelectorAll('canvas, svg.marks')].some(inView));
}
"""
ROUNDS_READY = '[data-testid="stMetric"], [data-testid="stAlert"]'  # headline, or "no round"
GALLERY_READY = '[data-testid="stCode"], [data-testid="stAlert"]'  # a design, or "none yet"


@contextlib.contextmanager
def served(store: str, campaign: str, options: str | None, log: Path) -> Iterator[str]:
    """The URL of the dashboard of ``campaign`` in ``store``, served until the block ends."""
    from spade.cli.dashboard import streamlit_command, wait_ready
    from spade.processes import free_port, stop_process_group

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = streamlit_command(campaign, store, port, storage_options=options)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:  # the server's whole process group goes, whatever happens here
            if not wait_ready(proc, url):  # `spade dashboard`'s own health wait
                raise SystemExit(f"no dashboard at {url}:\n{log.read_text()[-3000:]}")
            yield url
        finally:
            stop_process_group(proc)


def wait_drawn(page: Any, selector: str, timeout_s: float) -> None:
    """Wait until READY_JS holds for ``selector``; an exception on the page ends the script."""
    handle = page.wait_for_function(READY_JS, arg=selector, polling="raf", timeout=timeout_s * 1000)
    if handle.json_value() == "exception":
        text = page.locator('[data-testid="stException"]').first.inner_text()
        raise SystemExit(f"the dashboard raised: {text}")
    page.evaluate("document.fonts.ready")


def shoot(url: str, campaign: str, out: Path, size: tuple[int, int], timeout_s: float) -> None:
    """Open ``url`` and write the rounds page's and the gallery's screenshots under ``out``."""
    from spade.testing.processes import chromium

    with chromium() as browser:
        page = browser.new_page(viewport={"width": size[0], "height": size[1]})
        page.goto(url)
        page.get_by_text(f"Campaign {campaign}", exact=True).wait_for(timeout=timeout_s * 1000)
        wait_drawn(page, ROUNDS_READY, timeout_s)
        page.screenshot(path=str(out / "dashboard-rounds.png"))
        page.get_by_role("tab", name="Environments").click()
        wait_drawn(page, GALLERY_READY, timeout_s)
        # the gallery from its tabs down: the headline above it is the rounds page's already
        page.get_by_role("tablist").first.evaluate("(e) => e.scrollIntoView({block: 'start'})")
        wait_drawn(page, GALLERY_READY, timeout_s)
        page.screenshot(path=str(out / "dashboard-gallery.png"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="Object store root (folder or s3://...).")
    parser.add_argument("--campaign", required=True, help="Campaign id in the store.")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img", help="Folder.")
    parser.add_argument("--storage-options", help="fsspec options of the store as JSON.")
    parser.add_argument("--width", type=int, default=1400, help="Viewport width (px).")
    parser.add_argument("--height", type=int, default=900, help="Viewport height (px).")
    parser.add_argument("--timeout", type=float, default=120.0, help="Seconds per page wait.")
    args = parser.parse_args(argv)

    from spade.dashboard.data import campaign_ids
    from spade.storage import ObjectStore
    from spade.testing.processes import CHROMIUM

    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} missing (scripts/bootstrap.sh installs Debian's chromium)")
    options = json.loads(args.storage_options) if args.storage_options else {}
    known = campaign_ids(ObjectStore(args.store, options))
    if args.campaign not in known:
        raise SystemExit(f"no campaign {args.campaign!r} in {args.store}; known: {known}")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(prefix="dashboard-", suffix=".log", delete=False) as f:
        log = Path(f.name)  # the server's output, kept only when something failed
    try:
        with served(args.store, args.campaign, args.storage_options, log) as url:
            shoot(url, args.campaign, args.out, (args.width, args.height), args.timeout)
    except BaseException:
        print(f"the dashboard server's log: {log}", file=sys.stderr)
        raise
    log.unlink()
    for name in ("dashboard-rounds.png", "dashboard-gallery.png"):
        print(args.out / name)


if __name__ == "__main__":
    sys.exit(main())
