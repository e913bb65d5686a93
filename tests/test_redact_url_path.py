"""A well-known credential in a URL's path: hosted MCP servers put keys there (`/mcp/sk-proj-…/sse`).

The path is the server key's (origin + path), so a token there reached every record's `server`,
the `url` fields, the metrics' labels and every report. Unit level: the redaction functions, the
addon under mitmproxy's `taddons`, and the HAR / mitmproxy dump importers. The real wiring is in
tests/test_http_path_secret_e2e.py.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from mitmproxy import http
from mitmproxy.addons.savehar import SaveHar
from mitmproxy.io import FlowWriter
from mitmproxy.test import taddons, tflow, tutils

from addon import format as fmt
from addon.http_recorder import EndpointKeys, HttpRecorder, server_key
from addon.redact import HttpRedaction, Redactor, mask_urls, redact_argv
from analyzer.foreign import convert, lines
from analyzer.pipeline import analyze
from analyzer.report import render_json
from analyzer.sources import FLOWS, HAR
from tests.test_foreign import _http_sse_session

KEY = b"path-key"
GHP = "ghp_s3cret0123456789abcdefghijABCDEFGHIJ"
SKPROJ = "sk-proj-s3cret-Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv_Wx-YzAb1Cd2Ef3Gh4Ij5"
GLPAT = "glpat-s3cretAbCdEfGhIj1234"
SECRETS = (GHP, SKPROJ, GLPAT)


def h(value: str) -> str:
    return Redactor(KEY).hash(value)


@pytest.fixture
def red() -> HttpRedaction:
    return HttpRedaction(Redactor(KEY))


@pytest.fixture(autouse=True)
def _redact_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASCOPE_REDACT_KEY", KEY.decode())


def no_secret_in(data: bytes | str) -> None:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    for secret in SECRETS:
        assert secret not in text
        assert secret[:24] not in text  # nor a piece of it (a file name's slug is cut at 40 characters)


# --- the redaction function ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"https://mcp.example.com/mcp/{SKPROJ}/sse", f"https://mcp.example.com/mcp/{h(SKPROJ)}/sse"),
        (f"https://h/api/{GHP}/mcp?page=2", f"https://h/api/{h(GHP)}/mcp?page=2"),
        (f"/mcp/{GHP}/messages/?session_id=abc", f"/mcp/{h(GHP)}/messages/?session_id={h('abc')}"),
        (f"/{GLPAT}", f"/{h(GLPAT)}"),
        (f"/mcp%2F{GHP}/sse", f"/mcp%2F{h(GHP)}/sse"),  # an escaped slash ends the segment too
        (f"/mcp/{GHP}.json", f"/mcp/{h(GHP)}.json"),
        (f"//h/mcp/{GHP}", f"//h/mcp/{h(GHP)}"),
        (f"https://h/mcp?next=/u/{GHP}", f"https://h/mcp?next=/u/{h(GHP)}"),  # in a value not named secret
        (f"https://h/cb#/{GHP}", f"https://h/cb#/{h(GHP)}"),
    ],
)
def test_a_well_known_token_in_a_url_path_is_hashed(red: HttpRedaction, url: str, expected: str) -> None:
    assert red.url(url) == expected
    no_secret_in(red.url(url))


@pytest.mark.parametrize(
    "url",
    [
        "https://h/mcp/3f9a1c0e7b2d4f6a8c9e1b3d5f7a9c0e/sse",  # a random segment has no shape: it stays
        "https://h/sk-learn/mcp",
        "https://h/ghp_cache/mcp",
        f"https://h/x{GHP}/mcp",  # part of a longer word: no token
        "https://h/mcp#section-2",
    ],
)
def test_other_path_segments_stay(red: HttpRedaction, url: str) -> None:
    assert red.url(url) == url


def encoded(token: str, *at: int) -> str:
    """`token` with the characters at `at` (every one when none is given) written `%XX`."""
    return "".join(f"%{ord(c):02X}" if not at or i in at else c for i, c in enumerate(token))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"https://h/api/{encoded(GHP, 3)}/mcp", f"https://h/api/{h(GHP)}/mcp"),  # /api/ghp%5F…
        (f"https://h/api/{encoded(GHP, 0)}/mcp", f"https://h/api/{h(GHP)}/mcp"),  # /api/%67hp_…
        (f"https://h/mcp/{encoded(SKPROJ, 2)}/sse", f"https://h/mcp/{h(SKPROJ)}/sse"),  # /mcp/sk%2Dproj-…
        (f"https://h/mcp/{encoded(GLPAT, 5).replace('%2D', '%2d')}/sse", f"https://h/mcp/{h(GLPAT)}/sse"),  # glpat%2d…
        (f"https://h/{encoded(GHP)}", f"https://h/{h(GHP)}"),  # every character escaped
        (f"https://h/mcp?next=%2Fu%2F{encoded(GHP, 3)}&page=2", f"https://h/mcp?next=%2Fu%2F{h(GHP)}&page=2"),
        (f"https://h/cb#/{encoded(SKPROJ, 2, 7)}", f"https://h/cb#/{h(SKPROJ)}"),
        (f"/mcp/{encoded(GHP, 3)}/messages/?session_id=abc", f"/mcp/{h(GHP)}/messages/?session_id={h('abc')}"),
    ],
)
def test_a_percent_encoded_token_is_hashed_as_the_same_token_written_plainly(
    red: HttpRedaction, url: str, expected: str
) -> None:
    """A server decodes `%XX` before it reads the path: `/api/ghp%5F…` is the key `ghp_…`. Matched on
    the URL as written, the escape hid the token's shape and it was recorded in clear."""
    assert red.url(url) == expected
    no_secret_in(red.url(url))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://h/mcp?api%5Fkey=s3cret&page=2", f"https://h/mcp?api%5Fkey={h('s3cret')}&page=2"),
        (f"https://h/mcp?token={encoded(GHP, 3)}", f"https://h/mcp?token={h(GHP)}"),
    ],
)
def test_an_encoded_secret_query_name_or_value_is_hashed(red: HttpRedaction, url: str, expected: str) -> None:
    assert red.url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "https://h/mcp/sk%2Dlearn/sse",  # no token once decoded either
        "https://h/caf%C3%A9/ghp%5Fcache",
        f"https://h/x{encoded(GHP, 0)}/mcp",  # `xghp_…`: part of a longer word
        "https://h/mcp?q=100%25&page=2",
    ],
)
def test_other_encoded_segments_stay_as_they_came(red: HttpRedaction, url: str) -> None:
    assert red.url(url) == url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"http://{GHP}.example.com/mcp", f"http://{h(GHP)}.example.com/mcp"),
        (
            f"https://u:pw@{GLPAT}.tunnel.example:8443/mcp?x=1",
            f"https://u:{h('pw')}@{h(GLPAT)}.tunnel.example:8443/mcp?x=1",
        ),
        (f"http://{encoded(GHP, 0)}.example.com/mcp", f"http://{h(GHP)}.example.com/mcp"),
        (f"//{GHP}.example.com/mcp", f"//{h(GHP)}.example.com/mcp"),
    ],
)
def test_a_well_known_token_in_the_host_is_hashed(red: HttpRedaction, url: str, expected: str) -> None:
    """Tunnels and per-tenant gateways name hosts after keys; a URL's host was never looked at."""
    assert red.url(url) == expected


@pytest.mark.parametrize("name", ["Host", ":authority", "X-Forwarded-Host", "Origin", "Forwarded"])
def test_a_header_naming_the_host_hashes_a_token_in_it(red: HttpRedaction, name: str) -> None:
    value = {"Origin": f"https://{GHP}.example.com", "Forwarded": f"for=10.0.0.1;host={GHP}.example.com"}.get(
        name, f"{GHP}.example.com:8443"
    )
    assert red.header_value(name, value) == value.replace(GHP, h(GHP))
    assert red.header_value(name, "mcp.example.com:8443") == "mcp.example.com:8443"


@pytest.mark.parametrize(
    "message",
    [
        f"Connection to {GHP}.example.com:443 failed",
        f"Cannot connect to http://u:s3cret@h/api/{encoded(SKPROJ, 2)}/mcp?token=abc: refused",
        f"TLS handshake with {GLPAT}: certificate verify failed",
    ],
)
def test_error_text_is_redacted_as_urls_are(red: HttpRedaction, message: str) -> None:
    """mitmproxy's error messages may quote the host or the URL a flow went to."""
    out = red.text(message)
    no_secret_in(out)
    assert "s3cret" not in out and "token=abc" not in out
    assert out.split()[0] == message.split()[0]  # the words stay
    assert HttpRedaction(Redactor(KEY), enabled=False).text(message) == message


def test_a_token_hashes_alike_in_a_path_a_query_a_header_and_a_command_line(red: HttpRedaction) -> None:
    in_path = red.url(f"https://h/mcp/{GHP}/sse")
    assert h(GHP) in in_path
    assert red.url(f"https://h/mcp?token={GHP}") == f"https://h/mcp?token={h(GHP)}"  # hashed once, not twice
    assert red.header_value("Authorization", f"Bearer {GHP}") == f"Bearer {h(GHP)}"
    assert red.header_value("Referer", f"https://app/u/{GHP}/cb") == f"https://app/u/{h(GHP)}/cb"
    assert redact_argv(["srv", f"https://h/mcp/{GHP}/sse"], Redactor(KEY))[1] == f"https://h/mcp/{h(GHP)}/sse"


def test_a_command_line_url_hashes_an_encoded_or_host_token_as_the_plain_one() -> None:
    """`record stdio` runs the same URL redaction over a server's arguments."""
    argv = ["srv", f"https://h/api/{encoded(GHP, 3)}/mcp", f"--upstream=https://{encoded(GHP, 0)}.example.com/mcp"]
    assert redact_argv(argv, Redactor(KEY))[1:] == [
        f"https://h/api/{h(GHP)}/mcp",
        f"--upstream=https://{h(GHP)}.example.com/mcp",
    ]


def test_a_url_shown_in_a_message_masks_a_path_token() -> None:
    """Messages (`record http`'s start line, storage errors) show URLs through `mask_urls`, which masked
    the userinfo and the query, not a key in the path: it went to the terminal and to CI logs."""
    assert mask_urls(f"listening on http://127.0.0.1:1/api/{GHP}/mcp -> https://h/mcp/{SKPROJ}/sse?x=1") == (
        "listening on http://127.0.0.1:1/api/***/mcp -> https://h/mcp/***/sse?***"
    )
    assert mask_urls("https://h/mcp/sk-learn/sse") == "https://h/mcp/sk-learn/sse"


def test_a_url_shown_in_a_message_masks_an_encoded_or_host_token() -> None:
    assert mask_urls(f"http://127.0.0.1:1/api/{encoded(GHP, 0)}/mcp -> https://h/mcp/{encoded(SKPROJ, 2)}/sse") == (
        "http://127.0.0.1:1/api/***/mcp -> https://h/mcp/***/sse"
    )
    assert mask_urls(f"https://{GHP}.example.com/mcp") == "https://***.example.com/mcp"
    assert mask_urls(f"https://{encoded(GHP, 3)}.example.com/mcp") == "https://***.example.com/mcp"
    assert mask_urls("https://h/mcp/sk%2Dlearn/sse") == "https://h/mcp/sk%2Dlearn/sse"


def test_no_redact_records_the_path_as_it_is() -> None:
    red = HttpRedaction(Redactor(KEY), enabled=False)
    assert red.url(f"https://h/mcp/{GHP}/sse") == f"https://h/mcp/{GHP}/sse"
    assert red.url(f"https://h/mcp/{encoded(GHP, 3)}/sse") == f"https://h/mcp/{encoded(GHP, 3)}/sse"
    assert red.url(f"https://{GHP}.example.com/mcp") == f"https://{GHP}.example.com/mcp"
    assert red.header_value("Host", f"{GHP}.example.com") == f"{GHP}.example.com"
    assert red.tokens(f"https://h/mcp/{GHP}/sse") == f"https://h/mcp/{GHP}/sse"
    assert red.describe()["url_tokens"] == "off"


def test_an_endpoint_event_without_a_query_gets_its_path_token_hashed(red: HttpRedaction) -> None:
    data, policy = red.sse_data("endpoint", f"/mcp/{SKPROJ}/messages/".encode())
    assert (data.decode(), policy) == (f"/mcp/{h(SKPROJ)}/messages/", "full")


def test_the_capture_header_states_it(red: HttpRedaction) -> None:
    assert red.describe()["url_tokens"] == (
        "well-known credentials in host, path, query and fragment, also percent-encoded"
    )
    assert red.describe()["host_headers"] == ["host", ":authority", "x-forwarded-host", "forwarded"]


# --- server keys -----------------------------------------------------------------------------------
def _post(path: str) -> http.HTTPFlow:
    req = tutils.treq(method=b"POST", path=path.encode(), host="127.0.0.1", port=8000, content=b"{}")
    return tflow.tflow(req=req)


def test_the_server_key_hashes_a_path_token(red: HttpRedaction) -> None:
    assert server_key(_post(f"/api/{GHP}/mcp?x=1"), red) == f"http://127.0.0.1:8000/api/{h(GHP)}/mcp"
    off = HttpRedaction(Redactor(KEY), enabled=False)
    assert server_key(_post(f"/api/{GHP}/mcp"), off) == f"http://127.0.0.1:8000/api/{GHP}/mcp"


def test_the_server_key_hashes_an_encoded_path_token_as_the_plain_one(red: HttpRedaction) -> None:
    plain = server_key(_post(f"/api/{GHP}/mcp"), red)
    assert server_key(_post(f"/api/{encoded(GHP, 3)}/mcp"), red) == plain  # one server, however it is spelled
    assert server_key(_post(f"/api/{encoded(GHP, 0)}/mcp"), red) == plain
    assert server_key(_post(f"/mcp/{encoded(SKPROJ, 2)}/sse"), red) == f"http://127.0.0.1:8000/mcp/{h(SKPROJ)}/sse"


def _forward(host: str, path: str = "/mcp") -> http.HTTPFlow:
    """A flow of a forward (regular mode) proxy: the client names the host."""
    req = tutils.treq(
        method=b"POST", host=host, port=443, scheme=b"https", path=path.encode(), headers=http.Headers(host=host),
        content=b"{}",
    )  # fmt: skip
    return tflow.tflow(req=req)


def test_the_server_key_hashes_a_host_token(red: HttpRedaction) -> None:
    assert server_key(_forward(f"{GHP}.example.com"), red) == f"https://{h(GHP)}.example.com/mcp"
    off = HttpRedaction(Redactor(KEY), enabled=False)
    assert server_key(_forward(f"{GHP}.example.com"), off) == f"https://{GHP}.example.com/mcp"


def test_an_announced_endpoint_with_a_path_token_keys_its_posts_to_the_stream(red: HttpRedaction) -> None:
    keys = EndpointKeys()
    get = tutils.treq(method=b"GET", path=f"/mcp/{SKPROJ}/sse".encode(), host="127.0.0.1", port=8000, content=b"")
    stream = tflow.tflow(req=get)
    stream_key = server_key(stream, red)
    keys.announce(stream, f"/mcp/{SKPROJ}/messages/?session_id=abc".encode(), stream_key, red)
    post = server_key(_post(f"/mcp/{SKPROJ}/messages/?session_id=abc"), red)
    assert keys.key(post) == stream_key
    no_secret_in(stream_key)


# --- the addon -------------------------------------------------------------------------------------
def _capture(tmp_path: Path) -> tuple[bytes, list[dict[str, Any]]]:
    files = sorted((tmp_path / "caps").glob("*.jsonl"))
    data = b"".join(p.read_bytes() for p in files)
    no_secret_in("".join(p.name for p in files))
    return data, [orjson.loads(line) for line in data.splitlines()]


def _exchange(addon: HttpRecorder, f: http.HTTPFlow) -> None:
    addon.request(f)
    f.response = tutils.tresp(
        headers=http.Headers(((b"content-type", b"application/json"), (b"location", f"/u/{GHP}".encode()))),
        content=b"{}",
    )
    addon.response(f)


def test_the_recorder_hashes_a_path_token_in_url_and_server_on_every_flow(tmp_path: Path) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"))
        for _ in range(2):
            _exchange(addon, _post(f"/api/{GHP}/mcp"))
        addon.done()
    data, records = _capture(tmp_path)
    no_secret_in(data)
    traffic = [r for r in records if r["type"] in (fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE)]
    assert len(traffic) == 4
    assert {r["server"] for r in traffic} == {f"http://127.0.0.1:8000/api/{h(GHP)}/mcp"}  # one stable key
    assert [r["url"] for r in traffic if r["type"] == fmt.HTTP_REQUEST] == [
        f"http://127.0.0.1:8000/api/{h(GHP)}/mcp"
    ] * 2
    assert ["location", f"/u/{h(GHP)}"] in traffic[1]["headers"]


def test_the_recorder_with_redaction_off_keeps_the_path(tmp_path: Path) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_redact=False)
        _exchange(addon, _post(f"/api/{GHP}/mcp"))
        addon.done()
    records = [orjson.loads(line) for p in (tmp_path / "caps").glob("*.jsonl") for line in p.read_bytes().splitlines()]
    request = next(r for r in records if r["type"] == fmt.HTTP_REQUEST)
    assert request["url"] == f"http://127.0.0.1:8000/api/{GHP}/mcp"
    assert request["server"] == f"http://127.0.0.1:8000/api/{GHP}/mcp"


def test_a_server_name_holding_a_token_is_hashed(tmp_path: Path) -> None:
    # `record http` names the server by its upstream URL when `--server` is not given
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), erascope_server=f"https://h/mcp/{SKPROJ}/sse")
        _exchange(addon, _post("/mcp"))
        addon.done()
    data, records = _capture(tmp_path)
    no_secret_in(data)
    assert {r.get("server") for r in records if r["type"] != fmt.PART_END} == {f"https://h/mcp/{h(SKPROJ)}/sse"}


def test_the_http_sse_transport_under_a_path_token_is_one_server(tmp_path: Path) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"))
        stream = tflow.tflow(
            req=tutils.treq(method=b"GET", path=f"/mcp/{SKPROJ}/sse".encode(), host="127.0.0.1", port=8000)
        )
        addon.request(stream)
        stream.response = tutils.tresp(headers=http.Headers(((b"content-type", b"text/event-stream"),)), content=None)
        addon.responseheaders(stream)
        chunk = f"event: endpoint\r\ndata: /mcp/{SKPROJ}/messages/?session_id=abc\r\n\r\n".encode()
        assert stream.response.stream(chunk) == chunk
        _exchange(addon, _post(f"/mcp/{SKPROJ}/messages/?session_id=abc"))
        stream.response.stream(b"")
        addon.response(stream)
        addon.done()
    data, records = _capture(tmp_path)
    no_secret_in(data)
    traffic = [r for r in records if r["type"] not in (fmt.HEADER, fmt.PART_END)]
    assert {r["server"] for r in traffic} == {f"http://127.0.0.1:8000/mcp/{h(SKPROJ)}/sse"}
    (event,) = [r for r in traffic if r["type"] == fmt.SSE_EVENT]
    assert event["raw"] == f"/mcp/{h(SKPROJ)}/messages/?session_id={h('abc')}"


def test_the_recorder_hashes_an_encoded_path_token_in_url_and_server(tmp_path: Path) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"))
        _exchange(addon, _post(f"/api/{encoded(GHP, 3)}/mcp?api%5Fkey=s3cret&next={encoded(SKPROJ, 2)}"))
        _exchange(addon, _post(f"/api/{GHP}/mcp"))
        addon.done()
    data, records = _capture(tmp_path)
    no_secret_in(data)
    assert b"s3cret&" not in data
    traffic = [r for r in records if r["type"] in (fmt.HTTP_REQUEST, fmt.HTTP_RESPONSE)]
    assert {r["server"] for r in traffic} == {f"http://127.0.0.1:8000/api/{h(GHP)}/mcp"}
    assert [r["url"] for r in traffic if r["type"] == fmt.HTTP_REQUEST] == [
        f"http://127.0.0.1:8000/api/{h(GHP)}/mcp?api%5Fkey={h('s3cret')}&next={h(SKPROJ)}",
        f"http://127.0.0.1:8000/api/{h(GHP)}/mcp",
    ]


def test_the_recorder_hashes_a_host_token_and_redacts_the_error_text(tmp_path: Path) -> None:
    """A forward proxy's flow to a host named after a key, failing with a message that quotes the
    host and a URL: the host was in `url`, `Host`, `sni`, `server` and the capture's name, the message
    in `http.error` and `sse.end` as mitmproxy wrote it."""
    from mitmproxy.flow import Error

    host = f"{GHP}.example.com"
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"))
        f = _forward(host, f"/mcp/{encoded(SKPROJ, 2)}/sse")
        f.client_conn.sni = host
        addon.request(f)
        f.response = tutils.tresp(headers=http.Headers(((b"content-type", b"text/event-stream"),)), content=None)
        addon.responseheaders(f)
        f.error = Error(f"Connection to {host}:443 failed: https://u:s3cret@{host}/mcp/{SKPROJ}/sse?token=abc")
        addon.error(f)
        addon.done()
    data, records = _capture(tmp_path)
    no_secret_in(data)
    assert b"s3cret" not in data and b"token=abc" not in data
    (request,) = [r for r in records if r["type"] == fmt.HTTP_REQUEST]
    assert request["url"] == f"https://{h(GHP)}.example.com/mcp/{h(SKPROJ)}/sse"
    assert request["server"] == f"https://{h(GHP)}.example.com/mcp/{h(SKPROJ)}/sse"
    assert ["host", f"{h(GHP)}.example.com"] in request["headers"] and request["sni"] == f"{h(GHP)}.example.com"
    (error,) = [r for r in records if r["type"] == fmt.HTTP_ERROR]
    hashed_host = f"{h(GHP)}.example.com"
    assert error["error"] == (
        f"Connection to {hashed_host}:443 failed: https://u:{h('s3cret')}@{hashed_host}/mcp/{h(SKPROJ)}/sse?token={h('abc')}"
    )
    (end,) = [r for r in records if r["type"] == fmt.SSE_END]
    assert end["error"] == error["error"]


def test_a_connect_error_to_a_host_token_is_recorded_hashed(tmp_path: Path) -> None:
    from mitmproxy.proxy.server_hooks import ServerConnectionHookData

    host = f"{GHP}.example.com"
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"))
        server = tflow.tserver_conn()
        server.address = (host, 443)
        server.error = f"server connection to {host}:443 killed before connect"
        addon.server_connect_error(ServerConnectionHookData(server=server, client=tflow.tclient_conn()))
        addon.done()
    data, records = _capture(tmp_path)
    no_secret_in(data)
    (error,) = [r for r in records if r["type"] == fmt.HTTP_ERROR]
    assert (error["peer"], error["server"]) == (f"{h(GHP)}.example.com:443", f"http://{h(GHP)}.example.com:443")
    assert error["error"] == f"server connection to {h(GHP)}.example.com:443 killed before connect"


def test_a_reverse_upstream_with_a_host_token_names_no_capture_after_it(tmp_path: Path) -> None:
    addon = HttpRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, erascope_dir=str(tmp_path / "caps"), mode=[f"reverse:http://{GHP}.example.com:8000"])
        _exchange(addon, _post("/mcp"))
        addon.done()
    data, records = _capture(tmp_path)
    no_secret_in(data)
    assert records[0]["server"] == f"http://{h(GHP)}.example.com:8000"


# --- the importers ---------------------------------------------------------------------------------
BASE = f"http://127.0.0.1:8931/mcp/{SKPROJ}"


def _session() -> list[http.HTTPFlow]:
    """An HTTP+SSE session whose URLs hold a key: its stream, then the POSTs answered 202."""
    return _http_sse_session(3 / 60, BASE)


def _file(kind: str, flows: list[http.HTTPFlow]) -> bytes:
    if kind == HAR:
        return orjson.dumps(SaveHar().make_har(flows))
    out = io.BytesIO()
    writer = FlowWriter(out)
    for flow in flows:
        writer.add(flow)
    return out.getvalue()


@pytest.mark.parametrize("kind", [HAR, FLOWS])
def test_the_importers_hash_a_path_token_and_keep_the_session_one_server(tmp_path: Path, kind: str) -> None:
    data = _file(kind, _session())
    assert SKPROJ.encode() in data
    written = b"\n".join(line for _, line in lines(convert(kind, io.BytesIO(data))))
    no_secret_in(written)
    keys = {orjson.loads(line).get("server") for line in written.splitlines()}
    assert keys == {f"http://127.0.0.1:8931/mcp/{h(SKPROJ)}/sse"}
    path = tmp_path / ("session.har" if kind == HAR else "session.flows")
    path.write_bytes(data)
    report = render_json(analyze([str(path)]))
    no_secret_in(report)
    (server,) = orjson.loads(report)["servers"]
    assert server["server"] == f"http://127.0.0.1:8931/mcp/{h(SKPROJ)}/sse"
    assert (server["transport"], server["probe_outcomes"], server["init_outcomes"]) == (
        "http+sse",
        {"legacy-answer": 1},
        {"served": 1},
    )


def test_the_dump_importer_redacts_a_flow_error_quoting_the_host() -> None:
    """A mitmproxy dump keeps each flow's error as mitmproxy wrote it; the importer wrote it as it was."""
    from mitmproxy.flow import Error

    stream, *posts = _session()
    stream.error = Error(f"Connection to {GHP}.example.com:443 failed: {BASE}/sse")
    written = b"\n".join(line for _, line in lines(convert(FLOWS, io.BytesIO(_file(FLOWS, [stream, *posts])))))
    no_secret_in(written)
    records = [orjson.loads(line) for line in written.splitlines()]
    errors = [r["error"] for r in records if r["type"] in (fmt.HTTP_ERROR, fmt.SSE_END) and "error" in r]
    assert errors == [f"Connection to {h(GHP)}.example.com:443 failed: http://127.0.0.1:8931/mcp/{h(SKPROJ)}/sse"] * 2
