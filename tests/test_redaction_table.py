"""The README's redaction table is true: every example goes through the recorder's own redaction
functions, in the row's mode, and must come out as the row says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from mitmproxy import http
from mitmproxy.test import tflow

from addon.http_recorder import server_key
from addon.redact import BODIES_FULL, BODIES_METADATA, HttpRedaction, Redactor, redact_argv

README = Path(__file__).resolve().parent.parent / "README.md"
_HASH = re.compile(r"hmac:[0-9a-f]{12}")
_MARKER = re.compile(r'\{"\$redacted":\{"len":\d+,"hash":"hmac:…"\}\}')


def _rows() -> list[tuple[str, str, str, str]]:
    text = README.read_text()
    start = text.index("<!-- redaction-table")
    end = text.index("<!-- /redaction-table -->")
    rows = []
    for line in text[start:end].splitlines()[3:]:  # the marker, the header and the rule
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 4, line
        what, mode, example, expected = (c.strip("`") for c in cells)
        rows.append((what, mode, example, expected))
    return rows


ROWS = _rows()


def _policy(mode: str) -> HttpRedaction:
    redactor = Redactor(b"readme-table")
    return {
        "--redact": HttpRedaction(redactor),
        "--no-redact": HttpRedaction(redactor, enabled=False),
        "--bodies full": HttpRedaction(redactor, bodies=BODIES_FULL),
        "--bodies metadata": HttpRedaction(redactor, bodies=BODIES_METADATA),
    }[mode]


def _shown(text: str) -> str:
    return _MARKER.sub('{"$redacted":…}', _HASH.sub("hmac:…", text))


def recorded(what: str, mode: str, example: str) -> str:
    """What the recorder writes for `example` in `mode` (hashes shown as `hmac:…`)."""
    if what == "argv":
        assert mode == "stdio"
        return _shown(shlex.join(redact_argv(["server", *shlex.split(example)], Redactor(b"readme-table"))[1:]))
    red = _policy(mode)
    if what == "header":
        name, _, value = example.partition(": ")
        return _shown(f"{name}: {red.header_value(name, value)}")
    if what == "url":
        return _shown(red.url(example))
    if what == "server key":
        flow = tflow.tflow()
        flow.request = http.Request.make("POST", example)
        return _shown(server_key(flow, red))
    if what == "error":
        return _shown(red.text(example))
    if what == "sse endpoint":
        return _shown(red.sse_data("endpoint", example.encode())[0].decode())
    if what == "body":
        return _shown(red.body(example.encode())[0].decode())
    raise AssertionError(f"unknown row kind {what!r}")


def test_the_table_covers_every_mode_and_kind() -> None:
    assert {r[1] for r in ROWS} == {"--redact", "--no-redact", "--bodies full", "--bodies metadata", "stdio"}
    assert {r[0] for r in ROWS} == {"header", "url", "server key", "error", "sse endpoint", "body", "argv"}


@pytest.mark.parametrize(("what", "mode", "example", "expected"), ROWS, ids=[f"{r[0]}:{r[2][:40]}" for r in ROWS])
def test_row_is_what_the_recorder_writes(what: str, mode: str, example: str, expected: str) -> None:
    assert recorded(what, mode, example) == expected
    if "hmac:" in expected or "$redacted" in expected:
        assert "s3cret" not in recorded(what, mode, example)
