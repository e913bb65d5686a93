"""Reports execute nothing from a capture: one hostile capture through every format.

Server keys, clientInfo names and versions, error messages, methods, tool names and file names are
written by whoever sends the traffic. The capture here is a real capture file (the real
`CaptureWriter`) whose strings carry terminal escape sequences (window title, clear screen, hidden
text), HTML, backticks, pipes, newlines, attribute breakers, a C1 control, a bidi override and
invalid surrogates. The text report must show control characters visibly (`\\x1b`), also when
`erascope analyze` writes to a real pseudo-terminal; the markdown report must render no HTML and keep
its tables whole; the json report must carry the exact strings.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import unicodedata
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from analyzer.baseline import BASELINE_FORMAT
from analyzer.cli import app
from analyzer.findings import Evidence, Finding, Severity
from analyzer.pipeline import Analysis, analyze
from analyzer.report import render, visible
from tests.test_messages import ENVELOPE, Cap, err, init, init_result, probe

HOSTILE = (
    "\x1b]0;pwned\x07\x1b[2J\x1b[8mhidden\x1b[0m <script>alert(1)</script> `tick` a|b\nnext"
    ' " onmouseover="alert(1)" <img src=x onerror=alert(1)> \x9b31m \u202eevil\r\t'
)
SERVER = "srv-" + HOSTILE
CLIENT = "cli-" + HOSTILE
FILE_NAME = "cap-\x1b[2J<b>|`x`.jsonl"
SGR = re.compile(r"\x1b\[[0-9;]*m")
"""The colour codes rich writes itself (only in colour mode)."""


def _raw_controls(text: str) -> list[str]:
    """Characters a terminal or an editor acts on instead of showing: C0/C1 controls (but the line
    ends), bidi controls, line separators, lone surrogates."""
    return sorted(
        {
            repr(c)
            for c in text
            if c not in "\n\r" and (unicodedata.category(c) in ("Cc", "Cs") or c in "\u061c\u200e\u200f"
                                    "\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
        }
    )


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile")
    cap = Cap(out, server=SERVER)
    cap.s2c("banner " + HOSTILE)  # a stdout-pollution finding on the hostile server
    p = probe(1)
    p["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = {"name": CLIENT, "version": "v" + HOSTILE}
    cap.c2s(p)
    cap.s2c(err(1, -32601, "msg-" + HOSTILE))
    i = init(2)
    i["params"]["clientInfo"] = {"name": CLIENT, "version": "v" + HOSTILE}
    cap.c2s(i)
    cap.s2c(init_result(2))
    cap.c2s({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tool-" + HOSTILE}})
    cap.s2c(err(3, -32000, "boom-" + HOSTILE))
    # a well-formed modern request refused as sessionless: its method lands in the evidence notes
    cap.c2s({"jsonrpc": "2.0", "id": 4, "method": "meth-" + HOSTILE, "params": {"_meta": dict(ENVELOPE)}})
    cap.s2c(err(4, -32600, "Session not found " + HOSTILE))
    # a tool name with lone surrogates (escaped in the JSON text, as a sender can write them)
    cap.c2s('{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"tool-\\ud800-\\udfff"}}')
    cap.s2c(err(5, -32602, "bad \\udcff"))
    path = cap.close()
    path.rename(out / FILE_NAME)
    return out


@pytest.fixture(scope="module")
def hostile(hostile_dir: Path) -> Analysis:
    return analyze([str(hostile_dir)])


def test_the_capture_reaches_the_report(hostile: Analysis) -> None:
    assert [v.server for v in hostile.servers] == [SERVER]
    assert [(f.rule, f.server) for f in hostile.findings] == [("stdout-pollution", SERVER)]
    # the client's identity starts with its clientInfo name (`analyzer.identity`)
    assert [c.split(" · ")[0].startswith(CLIENT) for c in hostile.servers[0].clients] == [True]
    assert any("meth-" in e.note for e in hostile.servers[0].evidence)


@pytest.mark.parametrize("color", [False, True])
def test_text_shows_control_characters_visibly(hostile: Analysis, color: bool) -> None:
    text = render(hostile, "text", width=100, color=color)
    plain = SGR.sub("", text)
    assert not _raw_controls(plain)
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[8mhidden\\x1b[0m" in plain
    assert "\\x9b31m" in plain and "\\u202eevil\\r\\t" in plain and "a|b\\nnext" in plain
    assert "cap-\\x1b[2J<b>|`x`.jsonl" in plain  # the file name in the legend
    assert "meth-\\x1b]0;pwned" in plain  # the method, in an evidence note


def test_text_under_a_real_terminal_executes_nothing(hostile_dir: Path) -> None:
    """`erascope analyze` writing to a pseudo-terminal (colours on): only rich's own colour codes."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("erascope")), "analyze", "-q", str(hostile_dir)],
        stdin=subprocess.DEVNULL, stdout=terminal, stderr=subprocess.PIPE, env=env, cwd=Path(__file__).parent.parent,
    )
    os.close(terminal)
    out = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(controller)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    text = out.decode("utf-8")
    assert "\x1b[" in text, "not rendered as for a terminal"
    assert not _raw_controls(SGR.sub("", text))
    assert "\\x1b]0;pwned\\x07" in SGR.sub("", text)


def test_baseline_messages_show_control_characters_visibly(hostile_dir: Path, tmp_path: Path) -> None:
    """`--baseline` names new findings' servers on stderr: the same rule as the reports."""
    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(orjson.dumps({"format": BASELINE_FORMAT, "accepted": []}))
    result = CliRunner().invoke(app, ["analyze", "-q", str(hostile_dir), "--baseline", str(baseline)])
    assert result.exit_code == 1, result.output
    assert "new finding not in the baseline: warning stdout-pollution on srv-\\x1b]0;pwned" in result.stderr
    assert not _raw_controls(result.stderr)


def _tokens(tokens: list) -> list:
    out = []
    for t in tokens:
        out.append(t)
        out.extend(_tokens(t.children or []))
    return out


def test_markdown_renders_no_html_and_keeps_tables_whole(hostile: Analysis) -> None:
    md = render(hostile, "markdown")
    assert not _raw_controls(md)
    parser = MarkdownIt("commonmark").enable("table")
    tokens = _tokens(parser.parse(md))
    assert not [t.content for t in tokens if t.type in ("html_inline", "html_block")]
    html = parser.render(md)
    for raw in ("<script", "<img", "<b>", 'onmouseover="'):
        assert raw not in html
    # every table row has as many cells as its header
    rows: list[int] = []
    for t in tokens:
        if t.type == "tr_open":
            rows.append(0)
        elif t.type in ("th_open", "td_open"):
            rows[-1] += 1
        elif t.type == "table_close":
            assert len(set(rows)) == 1, rows
            rows = []
    # the server's name survives markdown: its code span holds exactly the visible form
    codes = [t.content for t in tokens if t.type == "code_inline"]
    assert visible(SERVER) in codes and any(code.startswith(visible(CLIENT)) for code in codes)


def test_json_carries_the_exact_strings(hostile: Analysis) -> None:
    doc = orjson.loads(render(hostile, "json"))
    [server] = doc["servers"]
    assert server["server"] == SERVER and [c.startswith(CLIENT + " ") for c in server["clients"]] == [True]
    assert any(e["note"].startswith("modern meth-" + HOSTILE) for e in server["evidence"])
    assert [Path(f).name for f in doc["inputs"]["files"]] == [FILE_NAME]
    assert {c["identity"]["name"] for c in doc["clients"]} >= {CLIENT}


def test_json_written_to_a_terminal_acts_on_nothing(hostile: Analysis) -> None:
    # JSON writers escape C0 controls only: the C1 CSI (U+009B, which terminals act on) and the bidi
    # override went out raw, where text and markdown show them escaped. Same document for a reader.
    out = render(hostile, "json")
    assert not _raw_controls(out), _raw_controls(out)
    assert "\\u009b31m \\u202eevil" in out
    assert orjson.loads(out)["servers"][0]["server"] == SERVER


def test_lone_surrogates_in_every_format(hostile: Analysis) -> None:
    """A lone surrogate (e.g. a file name that is not UTF-8, as Python decodes it) cannot be written
    as UTF-8: text and markdown show it as `\\udcff`, json as U+FFFD; nothing crashes."""
    odd = "s-\udcff-\ud800"
    v = replace(hostile.servers[0], server=odd, clients=[odd])
    finding = Finding("r", Severity.INFO, odd, odd, (Evidence("f-\udcff.jsonl", 1, odd),), client=odd)
    analysis = replace(hostile, servers=[v], findings=[finding], clients=None)
    for fmt in ("text", "markdown"):
        out = render(analysis, fmt)
        out.encode("utf-8")
        assert "s-\\udcff-\\ud800" in out and not _raw_controls(out)
    doc = orjson.loads(render(analysis, "json"))
    assert doc["servers"][0]["server"] == "s-\ufffd-\ufffd"
    assert doc["findings"][0]["evidence"][0]["file"] == "f-\ufffd.jsonl"
