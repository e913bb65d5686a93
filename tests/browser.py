"""Headless Chromium for the html report's tests, driven by Playwright over the system's browser.

The browser is the distribution's (`chromium`, which `.ci/run` installs where it is missing);
Playwright's own browser download is never used. Found by `ERASCOPE_CHROMIUM`, then
/usr/bin/chromium, then `chromium` or `chromium-browser` on PATH.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ARGS = (
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def find_chromium() -> str | None:
    """The Chromium executable to test with, or None when this machine has none."""
    given = os.environ.get("ERASCOPE_CHROMIUM")
    if given:
        return given  # named on purpose: a wrong name should fail loudly, not skip
    if Path("/usr/bin/chromium").is_file():
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")
