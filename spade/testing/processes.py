"""Processes a test or a benchmark starts: the system's Chromium driven by
playwright (never ``playwright install``: the browser is Debian's, see scripts/bootstrap.sh)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextlib.contextmanager
def chromium(headless: bool = True) -> Iterator[Any]:
    """Debian's Chromium driven by PyPI's playwright (sync API); yields a ``Browser``.
    The caller checks that :data:`CHROMIUM` exists (a test skips, a benchmark stops)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=headless
        )
        try:
            yield browser
        finally:
            browser.close()
