"""What the html report costs a reader: its size and how soon it is interactive in Chromium.

    python -m bench.bench_html [--runs N] [PATH ...]       # default: the bundled corpus, 5 runs
    python -m bench.bench_html --screenshot docs/html-report.png   # the README's picture, again

Renders `erascope analyze PATH --format html`, then loads the page N times in headless Chromium
(the system's, as the tests find it) and reads when the page script finished wiring the chart and
the filters (`data-ready-ms`, `performance.now()` since navigation began). Beside it, the same
browser loads a page of the same size that runs nothing: the baseline of this machine's parsing and
painting, so the figures can be compared across runs on a shared machine. Targets (issue #19): the
corpus page under 5 MB and interactive within 2 s.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from analyzer.html_report import render_html
from analyzer.pipeline import analyze
from tests.browser import ARGS, find_chromium


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("paths", nargs="*", default=["captures/"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--screenshot", type=Path, help="also save the top of the page here (PNG, 128 colours)")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print("no Chromium found (set ERASCOPE_CHROMIUM)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    started = time.perf_counter()
    analysis = analyze(args.paths)
    analyzed = time.perf_counter()
    page = render_html(analysis)
    rendered = time.perf_counter()
    size = len(page.encode())
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.html"
        report.write_text(page, encoding="utf-8")
        inert = Path(tmp) / "inert.html"  # the same bytes as text: parsed and painted, nothing run
        inert.write_text("<!DOCTYPE html><pre>" + page.replace("&", "&amp;").replace("<", "&lt;") + "</pre>")
        ready: list[float] = []
        baseline: list[float] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=list(ARGS))
            for _ in range(args.runs):
                tab = browser.new_page(viewport={"width": 1300, "height": 900})
                tab.goto(report.as_uri())
                tab.wait_for_selector("#timeline[data-ready=true]", timeout=60_000)
                ready.append(float(tab.get_attribute("#timeline", "data-ready-ms") or "nan"))
                if args.screenshot is not None and len(ready) == 1:
                    _screenshot(browser, report, args.screenshot)
                tab.close()
                tab = browser.new_page(viewport={"width": 1300, "height": 900})
                tab.goto(inert.as_uri(), wait_until="load")
                baseline.append(tab.evaluate("() => performance.now()"))
                tab.close()
            browser.close()
    print(f"inputs {' '.join(args.paths)}: analyze {analyzed - started:.2f} s, html {rendered - analyzed:.2f} s")
    print(f"page size: {size / 1e6:.2f} MB (target < 5 MB)")
    print(
        f"interactive after: median {statistics.median(ready):.0f} ms, fastest {min(ready):.0f} ms"
        f" over {args.runs} load(s) (target < 2000 ms)"
    )
    ratio = statistics.median(ready) / statistics.median(baseline)
    print(
        f"baseline, a same-size page that runs nothing: median {statistics.median(baseline):.0f} ms,"
        f" fastest {min(baseline):.0f} ms; ratio of medians {ratio:.1f}x"
    )
    return 0


def _screenshot(browser: Any, report: Path, target: Path) -> None:
    """The summary and the whole timeline, in few colours (a README picture stays small)."""
    from PIL import Image

    tab = browser.new_page(viewport={"width": 1280, "height": 1500})
    tab.goto(report.as_uri())
    tab.wait_for_selector("#timeline[data-ready=true]", timeout=60_000)
    png = tab.screenshot(clip={"x": 0, "y": 0, "width": 1280, "height": 1500})
    tab.close()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128).save(target, optimize=True)


if __name__ == "__main__":
    sys.exit(main())
