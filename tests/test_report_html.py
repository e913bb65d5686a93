"""`--format html`: one self-contained page, checked as a string and in a real browser.

The browser tests load the bundled corpus report and a hostile capture's report in headless
Chromium (the system's, see `tests/browser.py`), with every request other than the page itself
recorded and refused: the page must work offline, log no error, give each server a lane and each
finding a marker in the chart's data, show a captured message when an evidence line is clicked,
and run nothing a capture wrote.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from analyzer import html_report
from analyzer.cli import app
from analyzer.html_report import render_html, script_json
from analyzer.pipeline import Analysis, analyze
from tests.browser import ARGS, find_chromium
from tests.test_messages import Cap, err, init, init_result, probe
from tests.test_report_hostile import HOSTILE, SERVER, hostile_dir  # noqa: F401 - the fixture is used by name

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "captures"


@pytest.fixture(scope="module")
def corpus() -> Analysis:
    return analyze([str(CORPUS)])


@pytest.fixture(scope="module")
def corpus_page(corpus: Analysis, tmp_path_factory: pytest.TempPathFactory) -> Path:
    page = tmp_path_factory.mktemp("html") / "report.html"
    page.write_text(render_html(corpus), encoding="utf-8")
    return page


@pytest.fixture(scope="module")
def hostile_page(hostile_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    page = tmp_path_factory.mktemp("html-hostile") / "report.html"
    page.write_text(render_html(analyze([str(hostile_dir)])), encoding="utf-8")
    return page


# --- the page as a string ------------------------------------------------------------------------
def test_script_json_cannot_end_its_element() -> None:
    text = script_json({"a": "</script><!-- & \u2028\u2029 >"})
    assert not re.search("[<>&\u2028\u2029]", text)
    assert orjson.loads(text) == {"a": "</script><!-- & \u2028\u2029 >"}


def test_the_page_is_one_file_with_nothing_to_fetch(corpus_page: Path) -> None:
    page = corpus_page.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""<(script|link|img|iframe)[^>]*\s(src|href)=["']?(https?:)?//""", page, re.I)
    assert re.search(r'http-equiv="Content-Security-Policy" content="default-src &#39;none&#39;;', page)
    assert len(page.encode()) < 5_000_000


def test_hostile_strings_are_never_markup(hostile_page: Path) -> None:
    page = hostile_page.read_text(encoding="utf-8")
    assert "<script>alert(1)</script>" not in page
    assert "<img src=x" not in page and '" onmouseover="alert' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, as text


def test_cli_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["analyze", "-q", str(CORPUS), "--format", "HTML", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def _many_probes(out: Path, count: int) -> Path:
    cap = Cap(out, server="busy")
    for i in range(count):
        cap.c2s(probe(i))
        cap.s2c(err(i, -32601, "x" * 50))
    cap.c2s(init(count))
    cap.s2c(init_result(count))
    cap.close()
    return out


def test_large_analyses_are_capped_and_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    analysis = analyze([str(_many_probes(tmp_path, 40))])
    monkeypatch.setattr(html_report, "MAX_MARKS", 10)
    monkeypatch.setattr(html_report, "MAX_PAYLOAD_CHARS", 40)
    page = render_html(analysis)
    chart = _json_block(page, "chart-data")
    marks = _source(chart, "marks")
    assert len(marks["x"]) <= 10 and sum(marks["count"]) == 41  # 40 probes and 1 initialize, in buckets
    assert "aggregated into" in page
    payloads = _json_block(page, "page-data")["payloads"]
    assert payloads and all(len(p["text"]) <= 40 + len("\n… (truncated)") for p in payloads.values())
    assert "shown truncated" in page


def _json_block(page: str, name: str) -> Any:
    m = re.search(f'<script type="application/json" id="{name}">(.*?)</script>', page, re.S)
    assert m is not None
    return orjson.loads(m[1])


def _source(item: Any, name: str) -> dict[str, list[Any]]:
    """The data of the chart's column data source `name`, from its `json_item` document."""
    found: list[dict[str, list[Any]]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("name") == "ColumnDataSource" and node.get("attributes", {}).get("name") == name:
                data = node["attributes"]["data"]
                found.append({e[0]: e[1] for e in data["entries"]} if "entries" in data else data)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(item)
    assert len(found) == 1, f"{len(found)} sources named {name}"
    return found[0]


# --- in the browser ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium on this machine (install Debian's `chromium`, or set ERASCOPE_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=list(ARGS))
        yield b
        b.close()


class Opened:
    """A page loaded from a file, with what it logged, asked for and popped up."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.url = path.as_uri()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        self.page.route("**/*", self._route)
        self.page.goto(self.url)
        self.page.wait_for_selector("#timeline[data-ready=true]", timeout=60_000)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url == self.url:
            route.continue_()
        else:
            self.requests.append(url)
            route.abort()

    def chart(self, script: str) -> Any:
        """Evaluate `script` with `chart` bound to the timeline figure's model."""
        return self.page.evaluate(
            "() => { const chart = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('timeline');"
            f" return ({script}); }}"
        )


@pytest.fixture(scope="module")
def opened(browser: Any, corpus_page: Path) -> Iterator[Opened]:
    o = Opened(browser, corpus_page)
    yield o
    o.page.close()


def test_the_corpus_page_loads_offline_without_errors(opened: Opened) -> None:
    assert opened.errors == []
    assert opened.requests == []


def test_each_server_has_a_lane(opened: Opened, corpus: Analysis) -> None:
    lanes = opened.chart("chart.y_range.factors")
    assert len(lanes) == len(set(lanes)) == len(corpus.servers) > 1
    eras = opened.page.evaluate(
        "() => Array.from(Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('eras').data.lane)"
    )
    assert set(eras) == set(lanes)  # every lane holds its server's eras


def test_each_finding_has_a_marker(opened: Opened, corpus: Analysis) -> None:
    data = opened.page.evaluate(
        "() => { const d = Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('findings').data;"
        " return {index: Array.from(d.index), lane: Array.from(d.lane)}; }"
    )
    assert sorted(data["index"]) == list(range(len(corpus.findings))) and corpus.findings
    assert opened.page.locator(".finding").count() == len(corpus.findings)
    lanes = set(opened.chart("chart.y_range.factors"))
    assert set(data["lane"]) <= lanes


def test_clicking_an_evidence_line_shows_the_captured_message(opened: Opened) -> None:
    button = opened.page.locator(".finding .ev").first
    at = button.text_content() or ""
    button.click()
    shown = opened.page.locator(".finding .payload").first
    shown.wait_for(state="visible")
    text = shown.text_content() or ""
    assert '"jsonrpc"' in text and "— record —" in text
    place = opened.page.locator(".finding .payload-at").first.text_content() or ""
    assert place and at.startswith(place.split(" — ")[0])  # file:line of the line clicked


def test_filters_hide_what_they_leave_out(opened: Opened, corpus: Analysis) -> None:
    server = corpus.findings[0].server
    opened.page.select_option("#filter-server", server)
    try:
        visible = opened.page.locator(".finding:visible").count()
        assert visible == sum(f.server == server for f in corpus.findings)
        assert opened.chart("chart.y_range.factors.length") == 1
    finally:
        opened.page.select_option("#filter-server", "")
    assert opened.page.locator(".finding:visible").count() == len(corpus.findings)
    markers = "Bokeh.documents[Bokeh.documents.length - 1].get_model_by_name('shown-findings').indices.length"
    assert opened.page.evaluate(f"() => {markers}") == len(corpus.findings)
    opened.page.uncheck(".filter-severity[value=warning]")
    try:
        left = sum(f.severity.value != "warning" for f in corpus.findings)
        assert opened.page.locator(".finding:visible").count() == left < len(corpus.findings)
        assert opened.page.evaluate(f"() => {markers}") == left  # the chart's markers follow
    finally:
        opened.page.check(".filter-severity[value=warning]")


def test_tapping_a_finding_marker_brings_its_finding_into_view(opened: Opened) -> None:
    opened.page.set_viewport_size({"width": 1300, "height": 1600})  # the whole chart on screen
    try:
        opened.page.evaluate("() => window.scrollTo(0, 0)")
        last = opened.page.evaluate("() => document.querySelectorAll('.finding').length - 1")
        x, y, index = opened.page.evaluate(_FINDING_ON_SCREEN, last)
        opened.page.mouse.click(x, y)
        tapped = opened.page.locator(f"#f{index}")
        tapped.wait_for(state="visible")
        opened.page.wait_for_function(f"() => document.getElementById('f{index}').classList.contains('tapped')")
        assert tapped.is_visible() and opened.page.evaluate("() => window.scrollY") > 0
    finally:
        opened.page.set_viewport_size({"width": 1300, "height": 900})


def test_the_screenshot_is_not_blank(opened: Opened, tmp_path: Path) -> None:
    from PIL import Image

    png = opened.page.screenshot()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50  # text, era colours, markers: far from a uniform page
    assert max(n for n, _ in colours) < 0.95 * image.width * image.height


_FINDING_ON_SCREEN = """(k) => {
  const doc = Bokeh.documents[Bokeh.documents.length - 1];
  const view = Bokeh.index.get_one(doc.get_model_by_name('timeline'));
  const data = doc.get_model_by_name('findings').data;
  const x = view.frame.x_scale.compute(data.x[k]);
  const y = view.frame.y_scale.compute(view.model.y_range.synthetic([data.lane[k], 0.3]));
  const box = view.canvas_view.el.getBoundingClientRect();
  return [box.left + x, box.top + y, data.index[k]];
}"""
"""Where the k-th finding marker is on the screen (from the chart's own scales), and its finding's index."""
_SHADOW_WALK = """(() => {
  const found = [];
  const walk = (root) => root.querySelectorAll('*').forEach((el) => {
    found.push(el);
    if (el.shadowRoot) walk(el.shadowRoot);
  });
  walk(document);
  return found;
})()"""
_TOOLTIP_TEXT = (
    f"() => {_SHADOW_WALK}.filter((el) => /tooltip/i.test(String(el.className)))"
    ".map((el) => el.textContent).join(' ')"
)
"""Bokeh's tooltips live in shadow roots: the text of every tooltip element on the page."""
_TOOLTIP_IMAGES = f"() => {_SHADOW_WALK}.filter((el) => el.tagName === 'IMG').length"


def test_hostile_strings_render_as_text_and_run_nothing(browser: Any, hostile_page: Path) -> None:
    o = Opened(browser, hostile_page)
    try:
        for cell in o.page.locator("td, .finding, .ev").all():  # any onmouseover would fire here
            cell.hover()
        o.page.locator(".ev").first.click()
        o.page.mouse.move(*o.page.evaluate(_FINDING_ON_SCREEN, 0)[:2])  # its tooltip names the hostile server
        o.page.wait_for_function(f"() => ({_TOOLTIP_TEXT})().includes('stdout-pollution')")
        tooltip = o.page.evaluate(_TOOLTIP_TEXT)
        assert "<script>alert(1)</script>" in tooltip and '" onmouseover="alert(1)"' in tooltip
        assert o.page.evaluate(_TOOLTIP_IMAGES) == 0
        text = o.page.locator("body").inner_text()
        assert "<script>alert(1)</script>" in text
        assert '" onmouseover="alert(1)"' in text
        assert o.page.locator("img").count() == 0
        assert o.dialogs == [] and o.errors == [] and o.requests == []
        assert o.page.evaluate("() => document.querySelectorAll('script').length") == 4  # the page's own
        assert SERVER[:4] in (o.page.locator("#servers").inner_text())
    finally:
        o.page.close()


def test_payloads_are_read_from_compressed_captures_and_missing_files_are_said(tmp_path: Path) -> None:
    import gzip

    plain = _many_probes(tmp_path / "caps", 2)
    (capture,) = plain.glob("*.jsonl")
    packed = capture.with_name(capture.name + ".gz")
    packed.write_bytes(gzip.compress(capture.read_bytes()))
    capture.unlink()
    analysis = analyze([str(plain)])
    payloads = _json_block(render_html(analysis), "page-data")["payloads"]
    assert payloads and all('"jsonrpc"' in p["text"] and p["at"].startswith(str(packed)) for p in payloads.values())
    packed.unlink()  # gone after the analysis: the page says so instead of failing
    payloads = _json_block(render_html(analysis), "page-data")["payloads"]
    assert all(p["text"] == "" and "could not be read again" in p["note"] for p in payloads.values())



def _rendered_beside_a_fifo(analysis: Any, fifo: Path) -> str:
    """The page of `analysis`, one of whose inputs is now the FIFO `fifo`: failed when rendering
    blocked on it (opening a FIFO for reading waits for a writer forever)."""
    import threading

    pages: list[str] = []
    worker = threading.Thread(target=lambda: pages.append(render_html(analysis)), daemon=True)
    worker.start()
    worker.join(20)
    blocked = worker.is_alive()
    if blocked:  # let the blocked open go before failing
        with open(fifo, "wb"):
            pass
        worker.join(5)
    assert not blocked, "rendering blocked on a FIFO"
    return pages[0]

def test_a_capture_replaced_by_a_fifo_after_the_analysis_is_not_opened(tmp_path: Path) -> None:
    import os

    caps = _many_probes(tmp_path / "caps", 2)
    (capture,) = caps.glob("*.jsonl")
    analysis = analyze([str(caps)])
    capture.unlink()
    os.mkfifo(capture)  # opening it for reading would wait for a writer forever
    payloads = _json_block(_rendered_beside_a_fifo(analysis, capture), "page-data")["payloads"]
    assert payloads and all(p["text"] == "" and "could not be read again" in p["note"] for p in payloads.values())


# server keys whose shortened labels collide with each other and with a numbered label
_CLASHING_KEYS = ["p" * 41 + "\u2026 #3", "p" * 41 + "\u2192" * 20, "p" * 41 + "\u2192" * 21]


def test_lane_labels_are_unique_however_keys_clash() -> None:
    keys = [*_CLASHING_KEYS, "q" * 60, "q" * 61, "q" * 62, "", "(empty)"]
    labels = html_report._lane_labels(keys)
    assert len(set(labels.values())) == len(keys)
    assert all(len(label) <= html_report._LANE_LABEL for label in labels.values())


def test_a_page_with_clashing_lane_labels_renders(browser: Any, tmp_path: Path) -> None:
    for n, server in enumerate(_CLASHING_KEYS):
        cap = Cap(tmp_path / "caps", server=server, conn=f"c{n}")
        cap.c2s(probe(1))
        cap.s2c(err(1, -32601, "no such method"))
        cap.close()
    page = tmp_path / "report.html"
    page.write_text(render_html(analyze([str(tmp_path / "caps")])), encoding="utf-8")
    o = Opened(browser, page)  # waits for the timeline to be drawn
    try:
        assert o.errors == []
        lanes = o.chart("chart.y_range.factors")
        assert len(lanes) == len(set(lanes)) == 3
    finally:
        o.page.close()


def test_a_har_named_with_a_control_character_is_cited_by_entry(tmp_path: Path) -> None:
    """The page's evidence names files as shown (`\\t` for a tab), but the kind of each file was
    looked up by its real name: a HAR entry's message was cited as `file:1` and said to be a line
    that could not be read again, instead of pointing into the HAR."""
    from mitmproxy.addons.savehar import SaveHar

    from tests.test_foreign import _flows

    path = tmp_path / "in\tcident.har"
    path.write_bytes(orjson.dumps(SaveHar().make_har(_flows())))
    payloads = _json_block(render_html(analyze([str(path)])), "page-data")["payloads"]
    shown = str(tmp_path / "in\\tcident.har")
    assert payloads and all(p["at"].startswith(f"{shown}#entry=") for p in payloads.values())
    assert all('"type": "http.request"' in p["text"] for p in payloads.values())  # read from the real name


def _foreign(path: Path, flows: list[Any]) -> Path:
    """`flows` written by mitmproxy's own writers: its HAR export for `*.har`, else a dump."""
    from mitmproxy.addons.savehar import SaveHar

    from tests.test_foreign import _dump

    if path.suffix == ".har":
        path.write_bytes(orjson.dumps(SaveHar().make_har(flows)))
        return path
    return _dump(path, flows)


@pytest.mark.parametrize(("name", "unit"), [("x.har", "entry"), ("x.flows", "flow")])
def test_har_entries_and_dump_flows_show_the_records_the_analysis_read(tmp_path: Path, name: str, unit: str) -> None:
    """The page said only "the capture is a HAR file: open it at x.har#entry=1": a postmortem written
    from a HAR export or a dump showed none of the messages its evidence cites. An entry or flow is
    every record the analysis read from it (the request, its answer, an event stream's events), as
    the converter made them: the recorder's records, redacted as the analysis read them."""
    from tests.test_foreign import _flows

    flows = _flows()
    flows[0].request.headers["authorization"] = "Bearer sekrit-token-0451"
    path = _foreign(tmp_path / name, flows)
    page = render_html(analyze([str(path)]))
    by_at = {p["at"]: p for p in _json_block(page, "page-data")["payloads"].values()}
    assert set(by_at) == {f"{path}#{unit}=1", f"{path}#{unit}=2"}
    probe_text, init_text = by_at[f"{path}#{unit}=1"]["text"], by_at[f"{path}#{unit}=2"]["text"]
    # the probe, and the DiscoverResult its event stream carried
    assert '"method": "server/discover"' in probe_text and '"supportedVersions": [' in probe_text
    for kind in ("http.request", "http.response", "sse.event", "sse.end"):
        assert f'"type": "{kind}"' in probe_text, kind
    assert probe_text.index('"type": "http.request"') < probe_text.index('"type": "sse.event"')
    assert '"method": "initialize"' in init_text and "server/discover" not in init_text
    assert '"type": "sse.event"' not in init_text and '"protocolVersion"' in init_text
    assert all("open it at" not in p["note"] and "as the analysis read" in p["note"] for p in by_at.values())
    assert "sekrit-token-0451" not in page and '"authorization",\n      "Bearer hmac:' in probe_text


def test_a_real_mitmproxy_10_dump_shows_the_probe_it_cites() -> None:
    """A dump written by mitmproxy 10.4.2 (flow format 20, upgraded as mitmproxy reads it): the probe
    and its DiscoverResult, as the analysis read them."""
    path = ROOT / "tests" / "data" / "mitmproxy-10.4.2.flows"
    payloads = _json_block(render_html(analyze([str(path)])), "page-data")["payloads"]
    (cited,) = payloads.values()
    assert cited["at"] == f"{path}#flow=1"
    assert '"method": "server/discover"' in cited["text"] and '"supportedVersions": [' in cited["text"]


def test_a_flow_of_many_records_is_cut_as_a_long_message_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTTP+SSE stream kept whole is one flow holding every answer of its session: its records are
    bounded as a capture line is (`_MAX_LINE` bytes read, `MAX_PAYLOAD_CHARS` shown), and the page
    says what it left out."""
    from tests.test_foreign import _http_sse_session

    analysis = analyze([str(_foreign(tmp_path / "x.flows", _http_sse_session(0.05)))])

    def stream() -> tuple[dict[str, Any], str]:
        page = render_html(analysis)
        payloads = _json_block(page, "page-data")["payloads"].values()
        return next(p for p in payloads if p["at"].endswith("#flow=1")), page

    whole, _ = stream()
    headings = re.findall(r"^— (\d) of 6: ([a-z.]+) —$", whole["text"], re.M)
    assert [n for n, _ in headings] == list("123456") and headings[-1][1] == "sse.end"
    monkeypatch.setattr(html_report, "MAX_PAYLOAD_CHARS", 400)
    cut, page = stream()
    assert len(cut["text"]) == 400 + len("\n… (truncated)") and cut["text"].startswith("— 1 of 6: http.request —")
    assert "truncated to 400 characters" in cut["note"] and "shown truncated" in page
    monkeypatch.setattr(html_report, "MAX_PAYLOAD_CHARS", 100_000)
    monkeypatch.setattr(html_report, "_MAX_LINE", 1)  # the first record of a flow is kept, no more
    first, _ = stream()
    assert "— 1 of 6: http.request —" in first["text"] and "— 2 of 6" not in first["text"]
    assert first["text"].endswith("… (5 more records not shown)") and "truncated" in first["note"]


def test_an_archived_flow_of_many_messages_is_bounded_as_a_line_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read back from an archive, a long stream's messages are bounded as the file's records are: the
    first `_MAX_LINE` bytes of them kept, and the page says how many it left out."""
    from analyzer.compact import compact
    from tests.test_foreign import _http_sse_session

    compact([str(_foreign(tmp_path / "x.flows", _http_sse_session(0.05)))], tmp_path / "archive")
    analysis = analyze([str(tmp_path / "archive")])

    def stream() -> dict[str, Any]:
        payloads = _json_block(render_html(analysis), "page-data")["payloads"].values()
        return next(p for p in payloads if p["at"].endswith("#flow=1"))

    whole = stream()
    count = len(re.findall(r"^— \d+ of \d+", whole["text"], re.M))
    assert count > 1 and f"{count} messages of this flow, read back from the archive" in whole["note"]
    monkeypatch.setattr(html_report, "_MAX_LINE", 1)  # messages kept until one holds a byte (an empty body holds none)
    first = stream()
    shown = len(re.findall(r"^— \d+ of \d+", first["text"], re.M))
    assert 1 <= shown < count and first["text"].startswith(f"— 1 of {count}")
    assert first["text"].endswith(f"… ({count - shown} more records not shown)")


@pytest.mark.parametrize("name", ["x.har", "x.flows"])
def test_a_har_or_dump_changed_or_gone_after_the_analysis_is_said_not_shown(tmp_path: Path, name: str) -> None:
    """The entry and flow numbers cited are those of the file the analysis read: a file rewritten
    since then holds other entries under them, so nothing is shown from it; a file gone, or replaced
    by a FIFO (opening it would wait for a writer forever), is never opened and said so."""
    import os

    from tests.test_foreign import _flows

    path = _foreign(tmp_path / name, _flows())
    analysis = analyze([str(path)])
    _foreign(path, list(reversed(_flows())))  # entry 1 is now the initialize
    payloads = _json_block(render_html(analysis), "page-data")["payloads"]
    assert payloads and all(p["text"] == "" and "changed since the analysis" in p["note"] for p in payloads.values())
    path.unlink()
    payloads = _json_block(render_html(analysis), "page-data")["payloads"]
    assert payloads and all(p["text"] == "" and "could not be read again" in p["note"] for p in payloads.values())
    os.mkfifo(path)
    payloads = _json_block(_rendered_beside_a_fifo(analysis, path), "page-data")["payloads"]
    assert payloads and all(p["text"] == "" and "could not be read again" in p["note"] for p in payloads.values())


def test_a_har_read_from_an_archive_is_shown_from_the_archive_and_never_opened(tmp_path: Path) -> None:
    """An archive's entry names the file it was made from, which may be anything by now (here a FIFO):
    the page converts no file an archive names, and shows the entry's messages from the archive's rows
    (it showed nothing: "open the HAR file itself")."""
    import os

    from analyzer.compact import compact
    from tests.test_foreign import _flows

    (tmp_path / "in").mkdir()
    har = _foreign(tmp_path / "in" / "x.har", _flows())
    compact([str(har)], tmp_path / "archive")
    analysis = analyze([str(tmp_path / "archive")])
    har.unlink()
    os.mkfifo(har)
    payloads = _json_block(_rendered_beside_a_fifo(analysis, har), "page-data")["payloads"]
    assert payloads and all(p["at"].startswith(f"{har}#entry=") for p in payloads.values())
    assert all("read back from the archive" in p["note"] for p in payloads.values())
    texts = "".join(p["text"] for p in payloads.values())
    assert '"method": "server/discover"' in texts and '"supportedVersions"' in texts


_BREAKOUT = "</script><script>alert(1)</script><img src=x onerror=alert(1)><!--"


def test_a_hostile_har_entry_is_shown_as_text_and_runs_nothing(browser: Any, tmp_path: Path) -> None:
    """A HAR's messages are inlined now: whatever its bodies and headers say stays text in the page."""
    from mitmproxy import http

    from tests.test_foreign import _flow

    flow = _flow(probe(1), err(1, -32601, "msg-" + _BREAKOUT + HOSTILE), sse=False, start=1796000000.0)
    assert flow.response is not None
    flow.response.headers["x-served-by"] = _BREAKOUT
    flow.request.headers["user-agent"] = "ua-" + _BREAKOUT
    flows: list[http.HTTPFlow] = [flow]
    path = _foreign(tmp_path / "hostile.har", flows)
    page_file = tmp_path / "report.html"
    page_file.write_text(render_html(analyze([str(path)])), encoding="utf-8")
    page = page_file.read_text(encoding="utf-8")
    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
    payloads = _json_block(page, "page-data")["payloads"]
    assert any(_BREAKOUT in p["text"] and '"code": -32601' in p["text"] for p in payloads.values())
    o = Opened(browser, page_file)
    try:
        button = o.page.locator(f".ev[data-payload='{next(iter(payloads))}']").first
        button.click()
        shown = o.page.locator(".payload:visible").first
        shown.wait_for(state="visible")
        assert _BREAKOUT in (shown.text_content() or "")
        assert "#entry=1" in (o.page.locator(".payload-at:visible").first.text_content() or "")
        assert o.page.locator("img").count() == 0
        assert o.dialogs == [] and o.errors == [] and o.requests == []
        assert o.page.evaluate("() => document.querySelectorAll('script').length") == 4  # the page's own
    finally:
        o.page.close()


def test_the_timeline_of_many_servers_is_still_drawn(browser: Any, tmp_path: Path) -> None:
    """Each lane added 46 px to the chart: past 65,535 device pixels (about 1,400 servers on a plain
    screen, 470 at a device pixel ratio of 3) Chromium gives the canvas no pixels and the timeline
    was blank, without any error."""
    from PIL import Image

    for n in range(500):
        cap = Cap(tmp_path / "caps", server=f"https://h{n}.example.com/mcp", conn=f"c{n}")
        cap.c2s(probe(1))
        cap.s2c(err(1, -32601, "no such method"))
        cap.close()
    page = tmp_path / "report.html"
    page.write_text(render_html(analyze([str(tmp_path / "caps")])), encoding="utf-8")
    assert "500 servers&#39; lanes share the timeline" in page.read_text(encoding="utf-8")
    context = browser.new_context(viewport={"width": 1300, "height": 900}, device_scale_factor=3)
    try:
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(page.as_uri())
        tab.wait_for_selector("#timeline[data-ready=true]", timeout=60_000)
        box = tab.locator("#timeline").bounding_box()
        assert box is not None
        png = tab.screenshot(clip={"x": box["x"], "y": box["y"], "width": box["width"], "height": 800}, scale="css")
        colours = Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 20) or []
        eras = {tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in html_report.ERA_COLORS.values()}
        assert sum(n for n, rgb in colours if rgb in eras) > 100, "no lane is drawn"
        assert errors == []
    finally:
        context.close()


@pytest.mark.parametrize("where", ["message", "record"])
def test_a_message_nested_too_deep_to_pretty_print_is_shown_as_captured(tmp_path: Path, where: str) -> None:
    """A probe whose params (or a record field beside it) nest 1,000 levels: orjson writes 255, and the
    fallback that fixes lone surrogates recursed past Python's limit, a RecursionError traceback."""
    import json

    deep = "[" * 1000 + "]" * 1000
    raw = '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"x":' + deep + "}}"
    answer = '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'
    base = {"type": "frame", "conn": "c1", "server": "deep", "nl": True}
    records = [
        {"type": "header", "format": "erascope/1", "tool": "erascope", "transport": "stdio", "part": 0,
         "server": "deep", "seq": 0, "ts": 1_800_000_000.0, "mono": 0.0},
        {**base, "dir": "c2s", "raw": raw if where == "message" else raw.replace(deep, "1"), "len": len(raw),
         "seq": 1, "ts": 1_800_000_000.1, "mono": 0.1, **({"extra": json.loads(deep)} if where == "record" else {})},
        {**base, "dir": "s2c", "raw": answer, "len": len(answer), "seq": 2, "ts": 1_800_000_000.2, "mono": 0.2},
    ]  # fmt: skip
    path = tmp_path / "deep.jsonl"
    # written by the standard library: orjson refuses to write what it nests that deep
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    payloads = _json_block(render_html(analyze([str(path)])), "page-data")["payloads"]
    texts = [p["text"] for p in payloads.values()]
    assert any("[[[[" in t and "server/discover" in t for t in texts), texts


@pytest.mark.parametrize("where", ["message", "record"])
def test_a_record_holding_a_lone_surrogate_escape_is_pretty_printed_as_written(tmp_path: Path, where: str) -> None:
    """JSON allows `\\ud800` (a client naming itself `c\\ud800`, or a record field so spelled), and the
    analyzer reads it: orjson refuses it, so the cited record was shown as one raw line, its message
    not laid out, where any other record is pretty-printed. The escape is shown as written."""
    raw = '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"name":"cLONE"}}'
    answer = '{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'
    base = {"type": "frame", "conn": "c1", "server": "lone", "nl": True}
    records = [
        {"type": "header", "format": "erascope/1", "tool": "erascope", "transport": "stdio", "part": 0,
         "server": "lone", "seq": 0, "ts": 1_800_000_000.0, "mono": 0.0},
        {**base, "dir": "c2s", "raw": raw if where == "message" else raw.replace("LONE", ""), "len": len(raw),
         "seq": 1, "ts": 1_800_000_000.1, "mono": 0.1, **({"extra": "xLONE"} if where == "record" else {})},
        {**base, "dir": "s2c", "raw": answer, "len": len(answer), "seq": 2, "ts": 1_800_000_000.2, "mono": 0.2},
    ]  # fmt: skip
    path = tmp_path / "lone.jsonl"
    # in the message, the escape is the payload's own (`\\ud800` in the line); in a record field, the line's
    lone = b"\\\\ud800" if where == "message" else b"\\ud800"
    path.write_bytes(b"".join(orjson.dumps(r).replace(b"LONE", lone) + b"\n" for r in records))
    payloads = _json_block(render_html(analyze([str(path)])), "page-data")["payloads"]
    (text,) = [p["text"] for p in payloads.values() if "server/discover" in p["text"]]
    assert '  "method": "server/discover",' in text, text  # laid out, not the line as captured
    assert '"name": "c\\ud800"' in text if where == "message" else '"extra": "x\\ud800"' in text, text
    assert "\ufffd" not in text
