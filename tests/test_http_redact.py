"""HTTP redaction: headers, query strings, session ids and metadata-only bodies."""

from __future__ import annotations

import re
import subprocess
import sys

import orjson
import pytest

from addon.redact import BODIES_METADATA, REDACTED_KEY, HttpRedaction, Redactor

KEY = b"test-key"


@pytest.fixture
def red() -> HttpRedaction:
    return HttpRedaction(Redactor(KEY))


def test_authorization_keeps_scheme_and_hashes_credential(red: HttpRedaction) -> None:
    h = Redactor(KEY).hash
    assert red.header_value("Authorization", "Bearer s3cret") == f"Bearer {h('s3cret')}"
    assert red.header_value("proxy-authorization", "Basic dXNlcjpwdw==") == f"Basic {h('dXNlcjpwdw==')}"
    assert "s3cret" not in red.header_value("Authorization", "s3cret")


def test_equal_secrets_correlate_and_different_ones_do_not(red: HttpRedaction) -> None:
    a = red.header_value("X-API-Key", "k1")
    assert a == red.header_value("x-api-key", "k1")
    assert a != red.header_value("x-api-key", "k2")
    assert a.startswith("hmac:")


def test_cookie_names_and_attributes_stay_values_hashed(red: HttpRedaction) -> None:
    h = Redactor(KEY).hash
    assert red.header_value("Cookie", "sid=abc; theme=dark") == f"sid={h('abc')}; theme={h('dark')}"
    out = red.header_value("Set-Cookie", "sid=abc; Path=/; HttpOnly")
    assert out == f"sid={h('abc')}; Path=/; HttpOnly"


def test_session_id_hashed_like_a_secret(red: HttpRedaction) -> None:
    sid = "0c6f4b2a9e2d4f0e"
    assert red.header_value("Mcp-Session-Id", sid) == Redactor(KEY).hash(sid)


def test_other_headers_untouched_and_order_kept(red: HttpRedaction) -> None:
    fields = [("Host", "a"), ("mcp-protocol-version", "2026-07-28"), ("Cookie", "x=1"), ("mcp-method", "tools/call")]
    out = red.headers(fields)
    assert [n for n, _ in out] == ["Host", "mcp-protocol-version", "Cookie", "mcp-method"]
    assert out[1] == ["mcp-protocol-version", "2026-07-28"]
    assert out[2][1] != "x=1"


def test_extra_headers_are_configurable() -> None:
    red = HttpRedaction(Redactor(KEY), extra_headers=["X-Tenant-Secret"])
    assert red.header_value("x-tenant-secret", "v").startswith("hmac:")
    assert "x-tenant-secret" in red.describe()["headers"]


def test_query_secrets_hashed_by_name(red: HttpRedaction) -> None:
    h = Redactor(KEY).hash
    url = "http://h/mcp?token=abc&page=2&api_key=k%20y&sig=zz&refresh_token=r#frag"
    expected = f"http://h/mcp?token={h('abc')}&page=2&api_key={h('k y')}&sig={h('zz')}&refresh_token={h('r')}#frag"
    assert red.url(url) == expected
    assert red.url("http://h/mcp") == "http://h/mcp"
    assert red.url("http://h/mcp?flag&key=") == "http://h/mcp?flag&key="


def test_disabled_records_everything() -> None:
    red = HttpRedaction(Redactor(KEY), enabled=False)
    assert red.header_value("Authorization", "Bearer s") == "Bearer s"
    assert red.header_value("mcp-session-id", "abc") == "abc"
    assert red.url("http://h/?token=t") == "http://h/?token=t"
    assert red.describe()["mode"] == "off"


def test_metadata_body_keeps_envelope_and_hides_arguments() -> None:
    red = HttpRedaction(Redactor(KEY), bodies=BODIES_METADATA)
    req = {
        "jsonrpc": "2.0",
        "id": "a",
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "secret"}, "_meta": {"progressToken": 1}},
    }
    body, policy = red.body(orjson.dumps(req))
    assert policy == "metadata"
    doc = orjson.loads(body)
    assert doc["id"] == "a" and doc["method"] == "tools/call"
    assert doc["params"]["name"] == "echo"
    assert doc["params"]["_meta"] == {"progressToken": 1}
    marker = doc["params"]["arguments"][REDACTED_KEY]
    assert marker["len"] == len(orjson.dumps({"text": "secret"}))
    assert marker["hash"] == Redactor(KEY).hash(orjson.dumps({"text": "secret"}))
    assert b"secret" not in body


def test_metadata_body_keeps_errors_versions_and_server_info() -> None:
    red = HttpRedaction(Redactor(KEY), bodies=BODIES_METADATA)
    result = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "content": [{"type": "text", "text": "private"}],
            "structuredContent": {"result": "private"},
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}},
        },
    }
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32022, "message": "m", "data": {"supported": ["x"]}}}
    body, _ = red.body(orjson.dumps([result, error]))
    got_result, got_error = orjson.loads(body)
    assert got_result["result"]["_meta"] == result["result"]["_meta"]
    assert got_result["result"]["resultType"] == "complete"
    assert REDACTED_KEY in got_result["result"]["content"]
    assert REDACTED_KEY in got_result["result"]["structuredContent"]
    assert got_error == error
    assert b"private" not in body


def test_metadata_non_json_body_becomes_one_marker() -> None:
    red = HttpRedaction(Redactor(KEY), bodies=BODIES_METADATA)
    body, _ = red.body(b"Bad Request: token=abc")
    assert orjson.loads(body)[REDACTED_KEY]["len"] == len(b"Bad Request: token=abc")
    assert red.body(b"") == (b"", "metadata")


def test_full_bodies_untouched(red: HttpRedaction) -> None:
    assert red.body(b'{"params":{"arguments":1}}') == (b'{"params":{"arguments":1}}', "full")


def test_unknown_body_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="body policy"):
        HttpRedaction(Redactor(KEY), bodies="none")


# --- secrets that used to leak (issue 15) -----------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["X-API-Token", "Private-Token", "X-Gitlab-Token", "X-Service-Key", "X-Client-Secret", "X_Auth_Token"]
)
def test_token_key_and_secret_header_families_are_hashed(red: HttpRedaction, name: str) -> None:
    assert red.header_value(name, "s3cret") == Redactor(KEY).hash("s3cret")


def test_referer_and_location_queries_are_redacted(red: HttpRedaction) -> None:
    h = Redactor(KEY).hash
    assert red.header_value("Referer", "https://app/cb?code=c1&state=x") == f"https://app/cb?code={h('c1')}&state=x"
    assert red.header_value("Location", "/mcp?jwt=e.y.j") == f"/mcp?jwt={h('e.y.j')}"
    assert red.header_value("Referer", "https://app/page") == "https://app/page"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # OAuth's implicit grant hands the token to the client in the redirect's fragment
        ("https://app/cb#access_token=s3cret&token_type=Bearer", "https://app/cb#access_token={h}&token_type=Bearer"),
        ("https://app/cb?state=x#access_token=s3cret", "https://app/cb?state=x#access_token={h}"),
        ("https://app/#/callback?code=s3cret&state=x", "https://app/#/callback?code={h}&state=x"),  # hash routing
        # a request target with a "#" (no client should send one): what follows is the server's too
        ("http://h/mcp?x=1#f&token=s3cret", "http://h/mcp?x=1#f&token={h}"),
        ("https://app/a#b?token=s3cret", "https://app/a#b?token={h}"),  # the "?" is the fragment's
        ("https://app/page#section-2", "https://app/page#section-2"),
        ("https://app/page#state=x", "https://app/page#state=x"),
    ],
)
def test_secret_values_in_a_fragment_are_hashed_like_the_query(red: HttpRedaction, url: str, expected: str) -> None:
    assert red.url(url) == expected.format(h=Redactor(KEY).hash("s3cret"))
    assert red.header_value("Location", url) == expected.format(h=Redactor(KEY).hash("s3cret"))


def test_an_endpoint_url_with_a_fragment_gets_its_secrets_hashed(red: HttpRedaction) -> None:
    data, _ = red.sse_data("endpoint", b"/messages/#session_id=9f1c2b")
    assert data == f"/messages/#session_id={Redactor(KEY).hash('9f1c2b')}".encode()


def test_legacy_session_id_and_jwt_query_values_are_hashed(red: HttpRedaction) -> None:
    h = Redactor(KEY).hash
    url = "http://h/messages/?session_id=9f1c&jwt=a.b.c&page=1"
    assert red.url(url) == f"http://h/messages/?session_id={h('9f1c')}&jwt={h('a.b.c')}&page=1"


@pytest.mark.parametrize("bodies", ["full", "metadata"])
def test_legacy_endpoint_event_session_id_is_hashed_and_the_url_kept(bodies: str) -> None:
    # kept in metadata mode too: the analyzer joins the stream's answers to their session by it
    red = HttpRedaction(Redactor(KEY), bodies=bodies)
    data, policy = red.sse_data("endpoint", b"/messages/?session_id=9f1c2b")
    assert data == f"/messages/?session_id={Redactor(KEY).hash('9f1c2b')}".encode() and policy == "full"
    off = HttpRedaction(Redactor(KEY), enabled=False, bodies=bodies)
    assert off.sse_data("endpoint", b"/messages/?session_id=9f1c2b") == (b"/messages/?session_id=9f1c2b", "full")


@pytest.mark.parametrize("data", [b"/messages/ s3cret", b'{"token":"s3cret"}', b"/m?" + b"x" * 2048, b"\xff"])
def test_endpoint_event_data_that_is_no_uri_is_a_body(data: bytes) -> None:
    red = HttpRedaction(Redactor(KEY), bodies=BODIES_METADATA)
    assert red.sse_data("endpoint", data) == red.body(data)
    assert b"s3cret" not in red.sse_data("endpoint", data)[0]


@pytest.mark.parametrize("bodies", ["full", "metadata"])
def test_an_endpoint_url_that_is_no_plain_uri_still_gets_its_session_id_hashed(bodies: str) -> None:
    red = HttpRedaction(Redactor(KEY), bodies=bodies)
    for data in ("/méssages/?session_id=9f1c2b".encode(), b"/messages/?session_id=9f1c2b&x=a b"):
        assert b"9f1c2b" not in red.sse_data("endpoint", data)[0]


def _meta_body(doc: object) -> bytes:
    return HttpRedaction(Redactor(KEY), bodies=BODIES_METADATA).body(orjson.dumps(doc))[0]


def test_metadata_hashes_top_level_fields_of_non_jsonrpc_bodies() -> None:
    body = _meta_body({"username": "ann", "password": "hunter2", "jsonrpc": "2.0"})
    doc = orjson.loads(body)
    assert b"hunter2" not in body and b"ann" not in body
    assert doc["jsonrpc"] == "2.0" and REDACTED_KEY in doc["password"] and REDACTED_KEY in doc["username"]


def test_metadata_hashes_params_sent_as_an_array_and_unknown_params() -> None:
    body = _meta_body({"jsonrpc": "2.0", "id": 1, "method": "x/y", "params": ["s3cret", {"k": "v"}]})
    assert b"s3cret" not in body and REDACTED_KEY in orjson.loads(body)["params"]
    body = _meta_body({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "file:///s3cret"}})
    assert b"s3cret" not in body
    body = _meta_body({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"_meta": {"acme/apiKey": "s3cret"}}})
    assert b"s3cret" not in body


def test_metadata_hashes_result_fields_it_does_not_document() -> None:
    result = {"instructions": "s3cret-1", "tools": [{"name": "s3cret-2"}], "nextCursor": "c",
              "protocolVersion": "2025-11-25", "serverInfo": {"name": "srv", "version": "1"}}  # fmt: skip
    body = _meta_body({"jsonrpc": "2.0", "id": 1, "result": result})
    doc = orjson.loads(body)["result"]
    assert b"s3cret" not in body
    assert doc["protocolVersion"] == "2025-11-25" and doc["serverInfo"] == result["serverInfo"]
    error = {"code": -32602, "message": "Invalid params", "data": {"supported": ["a"], "trace": "s3cret-3"}}
    body = _meta_body({"jsonrpc": "2.0", "id": 1, "error": error})
    got = orjson.loads(body)["error"]
    assert b"s3cret" not in body
    assert (got["code"], got["message"], got["data"]["supported"]) == (-32602, "Invalid params", ["a"])


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("Location", "https://u:s3cret@h/cb?x=1", "https://u:hmac:…@h/cb?x=1"),
        ("Location", "https://u:Tr0ub@dor&3@h/cb", "https://u:hmac:…@h/cb"),  # userinfo ends at the last '@'
        ("Referer", "https://tok-123@h/", "https://hmac:…@h/"),  # a lone user, often a token
        ("Content-Location", "/p?next=https://u:s3cret@h/", "/p?next=https://u:hmac:…@h/"),  # inside the query
    ],
)
def test_userinfo_in_url_headers_is_hashed(red: HttpRedaction, name: str, value: str, expected: str) -> None:
    assert re.sub(r"hmac:[0-9a-f]{12}", "hmac:…", red.header_value(name, value)) == expected


def test_userinfo_in_the_request_url_and_an_endpoint_event_is_hashed(red: HttpRedaction) -> None:
    assert red.describe()["userinfo"] == "password or lone user"  # the capture header states it
    h = Redactor(KEY).hash
    assert red.url("http://h/mcp?next=https://u:p@ss@x/") == f"http://h/mcp?next=https://u:{h('p@ss')}@x/"
    data, policy = red.sse_data("endpoint", b"/messages/?to=https://u:s3cret@x/&session_id=1")
    assert b"s3cret" not in data and policy == "full"
    assert red.url("http://h/a@b/mcp") == "http://h/a@b/mcp"  # an '@' in the path is no userinfo


_HOSTILE_USERINFO = """
import sys
from addon.redact import HttpRedaction, Redactor, redact_argv
n = int(sys.argv[1])
hostile = "@" + "a" * n + "://" + "x" * n + "/"
assert HttpRedaction(Redactor(b"k")).header_value("Referer", hostile) == hostile
assert redact_argv(["srv", hostile], Redactor(b"k")) == ["srv", hostile]
"""


def test_userinfo_scan_is_linear_on_hostile_values() -> None:
    """An '@' that no authority reaches after a long scheme and host: a regular expression for the
    userinfo backtracked over every start, quadratic in the value (about 15 s for 32 kB on the
    proxy's event loop, so minutes for these 200 kB). Not a timing goal: a guard against that walk,
    with minutes of margin either way (the scan takes milliseconds)."""
    run = subprocess.run([sys.executable, "-c", _HOSTILE_USERINFO, "100000"], capture_output=True, timeout=90)
    assert run.returncode == 0, run.stderr


def _hash_of(redacted: str) -> str:
    (found,) = re.findall(r"hmac:[0-9a-f]{12}", redacted)
    return found


@pytest.mark.parametrize(
    ("template", "raw", "encoded"),
    [
        ("http://h/mcp?token={}", "s3\udcffcret", "s3%FFcret"),  # a byte that is no UTF-8, sent raw or encoded
        ("http://h/mcp?token={}", "s3\u00e9cret", "s3%C3%A9cret"),
        ("http://h/mcp?token={}", "s3cret", "s3%63ret"),
        ("http://h/cb#access_token={}", "s3\udcfe", "s3%FE"),
        ("http://u:{}@h/mcp", "p\udcff", "p%FF"),
        ("http://u:{}@h/mcp", "a+b", "a%2Bb"),  # '+' in a userinfo is a plus: only a query's means a space
    ],
)
def test_the_same_secret_sent_raw_or_percent_encoded_hashes_the_same(
    red: HttpRedaction, template: str, raw: str, encoded: str
) -> None:
    """A server reads a percent-encoded octet and the octet sent raw (a client can send any byte in a
    request target; mitmproxy hands it over as a lone surrogate) as the same byte: the hashes must
    correlate them, as the capture can no longer show the value."""
    assert _hash_of(red.url(template.format(raw))) == _hash_of(red.url(template.format(encoded)))


@pytest.mark.parametrize(
    ("template", "one", "other"),
    [
        ("http://h/mcp?token={}", "%FF", "%FE"),  # two octets that are no UTF-8 were both U+FFFD
        ("http://h/mcp?sig={}", "%8A%3B%C0", "%91%3B%C1"),  # a binary signature, percent-encoded
        ("http://h/mcp?token={}", "\udcff", "\ufffd"),  # the octet FF, and the character U+FFFD
        ("http://u:{}@h/mcp", "a+b", "a%20b"),  # a plus and a space
        ("http://u:{}@h/mcp", "%FF", "%FE"),
    ],
)
def test_different_secrets_never_hash_the_same(red: HttpRedaction, template: str, one: str, other: str) -> None:
    """Distinct bytes on the wire are distinct secrets to the server: equal hashes would claim the
    same credential was reused."""
    assert _hash_of(red.url(template.format(one))) != _hash_of(red.url(template.format(other)))


def test_query_values_keep_their_hash_where_they_are_utf8(red: HttpRedaction) -> None:
    """Hashes of UTF-8 values stay as they were (captures made before still correlate with new ones),
    and a query's '+' still means a space (form encoding, as servers parse a query)."""
    h = Redactor(KEY).hash
    assert red.url("http://h/mcp?token=a+b%20c%C3%A9") == f"http://h/mcp?token={h('a b c\u00e9')}"
    assert red.url("http://u:p%40ss@h/") == f"http://u:{h('p@ss')}@h/"
