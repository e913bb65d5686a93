"""HTTP redaction: headers, query strings, session ids and metadata-only bodies."""

from __future__ import annotations

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
