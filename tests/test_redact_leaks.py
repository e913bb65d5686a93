"""Secrets that reached captures, reports or the recorder's stderr in clear, each through the code
path that leaked it: the recorder's own redaction functions, a HAR read by the real pipeline, and
`erascope record http` run as a subprocess."""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import orjson
import pytest

from addon.redact import _BASE64_JSON_READ_MAX, PLAIN_HEADERS, SECRET_QUERY_PARAMS, HttpRedaction, Redactor, redact_argv
from analyzer.html_report import render_html
from analyzer.pipeline import analyze
from analyzer.report import render
from tests.test_http_e2e import BIN, Proc

RED = Redactor(b"leaks")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # a dotted option name (Spring, Java system properties) with its value after `=`: kept in
        # clear, and the argument after it was hashed instead
        (
            ["--spring.datasource.password=Hunter2dotted", "-Dapi.key=JavaKey01", "-jar", "app.jar"],
            [f"--spring.datasource.password={RED.hash('Hunter2dotted')}", f"-Dapi.key={RED.hash('JavaKey01')}",
             "-jar", "app.jar"],
        ),
        (["-Dapi.key=JavaKey01"], [f"-Dapi.key={RED.hash('JavaKey01')}"]),
        (["--db.pass", "PassNext01", "--port", "80"], ["--db.pass", RED.hash("PassNext01"), "--port", "80"]),
    ],
)  # fmt: skip
def test_dotted_option_names_hash_their_own_value(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(["java", *argv], RED)[1:] == expected


@pytest.mark.parametrize("name", ["accessToken", "authToken", "clientSecret", "apiKey", "dbPassword"])
def test_camel_case_secret_query_names_are_hashed(name: str) -> None:
    url = f"https://h.example/mcp?{name}=CamelSecret01&page=2"
    assert HttpRedaction(RED).url(url) == f"https://h.example/mcp?{name}={RED.hash('CamelSecret01')}&page=2"


@pytest.mark.parametrize(
    ("value", "secrets"),
    [
        # several cookies in one field: HAR writers join them with a newline, proxies fold them with a comma
        ("theme=dark; Path=/\nsession=CookieSecret01; Path=/; HttpOnly", ["dark", "CookieSecret01"]),
        ("lang=en; Path=/, auth=CookieSecret02; HttpOnly", ["en", "CookieSecret02"]),
        # a comma inside a date is no cookie boundary
        ("sid=CookieSecret03; Expires=Wed, 21 Oct 2026 07:28:00 GMT; Path=/", ["CookieSecret03"]),
    ],
)
def test_every_cookie_of_a_set_cookie_field_is_hashed(value: str, secrets: list[str]) -> None:
    shown = HttpRedaction(RED).header_value("set-cookie", value)
    assert not any(s in shown for s in secrets), shown
    assert all(RED.hash(s) in shown for s in secrets), shown
    assert "Path=/" in shown and "Wed, 21 Oct" in shown if "Expires" in value else "Path=/" in shown


def test_the_http2_path_pseudo_header_is_redacted_like_the_url() -> None:
    red = HttpRedaction(RED)
    assert red.header_value(":path", "/mcp?token=H2secret0001") == f"/mcp?token={RED.hash('H2secret0001')}"


@pytest.mark.parametrize(
    ("arg", "password"),
    [
        ("postgresql://app:Tr0ub#dor01@db:5432/app", "Tr0ub#dor01"),  # libpq reads `Tr0ub#dor01` as the password
        ("mysql://root:p@ss#w0rd@db/app", "p@ss#w0rd"),
        ("postgresql://app:Tr0ub?dor02@db/app", "Tr0ub?dor02"),
    ],
)
def test_a_url_password_holding_a_hash_or_question_mark_is_hashed_whole(arg: str, password: str) -> None:
    (shown,) = redact_argv(["server", arg], RED)[1:]
    assert password not in shown and RED.hash(password) in shown, shown


def _har_entry(url: str, at: str) -> dict[str, Any]:
    body = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    answer = '{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}'
    json_type = [{"name": "content-type", "value": "application/json"}]
    return {
        "startedDateTime": at, "time": 5, "cache": {}, "timings": {"send": 1, "wait": 2, "receive": 1},
        "request": {"method": "POST", "url": url, "httpVersion": "HTTP/1.1", "headers": json_type,
                    "queryString": [], "cookies": [], "headersSize": -1, "bodySize": len(body),
                    "postData": {"mimeType": "application/json", "text": body}},
        "response": {"status": 200, "statusText": "OK", "httpVersion": "HTTP/1.1", "headers": json_type,
                     "cookies": [], "content": {"size": len(answer), "mimeType": "application/json", "text": answer},
                     "redirectURL": "", "headersSize": -1, "bodySize": len(answer)},
    }  # fmt: skip


def test_a_har_entry_that_cannot_be_read_is_noted_without_its_url(tmp_path: Path) -> None:
    """mitmproxy cannot build a flow of a URL whose user part holds a character beyond ASCII; the note
    quoted the exception, which holds the whole URL it failed on, `api_key` and all. (One whose query
    or host holds such a character is read, as the recorder would have seen it: its secrets redacted.)"""
    entries = [
        _har_entry("https://mcp.example.com/mcp?api_key=NoteSecret01", "2026-12-01T10:00:00Z"),
        _har_entry("https://z\u00f6@mcp.ex\u00e4mple.com/mcp?user=Zo&api_key=NoteSecret02", "2026-12-01T10:00:01Z"),
        _har_entry("https://mcp.example.com/mcp?user=Zo\u00eb&api_key=NoteSecret03", "2026-12-01T10:00:02Z"),
        _har_entry("https://mcp.ex\u00e4mple.com/mcp?api_key=NoteSecret04", "2026-12-01T10:00:03Z"),
    ]
    path = tmp_path / "gateway.har"
    path.write_bytes(orjson.dumps({"log": {"version": "1.2", "creator": {"name": "gw"}, "entries": entries}}))
    analysis = analyze([str(path)])
    assert [n.line for n in analysis.inputs.malformed] == [2]
    for shown in (*(render(analysis, fmt) for fmt in ("text", "json", "markdown")), render_html(analysis)):
        assert "NoteSecret" not in shown


def test_record_http_names_its_upstream_without_credentials(clean_env: dict[str, str]) -> None:
    cli = Proc(
        [str(BIN / "erascope"), "record", "http", "--upstream",
         "http://ops:BannerPw01@127.0.0.1:9/mcp?token=BannerTok02", "--listen", "127.0.0.1:0"],
        clean_env,
    )  # fmt: skip
    try:
        line = cli.wait_for(r"listening on .*").group(0)
        assert "BannerPw01" not in line and "BannerTok02" not in line and "127.0.0.1:9/mcp" in line, line
    finally:
        cli.stop(signal.SIGINT)
    for bad in ("https://u:UpSecret01@h:99999/mcp", "ftp://u:UpSecret01@h/mcp?token=UpSecret01"):
        refused = subprocess.run(
            [str(BIN / "erascope"), "record", "http", "--upstream", bad], env=clean_env, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode == 2 and "--upstream" in refused.stderr, refused.stderr
        assert "UpSecret01" not in refused.stderr + refused.stdout, refused.stderr


@pytest.mark.parametrize("bodies", ["full", "metadata"])
def test_userinfo_in_an_endpoint_url_without_a_query_is_hashed(bodies: str) -> None:
    """The endpoint event's URL was redacted only when it held `?` or `#`: a password in its
    userinfo alone stayed in clear."""
    data, policy = HttpRedaction(RED, bodies=bodies).sse_data("endpoint", b"http://u:EndpointPw01@h/messages/")
    assert data == f"http://u:{RED.hash('EndpointPw01')}@h/messages/".encode() and policy == "full"


@pytest.mark.parametrize(
    ("argv", "secrets"),
    [
        # a secret option and its value given as one argument: the value was kept, the next argument hashed
        (["srv.py", "--api-key OneArgSecret01", "--port", "8080"], ["OneArgSecret01"]),
        # a command line held in one argument, for a shell or an interpreter to run
        (["bash", "-lc", "exec srv --api-key ShellSecret01 --port 8080"], ["ShellSecret01"]),
        (["sh", "-c", "exec env GITHUB_TOKEN=ShellSecret02 srv --token=ShellSecret03"],
         ["ShellSecret02", "ShellSecret03"]),
        (["bash", "-c", "srv --password 'Quoted Secret04' && echo done"], ["Quoted Secret04", "Secret04"]),
        (["bash", "-c", "sh -c 'srv --token ShellSecret05'"], ["ShellSecret05"]),
    ],
)  # fmt: skip
def test_a_secret_inside_an_argument_holding_a_command_line_is_hashed(argv: list[str], secrets: list[str]) -> None:
    shown = redact_argv(argv, RED)
    assert not any(s in arg for s in secrets for arg in shown), shown
    assert RED.hash(secrets[0]) in " ".join(shown), shown
    assert len(shown) == len(argv)
    assert ("8080" in " ".join(shown)) == ("8080" in " ".join(argv))


def test_what_a_command_line_argument_holds_besides_secrets_stays() -> None:
    (_, flag, code) = redact_argv(["bash", "-lc", "exec srv --api-key ShellSecret06 --port 8080 && echo 'a b'"], RED)
    assert (flag, code) == ("-lc", f"exec srv --api-key {RED.hash('ShellSecret06')} --port 8080 && echo 'a b'")


@pytest.mark.parametrize(
    ("message", "secrets", "kept"),
    [
        # an upstream that closed after part of its response head: mitmproxy quotes the bytes it read
        (
            "unexpected server response: b'HTTP/1.1 200 OK\\r\\nSet-Cookie: sid=HeadSecret01; Path=/\\r\\n"
            "Mcp-Session-Id: HeadSecret02\\r\\nX-Api-Key: HeadSecret03\\r\\nServer: nginx'",
            ["HeadSecret01", "HeadSecret02", "HeadSecret03"],
            ["unexpected server response: b'HTTP/1.1 200 OK\\r\\n", "Path=/", "Server: nginx'"],
        ),
        ("Invalid header line: b'Set-Cookie sid=HeadSecret04'", ["HeadSecret04"], ["Invalid header line: b'"]),
        (
            "Bad HTTP request line: b'GET /mcp?token=HeadSecret05 HTTP/1.1 x'",
            ["HeadSecret05"],
            ["Bad HTTP request line: b'"],
        ),
        (
            'Client closed connection before completing request headers: b"POST /mcp HTTP/1.1\\r\\n'
            'Authorization: Bearer HeadSecret06\\r\\nHost: h\\r\\n"',
            ["HeadSecret06"],
            ["Authorization: Bearer hmac:", "Host: h"],
        ),
    ],
)  # fmt: skip
def test_wire_bytes_quoted_in_a_flow_error_are_redacted_as_the_head_they_are(
    message: str, secrets: list[str], kept: list[str]
) -> None:
    shown = HttpRedaction(RED).text(message)
    assert not any(s in shown for s in secrets), shown
    assert all(k in shown for k in kept), shown


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("X-Authorization", "Bearer NameSecret01", f"Bearer {RED.hash('NameSecret01')}"),
        ("X-Forwarded-Authorization", "Basic NameSecret02", f"Basic {RED.hash('NameSecret02')}"),
        ("X-ApiKey", "NameSecret03", RED.hash("NameSecret03")),
        ("Token", "NameSecret04", RED.hash("NameSecret04")),
        ("X-Auth", "NameSecret05", RED.hash("NameSecret05")),
        ("X-Password", "NameSecret06", RED.hash("NameSecret06")),
        ("X-Jwt", "NameSecret07", RED.hash("NameSecret07")),
        ("X-Credential", "NameSecret08", RED.hash("NameSecret08")),
        ("X-Session-Id", "NameSecret09", RED.hash("NameSecret09")),
    ],
)
def test_headers_named_as_credentials_are_hashed(name: str, value: str, shown: str) -> None:
    """Names no list held (a gateway's `X-Forwarded-Authorization`, `Token`, `X-Jwt`) kept their values
    in clear, where a command line's option of the same name is hashed."""
    assert HttpRedaction(RED).header_value(name, value) == shown


@pytest.mark.parametrize(
    "name", ["pwd", "pass", "passphrase", "credential", "bearer", "oauth_verifier", "api.key", "access.token",
             "auth[token]", "db_password"],
)  # fmt: skip
def test_query_values_named_as_credentials_are_hashed(name: str) -> None:
    url = f"https://h.example/mcp?{name}=QuerySecret01&page=2"
    assert HttpRedaction(RED).url(url) == f"https://h.example/mcp?{name}={RED.hash('QuerySecret01')}&page=2"


@pytest.mark.parametrize(("name", "value"), [("WWW-Authenticate", 'Bearer realm="mcp"'), ("Server", "uvicorn"),
                                             ("X-Request-Id", "42"), ("Content-Type", "application/json")])  # fmt: skip
def test_headers_that_are_no_credentials_stay(name: str, value: str) -> None:
    assert HttpRedaction(RED).header_value(name, value) == value


def test_the_cors_credentials_flag_is_no_credential() -> None:
    assert HttpRedaction(RED).header_value("Access-Control-Allow-Credentials", "true") == "true"


@pytest.mark.parametrize(
    ("body", "secrets", "kept"),
    [
        # the OAuth token exchange a client POSTs to an MCP server that is its own authorization server
        (b"grant_type=authorization_code&code=BodySecret01&code_verifier=BodySecret02&client_id=app"
         b"&client_secret=BodySecret03&redirect_uri=http%3A%2F%2Flocalhost%3A3000%2Fcb",
         ["BodySecret01", "BodySecret02", "BodySecret03"], [b"grant_type=authorization_code", b"client_id=app"]),
        # and what it answers, and a dynamic client registration's answer
        (b'{"access_token":"BodySecret04","token_type":"Bearer","expires_in":3600,"refresh_token":"BodySecret05"}',
         ["BodySecret04", "BodySecret05"], [b'"token_type":"Bearer"', b'"expires_in":3600']),
        (b'{"client_id":"app","client_secret":"BodySecret06","redirect_uris":["http://localhost/cb"]}',
         ["BodySecret06"], [b'"client_id":"app"', b"http://localhost/cb"]),
    ],
)  # fmt: skip
def test_credentials_in_a_body_that_is_no_json_rpc_message_are_hashed_with_full_bodies(
    body: bytes, secrets: list[str], kept: list[bytes]
) -> None:
    """`--bodies full` keeps the MCP messages whole for the analysis; the recorder also records every
    other path of the server's origin, where an MCP server that is its own OAuth authorization server
    exchanges codes for tokens: those were recorded in clear. The analysis reads no such body."""
    shown, policy = HttpRedaction(RED).body(body)
    assert not any(s.encode() in shown for s in secrets), shown
    assert all(RED.hash(s).encode() in shown for s in secrets), shown
    assert all(k in shown for k in kept), shown
    assert policy == "credentials"


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"login","arguments":{"password":"kept"}}}',
        b'{"jsonrpc":"2.0","id":1,"result":{"access_token":"kept"}}',
        b"Accepted",
        b"",
    ],
)
def test_json_rpc_bodies_stay_whole_with_full_bodies(body: bytes) -> None:
    assert HttpRedaction(RED).body(body) == (body, "full")


JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbm4iLCJleHAiOjE3OTYwMDAwMDB9.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("https://h.example/app;jsessionid=PathSecret01?page=2", "PathSecret01"),
        ("https://h.example/app?jsessionid=PathSecret02", "PathSecret02"),
        (f"https://h.example/mcp/{JWT}/sse", JWT),
    ],
)
def test_session_path_parameters_and_bare_jwts_in_urls_are_hashed(url: str, secret: str) -> None:
    shown = HttpRedaction(RED).url(url)
    assert secret not in shown and RED.hash(secret) in shown, shown


@pytest.mark.parametrize(
    ("argv", "secret"),
    [(["srv", "--jwt", "ArgSecret01"], "ArgSecret01"), (["srv", "--cookie", "sid=ArgSecret02"], "sid=ArgSecret02"),
     (["srv", JWT], JWT)],
)  # fmt: skip
def test_jwt_and_cookie_options_and_bare_jwts_on_a_command_line_are_hashed(argv: list[str], secret: str) -> None:
    shown = redact_argv(argv, RED)
    assert secret not in " ".join(shown) and RED.hash(secret) in shown, shown


def test_a_session_path_parameter_is_no_part_of_a_server_key() -> None:
    """A servlet container's `;jsessionid=…` made every session of one server a server key of its own,
    with the session in it."""
    from mitmproxy import http as mhttp
    from mitmproxy.test import tflow

    from addon.http_recorder import server_key

    keys = set()
    for session in ("PathSecret03", "PathSecret04"):
        flow = tflow.tflow()
        flow.request = mhttp.Request.make("POST", f"http://h.example:8080/mcp;jsessionid={session}?x=1")
        keys.add(server_key(flow, HttpRedaction(RED)))
    assert keys == {"http://h.example:8080/mcp"}


@pytest.mark.parametrize(
    ("argv", "secrets", "kept"),
    [
        (["srv", "--config", '{"apiKey": "JsonSecret01", "region": "eu", "db": {"password": "JsonSecret02"}}'],
         ["JsonSecret01", "JsonSecret02"], ['"region":"eu"']),
        (["srv", '--headers={"Authorization": "Bearer JsonSecret03", "Accept": "application/json"}'],
         ["JsonSecret03"], ['"Accept":"application/json"']),
    ],
)  # fmt: skip
def test_secret_fields_of_a_json_argument_are_hashed(argv: list[str], secrets: list[str], kept: list[str]) -> None:
    """Servers take their configuration as a JSON argument (`--config '{"apiKey": …}'`): only
    well-known token shapes were hashed in it."""
    shown = " ".join(redact_argv(argv, RED))
    assert not any(s in shown for s in secrets), shown
    assert all(k in shown for k in kept), shown


@pytest.mark.parametrize(
    ("argv", "secret", "shown_as"),
    [
        # `user:password` as the value of a user option (curl, wget, httpie): the user stays
        (["curl", "-u", "alice:UserPw0001", "https://h.example/mcp"], "UserPw0001", "alice:{}"),
        (["curl", "--user=alice:UserPw0002", "https://h.example/mcp"], "UserPw0002", "--user=alice:{}"),
        (["curl", "-ualice:UserPw0003", "https://h.example/mcp"], "UserPw0003", "-ualice:{}"),
        (["curl", "--proxy-user", "bob:ProxyPw0004", "https://h.example/mcp"], "ProxyPw0004", "bob:{}"),
        # the password attached to `-p`, as the MySQL clients take it, also where a launcher runs them
        (["mysql", "-uroot", "-pMyPw0005", "app"], "MyPw0005", "-p{}"),
        (["docker", "exec", "db", "mysqldump", "-pMyPw0006", "app"], "MyPw0006", "-p{}"),
        (["sh", "-c", "mysql -pMyPw0007 app | srv"], "MyPw0007", "mysql -p{} app | srv"),
        # the clients whose short option takes the password as the next argument or attached
        (["sshpass", "-p", "SshPw0008", "ssh", "h"], "SshPw0008", "{}"),
        (["sshpass", "-pSshPw0009", "ssh", "h"], "SshPw0009", "-p{}"),
        (["redis-cli", "-a", "RedisPw0010", "ping"], "RedisPw0010", "{}"),
        # a session handle given as an option: hashed as the session headers and query values are
        (["srv", "--session", "SessionArg0011"], "SessionArg0011", "{}"),
        (["srv", "--session-id=SessionArg0012"], "SessionArg0012", "--session-id={}"),
    ],
)  # fmt: skip
def test_passwords_of_user_and_password_short_options_are_hashed(argv: list[str], secret: str, shown_as: str) -> None:
    shown = redact_argv(argv, RED)
    assert secret not in " ".join(shown), shown
    assert shown_as.format(RED.hash(secret)) in shown, shown
    assert len(shown) == len(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-u", "server.py"],  # unbuffered: `-u` takes no value there
        ["docker", "run", "-u", "1000", "img"],
        ["mysql", "-p", "app"],  # `-p` alone prompts for the password: `app` is the database
        ["ssh", "-p22", "h"],
        ["sh", "-c", "mkdir -p /tmp/x && srv"],
        ["srv", "--session-file", "/var/lib/srv/session.json"],
    ],
)
def test_user_and_short_options_that_hold_no_password_stay(argv: list[str]) -> None:
    assert redact_argv(argv, RED) == argv


@pytest.mark.parametrize(
    ("name", "value", "secret", "kept"),
    [
        # reverse proxies pass the original request target in such headers
        ("X-Original-URL", "/mcp?token=HdrUrl0001&page=2", "HdrUrl0001", "page=2"),
        ("X-Rewrite-URL", "/mcp?access_token=HdrUrl0002", "HdrUrl0002", "/mcp?access_token="),
        ("X-Forwarded-Uri", "/mcp?key=HdrUrl0003", "HdrUrl0003", "/mcp?key="),
        ("Link", '<https://h.example/mcp?token=HdrUrl0004>; rel="next"', "HdrUrl0004", '>; rel="next"'),
        ("Link", '</a?x=1>; rel="a", <https://u:HdrUrl0005@h.example/b>; rel="b"', "HdrUrl0005", '</a?x=1>; rel="a"'),
        ("Refresh", "0; url=https://h.example/cb?code=HdrUrl0006", "HdrUrl0006", "0; url=https://h.example/cb?code="),
        # a scheme-relative URL (the scheme of the request it answers)
        ("Location", "//u:HdrUrl0007@h.example/mcp", "HdrUrl0007", "//u:"),
        ("Location", "//h.example/cb?token=HdrUrl0008#x", "HdrUrl0008", "//h.example/cb?token="),
    ],
)  # fmt: skip
def test_urls_in_headers_that_carry_them_are_redacted(name: str, value: str, secret: str, kept: str) -> None:
    shown = HttpRedaction(RED).header_value(name, value)
    assert secret not in shown and RED.hash(secret) in shown, shown
    assert kept in shown, shown


@pytest.mark.parametrize(
    ("url", "secrets", "kept"),
    [
        # a URL given as a query value, percent-encoded as it should be, or raw
        ("https://h.example/login?next=https%3A%2F%2Fh2.example%2Fcb%3Ftoken%3DNested0001&lang=en",
         ["Nested0001"], ["next=https%3A%2F%2Fh2.example%2Fcb%3Ftoken%3D", "&lang=en"]),
        ("https://h.example/login?next=https%3A%2F%2Fu%3ANested0002%40h2.example%2F",
         ["Nested0002"], ["next=https%3A%2F%2Fu%3A"]),
        ("https://h.example/login?next=https://h2.example/cb?token=Nested0003", ["Nested0003"], ["next=https://h2"]),
        # twice encoded: a login page's return URL holding an OAuth callback's
        ("https://h.example/a?r=https%3A%2F%2Fh2.example%2Fb%3Fr%3Dhttps%253A%252F%252Fh3.example%252Fc%253Fcode%253DNested0004",
         ["Nested0004"], ["r=https%3A%2F%2Fh2.example"]),
    ],
)  # fmt: skip
def test_secrets_of_a_url_inside_a_query_value_are_hashed(url: str, secrets: list[str], kept: list[str]) -> None:
    shown = HttpRedaction(RED).url(url)
    assert not any(s in shown for s in secrets), shown
    assert all(k in shown for k in kept), shown


def test_a_url_nested_in_itself_without_end_is_redacted_without_error() -> None:
    url = "http://h.example/?n=" * 3000 + "x&token=DeepNest0001"
    shown = HttpRedaction(RED).url(url)
    assert "DeepNest0001" not in shown and shown.startswith("http://h.example/?n=")
    encoded = "http://h.example/?n=http%3A%2F%2Fh.example%2F%3Fn%3D" * 2000 + "&token=DeepNest0002"
    assert "DeepNest0002" not in HttpRedaction(RED).url(encoded)


PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvPemSecret01\n-----END PRIVATE KEY-----\n"


@pytest.mark.parametrize(
    ("argv", "secrets", "kept"),
    [
        # Go's MySQL driver: `user:password@tcp(host)/db`, no scheme
        (["go-mcp-mysql", "--dsn", "root:GoDsn0001@tcp(localhost:3306)/app?parseTime=true"], ["GoDsn0001"],
         ["root:", "@tcp(localhost:3306)/app?parseTime=true"]),
        (["docker", "run", "-e", "MYSQL_DSN=u:GoDsn0002@tcp(h:3306)/db", "img"], ["GoDsn0002"], ["MYSQL_DSN=u:"]),
        # JSON as a variable's value, as vendors document their docker launches
        (["docker", "run", "-e", 'OPENAPI_MCP_HEADERS={"Authorization": "Bearer ntn_JsonEnv0003", "V": "1"}',
          "mcp/notion"], ["ntn_JsonEnv0003"], ["OPENAPI_MCP_HEADERS={", '"V":"1"']),
        (["docker", "run", "-e", 'SA={"type": "service_account", "private_key": "' + PEM.replace("\n", "\\n") + '"}'],
         ["MIIEvPemSecret01"], ['"type":"service_account"']),
        # a JSON configuration holding other servers' command lines and URLs (a host's `--mcp-config`)
        (["claude", "--mcp-config", '{"mcpServers":{"a":{"command":"npx","env":{"API_KEY":"x"}},'
          '"b":{"type":"http","url":"https://h/mcp?api_key=JsonCfg0004"},'
          '"c":{"command":"npx","args":["-y","srv","--api-key","JsonCfg0005","postgresql://u:JsonCfg0006@h/db"]}}}'],
         ["JsonCfg0004", "JsonCfg0005", "JsonCfg0006"], ['"command":"npx"', "https://h/mcp?api_key=", "--api-key"]),
        # a private key given as an argument
        (["srv", "--key-data", PEM], ["MIIEvPemSecret01"], ["--key-data"]),
        # names that hold secrets: wallets' phrases, cloud vendors' `*_SK`, credentials in short
        (["docker", "run", "-e", "SEED_PHRASE=Names0007", "-e", "DB_CREDS=u:Names0008", "-e", "VOLC_SK=Names0009"],
         ["Names0007", "Names0008", "Names0009"], ["SEED_PHRASE=", "DB_CREDS=", "VOLC_SK="]),
        (["srv", "--sk", "Names0010", "--creds", "u:Names0011", "--mnemonic", "Names0012"],
         ["Names0010", "Names0011", "Names0012"], ["--sk", "--creds"]),
        # PowerShell's way to set a variable, and npm's registry credentials as an option
        (["pwsh", "-Command", "$env:GITHUB_TOKEN='PsEnv0013'; npx -y srv"], ["PsEnv0013"], ["$env:GITHUB_TOKEN="]),
        (["npx", "--//npm.pkg.github.com/:_authToken=NpmAuth0014", "-y", "@org/srv"], ["NpmAuth0014"],
         ["--//npm.pkg.github.com/:_authToken="]),
        # more programs whose short option takes a password
        (["sqlcmd", "-S", "h", "-U", "sa", "-P", "SqlCmd0015"], ["SqlCmd0015"], ["-U", "sa"]),
        (["ldapsearch", "-D", "cn=admin", "-w", "Ldap0016"], ["Ldap0016"], ["cn=admin"]),
    ],
)  # fmt: skip
def test_more_places_command_lines_carry_secrets_are_hashed(
    argv: list[str], secrets: list[str], kept: list[str]
) -> None:
    shown = " ".join(redact_argv(argv, RED))
    assert not any(s in shown for s in secrets), shown
    assert all(k in shown for k in kept), shown


TOKENS = [
    "sk_live_51HxYzAbCdEfGhIjKlMnOpQr0001",  # Stripe
    "rk_live_51HxYzAbCdEfGhIjKlMnOpQr0002",
    "whsec_AbCdEfGhIjKlMnOpQrStUvWx0003",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCd0004",  # Hugging Face
    "npm_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEf0005",
    "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZjAxLTIzNDUtNjc4OS1hYmNkLWVmMDEyMzQ1Njc4OQACKlszLCJi0006",
    "SG.AbCdEfGhIjKlMnOpQrStUv.AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKlMn0007",  # SendGrid
    "shpat_0123456789abcdef0123456789ab0008",  # Shopify
    "ntn_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKl0009",  # Notion
    "secret_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKlMn0010",
    "lin_api_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIj0011",  # Linear
    "gsk_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKlMn0012",  # Groq
    "pplx-AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKl0013",  # Perplexity
    "xai-AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKlMn0014",
    "sk-or-v1-0123456789abcdef0123456789abcdef0123456789abcdef012345670015",  # OpenRouter
    "sk-ak-AbCdEfGhIjKlMnOpQr0016",  # Zapier
    "tvly-dev-AbCdEfGhIjKlMnOpQrStUv0017",  # Tavily
    "r8_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh0018",  # Replicate
    "pcsk_AbCdE_FgHiJkLmNoPqRsTuVwXyZaBcDeFgHiJkLmNoPq0019",  # Pinecone
    "sbp_0123456789abcdef0123456789abcdef01230020",  # Supabase
    "dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef012345670021",  # DigitalOcean
    "PMAK-0123456789abcdef01230022-0123456789abcdef0123456789abcdef01",  # Postman
    "figd_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIj0023",  # Figma
    "glptt-AbCdEfGhIjKlMnOpQr0024",  # GitLab
    "xoxc-1234567890-1234567890-1234567890-abcdef0123456789abcdef0025",  # Slack
    "xapp-1-A0123456789-1234567890123-0123456789abcdef0027",
    "ya29.AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKlMnOpQrStUv0028",  # Google
    "GOCSPX-AbCdEfGhIjKlMnOpQrStUv0029",
    "ASIAIOSFODNN7EXAM030",  # AWS, temporary
    "dapi0123456789abcdef0123456789ab0031",  # Databricks
    "hvs.AbCdEfGhIjKlMnOpQrStUvWx0032",  # Vault
    "dckr_pat_AbCdEfGhIjKlMnOpQrSt0033",  # Docker
    "lsv2_pt_0123456789abcdef0123456789abcdef_0123450034",  # LangSmith
    "sk-lf-01234567-89ab-cdef-0123-456789ab0035",  # Langfuse
    "glsa_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEf_01230036",  # Grafana
    "sntrys_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKlMn0037",  # Sentry
    "NRAK-ABCDEFGHIJKLMNOPQRSTUV0038",  # New Relic
    "ATATT3xFfGF0AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGhIjKlMnOpQrStUvWx0039",  # Atlassian
]


@pytest.mark.parametrize("token", TOKENS)
def test_vendor_tokens_are_hashed_on_command_lines_and_in_urls(token: str) -> None:
    assert redact_argv(["srv", token], RED)[1] == RED.hash(token)
    shown = HttpRedaction(RED).url(f"https://h.example/mcp/{token}/sse")
    assert token not in shown and shown == f"https://h.example/mcp/{RED.hash(token)}/sse", shown


@pytest.mark.parametrize(
    "word", ["sk_live", "hf_cache", "npm_config_cache", "secret_name", "gsk_x", "r8_cache", "ya29.x", "dapi",
             "SG.x.y", "fc-1", "re_test", "ASIA", "sk-ak-1"],
)  # fmt: skip
def test_words_shaped_like_vendor_prefixes_stay(word: str) -> None:
    assert redact_argv(["srv", word], RED) == ["srv", word]


@pytest.mark.parametrize(
    ("name", "value", "secret", "shown"),
    [
        ("Authentication", "Bearer HdrName0001", "HdrName0001", "Bearer {}"),
        ("X-Github-Pat", "HdrName0002", "HdrName0002", "{}"),
        ("X-Bearer", "HdrName0003", "HdrName0003", "{}"),
        ("X-Passphrase", "HdrName0004", "HdrName0004", "{}"),
        ("X-Goog-Iap-Jwt-Assertion", "HdrName0005", "HdrName0005", "{}"),
        ("Cf-Access-Jwt-Assertion", "HdrName0006", "HdrName0006", "{}"),
        ("X-Amzn-Oidc-Data", "HdrName0007", "HdrName0007", "{}"),
    ],
)
def test_more_headers_named_as_credentials_are_hashed(name: str, value: str, secret: str, shown: str) -> None:
    assert HttpRedaction(RED).header_value(name, value) == shown.format(RED.hash(secret))


@pytest.mark.parametrize(
    ("body", "secrets", "kept"),
    [
        # forms with a value no strict form allows: a base64 `=`, a raw URL, a raw space, a line end
        (b"grant_type=client_credentials&client_id=x&client_secret=Form0001==", [b"Form0001"], [b"client_id=x"]),
        (b"grant_type=authorization_code&code=Form0002&redirect_uri=https://c/cb?x=1", [b"Form0002"],
         [b"redirect_uri=https://c/cb?x=1"]),
        (b"grant_type=password&username=u&password=Form0003&scope=openid profile", [b"Form0003"],
         [b"scope=openid profile"]),
        (b"grant_type=client_credentials&client_id=x&client_secret=Form0004\n", [b"Form0004"], [b"client_id=x"]),
        # JWT bearer grants and assertions, device codes
        (b"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=Form0005", [b"Form0005"],
         [b"grant_type=urn"]),
        (b"code=c&client_assertion_type=urn%3Ax&client_assertion=Form0006", [b"Form0006"],
         [b"client_assertion_type=urn"]),
        (b"device_code=Form0007&client_id=x", [b"Form0007"], [b"client_id=x"]),
        (b'{"device_code":"Form0008","user_code":"ABCD-EFGH"}', [b"Form0008"], [b'"user_code":"ABCD-EFGH"']),
        (b'{"headers":{"Authorization":"Bearer Form0009"}}', [b"Form0009"], [b'"headers"']),
    ],
)  # fmt: skip
def test_more_credentials_in_bodies_that_are_no_json_rpc_message_are_hashed(
    body: bytes, secrets: list[bytes], kept: list[bytes]
) -> None:
    shown, policy = HttpRedaction(RED).body(body)
    assert not any(s in shown for s in secrets), shown
    assert all(k in shown for k in kept), shown
    assert policy == "credentials"


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        # GitHub's documented form: the token is the user, the password a placeholder; Stripe's key as a user
        ("https://UserTok0001:x-oauth-basic@github.com/o/r.git", "UserTok0001"),
        ("https://UserTok0002:@api.stripe.com/v1", "UserTok0002"),
    ],
)
def test_a_token_given_as_the_user_of_a_url_is_hashed(url: str, secret: str) -> None:
    shown = HttpRedaction(RED).url(url)
    assert secret not in shown and RED.hash(secret) in shown, shown
    assert secret not in " ".join(redact_argv(["git", "clone", url], RED))


@pytest.mark.parametrize(
    ("argv", "secrets", "kept"),
    [
        # Kafka's JAAS configuration: quoted `name="value"` options after the login module's name
        (["java", "-jar", "srv.jar", '--spring.kafka.properties.sasl.jaas.config=org.apache.kafka.common.security.'
          'plain.PlainLoginModule required username="u" password="Jaas0001";'], ["Jaas0001"], ['username="u"']),
        # Oracle's `user/password@host`
        (["srv", "jdbc:oracle:thin:scott/Oracle0002@//h:1521/svc"], ["Oracle0002"],
         ["jdbc:oracle:thin:scott/", "@//h:1521/svc"]),
        (["srv", "--dsn", "scott/Oracle0003@h:1521/svc"], ["Oracle0003"], ["scott/", "@h:1521/svc"]),
        # a `/` in a URL's password, which connection libraries read up to the `@`
        (["srv", "postgresql://u:ab/Slash0004@h/db"], ["Slash0004"], ["@h/db"]),
        # a header given as a configuration value
        (["git", "-c", "http.extraHeader=Authorization: Bearer Hdr0005", "clone", "x"], ["Hdr0005"],
         ["http.extraHeader=Authorization: Bearer "]),
        # `NAME=value` pairs separated by commas
        (["gcloud", "run", "deploy", "--set-env-vars", "FOO=bar,API_KEY=Comma0006,MODE=a,b"], ["Comma0006"],
         ["FOO=bar,API_KEY=", ",MODE=a,b"]),
    ],
)  # fmt: skip
def test_credentials_inside_configuration_values_are_hashed(
    argv: list[str], secrets: list[str], kept: list[str]
) -> None:
    shown = " ".join(redact_argv(argv, RED))
    assert not any(s in shown for s in secrets), shown
    assert all(k in shown for k in kept), shown


@pytest.mark.parametrize(
    "argv",
    [
        ["docker", "run", "ghcr.io/acme/srv@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"],
        ["srv", "https://h.example:8443/mcp@v2/x"],
        ["srv", "--labels", "team=mcp,tier=gold"],
        ["srv", "--format", 'name="x" size="y"'],
    ],
)
def test_configuration_values_without_credentials_stay(argv: list[str]) -> None:
    assert redact_argv(argv, RED) == argv


@pytest.mark.parametrize(
    "name", ["pw", "accesstoken", "clientsecret", "secretkey", "privatekey", "authkey", "apitoken", "X-Goog-Signature",
             "X-Goog-Credential"],
)  # fmt: skip
def test_more_query_names_of_credentials_are_hashed(name: str) -> None:
    url = f"https://h.example/mcp?{name}=QueryName01&page=2"
    assert HttpRedaction(RED).url(url) == f"https://h.example/mcp?{name}={RED.hash('QueryName01')}&page=2"


def _b64(doc: object, *, urlsafe: bool = False, padded: bool = True, lead: bytes = b"") -> str:
    data = lead + orjson.dumps(doc)
    text = (base64.urlsafe_b64encode(data) if urlsafe else base64.b64encode(data)).decode()
    return text if padded else text.rstrip("=")


def _decoded_values(url: str) -> str:
    """Every query value of `url` (and of URLs in them) decoded as base64 where it decodes."""
    out = []
    for value in re.findall(r"=([A-Za-z0-9+/_%-]+)", unquote(unquote(url))):
        value = unquote(value).replace("-", "+").replace("_", "/")
        with contextlib.suppress(binascii.Error):
            out.append(base64.b64decode(value + "=" * (-len(value) % 4)).decode("utf-8", "replace"))
    return " ".join(out)


SMITHERY = "https://server.smithery.ai/@owner/github/mcp"
SMITHERY_GHP = "ghp_" + "B64Conf" * 5 + "1"  # a GitHub token's shape: 36 characters after the prefix
SMITHERY_CONFIG = _b64({"githubPersonalAccessToken": SMITHERY_GHP})
RICH_CONFIG = _b64({"apiKey": "B64Conf0003", "note": "??>>~~"})  # its base64 holds `+` and `/`


@pytest.mark.parametrize(
    ("url", "secrets", "kept"),
    [
        # Smithery's hosted servers: the server's whole configuration, base64 JSON, as a query value
        (f"{SMITHERY}?config={SMITHERY_CONFIG}&api_key=B64Conf0001&profile=work", [SMITHERY_CONFIG, "B64Conf0001"],
         [f"{SMITHERY}?config={RED.hash(SMITHERY_CONFIG)}&api_key={RED.hash('B64Conf0001')}&profile=work"]),
        # base64url, unpadded, any parameter name; the secret a secret-named field's
        (f"{SMITHERY}?settings={_b64({'region': 'eu', 'accessKey': 'B64Conf0002'}, urlsafe=True, padded=False)}&x=1",
         [_b64({"region": "eu", "accessKey": "B64Conf0002"}, urlsafe=True, padded=False)], [f"{SMITHERY}?settings=",
          "&x=1"]),
        # percent-encoded as `URLSearchParams` writes it (`+`, `/` and `=` escaped)
        (f"{SMITHERY}?config={quote(RICH_CONFIG, safe='')}", [RICH_CONFIG[:40]], [f"{SMITHERY}?config=hmac:"]),
        # a credential told by its value: a token's shape, a URL's password; a pretty-printed object
        (f"{SMITHERY}?c={_b64({'x': {'db': 'postgresql://u:B64Conf0004@h/db'}})}",
         [_b64({"x": {"db": "postgresql://u:B64Conf0004@h/db"}})], [f"{SMITHERY}?c=hmac:"]),
        (f"{SMITHERY}?c={_b64({'token': 'B64Conf0005'}, lead=b'  ')}", [_b64({"token": "B64Conf0005"}, lead=b"  ")],
         [f"{SMITHERY}?c=hmac:"]),
        # in the fragment, and in a URL given as a query value
        (f"https://h.example/app#/cb?state={SMITHERY_CONFIG}", [SMITHERY_CONFIG], ["https://h.example/app#/cb?state="]),
        (f"https://h.example/login?next={quote(f'{SMITHERY}?config={SMITHERY_CONFIG}', safe='')}&lang=en",
         [SMITHERY_CONFIG, quote(SMITHERY_CONFIG, safe="")],
         ["https://h.example/login?next=https%3A%2F%2F", "&lang=en"]),
    ],
)  # fmt: skip
def test_a_base64_json_query_value_holding_credentials_is_hashed_whole(
    url: str, secrets: list[str], kept: list[str]
) -> None:
    """A hosted server's configuration, base64 JSON in a query value, was recorded as it came: its
    credentials readable to anyone decoding it."""
    shown = HttpRedaction(RED).url(url)
    assert not any(s in shown for s in secrets), shown
    assert all(k in shown for k in kept), shown
    assert not any(s in _decoded_values(shown) for s in ("B64Conf", SMITHERY_GHP)), shown


@pytest.mark.parametrize(
    "where",
    [
        lambda url: HttpRedaction(RED).header_value("Referer", url),
        lambda url: " ".join(redact_argv(["npx", "-y", "mcp-remote", url], RED)),
        lambda url: " ".join(redact_argv(["docker", "run", "-e", f"MCP_URL={url}", "img"], RED)),
        lambda url: " ".join(redact_argv(["sh", "-c", f"npx -y mcp-remote '{url}' --debug"], RED)),
    ],
    ids=["referer", "argument", "variable", "command-line"],
)
def test_a_base64_json_query_value_holding_credentials_is_hashed_wherever_urls_are_redacted(
    where: Callable[[str], str],
) -> None:
    shown = where(f"{SMITHERY}?config={SMITHERY_CONFIG}&profile=work")
    assert SMITHERY_CONFIG not in shown and RED.hash(SMITHERY_CONFIG) in shown, shown
    assert "&profile=work" in shown, shown


@pytest.mark.parametrize(
    "value",
    [
        _b64({"region": "eu", "debug": True}),  # a configuration holding no credential
        _b64({"region": "eu", "debug": True}, urlsafe=True, padded=False),
        "elephantsandgiraffes",  # base64's alphabet, no JSON
        "eyebrowsandeyelashes",  # starts as `{` does in base64, and is no JSON
        "eyJhbGciOiJIUzI1NiJ9",  # a JWT's header alone: `{"alg":"HS256"}`
        "eyJub3QganNvbg",  # `{"not json`
        "e30",  # `{}`: too short to look at
    ],
)
def test_base64_query_values_without_credentials_stay(value: str) -> None:
    url = f"{SMITHERY}?config={value}&page=2"
    assert HttpRedaction(RED).url(url) == url
    assert redact_argv(["npx", url], RED) == ["npx", url]


def test_a_jwt_query_value_is_still_hashed_as_a_token() -> None:
    shown = HttpRedaction(RED).url(f"https://h.example/mcp?state={JWT}&page=2")
    assert shown == f"https://h.example/mcp?state={RED.hash(JWT)}&page=2"


MONGO_AWS = "mongodb+srv://cluster0.example.net/?authMechanism=MONGODB-AWS&authSource=%24external"


@pytest.mark.parametrize(
    ("url", "secrets", "kept"),
    [
        # MongoDB's AWS authentication: the session token among the mechanism's properties
        (f"{MONGO_AWS}&authMechanismProperties=AWS_SESSION_TOKEN:IQoJb3JpZ2luX2VjMongo01", ["IQoJb3JpZ2luX2VjMongo01"],
         [f"{MONGO_AWS}&authMechanismProperties=AWS_SESSION_TOKEN:{RED.hash('IQoJb3JpZ2luX2VjMongo01')}"]),
        (f"{MONGO_AWS}&authMechanismProperties=SERVICE_NAME:mongodb,AWS_SESSION_TOKEN:Mongo02,CANONICALIZE_HOST_NAME:true"
         "&retryWrites=true", ["Mongo02"],
         [f"=SERVICE_NAME:mongodb,AWS_SESSION_TOKEN:{RED.hash('Mongo02')},CANONICALIZE_HOST_NAME:true&retryWrites=true"]),
        # percent-encoded, as a client encoding the whole value writes it; a token holding `/` and `=`
        (f"{MONGO_AWS}&authMechanismProperties=AWS_SESSION_TOKEN%3AIQoJ%2F%2FMongo03%3D%2CSERVICE_NAME%3Amongodb",
         ["Mongo03"], [f"AWS_SESSION_TOKEN%3A{RED.hash('IQoJ//Mongo03=')}%2CSERVICE_NAME%3Amongodb"]),
        # the option's name in any case, as the drivers read it; a key named as a secret is
        (f"{MONGO_AWS}&authmechanismproperties=aws_session_token:Mongo04", ["Mongo04"],
         [f"authmechanismproperties=aws_session_token:{RED.hash('Mongo04')}"]),
        (f"{MONGO_AWS}&authMechanismProperties=ENVIRONMENT:azure,CLIENT_SECRET:Mongo05", ["Mongo05"],
         ["=ENVIRONMENT:azure,CLIENT_SECRET:hmac:"]),
        # the access key id and its secret are the userinfo's
        ("mongodb://AKIAIOSFODNN7EXAMPLE:MongoAwsPw06@h.example/?authMechanism=MONGODB-AWS"
         "&authMechanismProperties=AWS_SESSION_TOKEN:Mongo07", ["AKIAIOSFODNN7EXAMPLE", "MongoAwsPw06", "Mongo07"],
         ["@h.example/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:hmac:"]),
    ],
)  # fmt: skip
def test_secret_auth_mechanism_properties_of_a_connection_string_are_hashed(
    url: str, secrets: list[str], kept: list[str]
) -> None:
    """A MongoDB connection string's `authMechanismProperties` (`KEY:value` pairs, comma-separated)
    carries an AWS session token: recorded as it came, in a launch argument and in a URL alike."""
    for shown in (
        HttpRedaction(RED).url(url),
        " ".join(redact_argv(["npx", "-y", "mongodb-mcp-server", "--connectionString", url], RED)),
        " ".join(redact_argv(["docker", "run", "-e", f"MDB_MCP_CONNECTION_STRING={url}", "mcp/mongodb"], RED)),
    ):
        assert not any(s in shown for s in secrets), shown
        assert all(k in shown for k in kept), shown


@pytest.mark.parametrize(
    "properties",
    [
        "SERVICE_NAME:mongodb,CANONICALIZE_HOST_NAME:true",  # Kerberos
        "ENVIRONMENT:azure,TOKEN_RESOURCE:api://0123-abcd",  # OIDC: the token's audience, no token
        "SERVICE_NAME%3Amongodb%2CSERVICE_REALM%3AEXAMPLE.COM",
    ],
)
def test_auth_mechanism_properties_without_credentials_stay(properties: str) -> None:
    url = f"mongodb://h.example/?authMechanism=GSSAPI&authMechanismProperties={properties}"
    assert HttpRedaction(RED).url(url) == url
    assert redact_argv(["mongosh", url], RED) == ["mongosh", url]


def _decoded_words(text: str) -> str:
    """Every run of base64's characters in `text` decoded as base64 where it decodes."""
    out = []
    for word in re.findall(r"[A-Za-z0-9+/_-]{16,}", text):
        word = word.replace("-", "+").replace("_", "/")
        with contextlib.suppress(binascii.Error):
            out.append(base64.b64decode(word + "=" * (-len(word) % 4)).decode("utf-8", "replace"))
    return " ".join(out)


ARG_CONFIG = _b64({"githubPersonalAccessToken": "B64Arg0001", "owner": "me"})
ARG_CONFIG_URLSAFE = _b64({"note": "??>>~~", "apiKey": "B64Arg0002"}, urlsafe=True, padded=False)  # `-` and `_`
ARG_CONFIG_SHAPE = _b64({"upstream": "postgresql://u:B64Arg0003@h/db", "region": "eu"}, lead=b"\n")
SMITHERY_CLI = ["npx", "-y", "@smithery/cli", "run", "@owner/github"]


@pytest.mark.parametrize(
    ("argv", "config"),
    [
        # the Smithery CLI's `--config`, attached, apart, and a server's positional argument
        ([*SMITHERY_CLI, f"--config={ARG_CONFIG}"], ARG_CONFIG),
        ([*SMITHERY_CLI, "--config", ARG_CONFIG], ARG_CONFIG),
        ([*SMITHERY_CLI, "--config", ARG_CONFIG_URLSAFE], ARG_CONFIG_URLSAFE),
        (["node", "server.js", ARG_CONFIG_SHAPE], ARG_CONFIG_SHAPE),
        # in a command line given as one argument
        (["sh", "-c", f"npx -y @smithery/cli run @owner/github --config {ARG_CONFIG} --key x"], ARG_CONFIG),
        (["sh", "-c", f"npx srv '--config={ARG_CONFIG_URLSAFE}'"], ARG_CONFIG_URLSAFE),
        # an environment variable's value, as docker, env and gcloud take them
        (["docker", "run", "-i", "--rm", "-e", f"SMITHERY_CONFIG={ARG_CONFIG}", "mcp/github"], ARG_CONFIG),
        (["docker", "run", f"--env=SMITHERY_CONFIG={ARG_CONFIG_URLSAFE}", "mcp/github"], ARG_CONFIG_URLSAFE),
        (["env", f"MCP_CONFIG={ARG_CONFIG_SHAPE}", "node", "server.js"], ARG_CONFIG_SHAPE),
        (["gcloud", "run", "deploy", "--set-env-vars", f"REGION=eu,MCP_CONFIG={ARG_CONFIG}"], ARG_CONFIG),
        (["srv", "--dsn", f"Server=h;Config={ARG_CONFIG};Database=app"], ARG_CONFIG),
        # a header given on the command line, in one argument or two
        (["npx", "mcp-remote", "https://h.example/mcp", "--header", f"X-Config: {ARG_CONFIG}"], ARG_CONFIG),
        (["curl", "-H", "Smithery-Config", ARG_CONFIG_URLSAFE, "https://h.example/mcp"], ARG_CONFIG_URLSAFE),
        # inside a host's JSON configuration: a server's argument, a server's environment
        (["claude", "--mcp-config", orjson.dumps({"mcpServers": {"gh": {"command": "npx", "args": ["--config",
          ARG_CONFIG]}}}).decode()], ARG_CONFIG),
        (["claude", "--mcp-config", orjson.dumps({"mcpServers": {"gh": {"command": "srv", "env": {"SMITHERY_CONFIG":
          ARG_CONFIG_SHAPE}}}}).decode()], ARG_CONFIG_SHAPE),
    ],
    ids=["attached", "apart", "url-safe", "positional", "command-line", "command-line-quoted", "docker-e",
         "docker-env", "env", "comma-pairs", "connection-string", "header", "header-apart", "json-args", "json-env"],
)  # fmt: skip
def test_a_base64_json_configuration_on_a_command_line_is_hashed_whole(argv: list[str], config: str) -> None:
    """A hosted server's configuration (base64 JSON, Smithery's `eyJ…`) given as a launch argument or
    an environment value rather than a URL's query value was recorded as it came."""
    shown = " ".join(redact_argv(argv, RED))
    assert config not in shown and RED.hash(config) in shown, shown
    assert "B64Arg" not in _decoded_words(shown), shown
    assert argv[0] in shown, shown


B64_HEADER_CONFIG = _b64({"githubPersonalAccessToken": SMITHERY_GHP})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("X-Config", B64_HEADER_CONFIG),
        ("Smithery-Config", ARG_CONFIG_URLSAFE),
        ("X-MCP-Server-Config", ARG_CONFIG_SHAPE),
        ("config", ARG_CONFIG),
    ],
    ids=["token-shape", "url-safe", "url-password", "secret-name"],
)
def test_a_base64_json_header_value_holding_credentials_is_hashed_whole(name: str, value: str) -> None:
    """A header of a name on no list (`X-Config`, `Smithery-Config`) carrying a hosted server's
    configuration, base64 JSON, was recorded as it came."""
    redaction = HttpRedaction(RED)
    for _ in range(2):  # the header's action is decided once per name, and kept
        assert redaction.header_value(name, value) == RED.hash(value)
    assert redaction.headers([("Accept", "*/*"), (name, value)]) == [["Accept", "*/*"], [name, RED.hash(value)]]
    # the head of a response mitmproxy failed to read, quoted in the flow's error
    shown = redaction.text(f"unexpected server response: b'HTTP/1.1 400 Bad\\r\\n{name}: {value}\\r\\n'")
    assert value not in shown and RED.hash(value) in shown, shown


@pytest.mark.parametrize(
    "value",
    [
        _b64({"region": "eu", "debug": True}),  # a configuration holding no credential
        _b64({"region": "eu", "debug": True}, urlsafe=True, padded=False),
        "eyebrowsandeyelashes",  # base64's alphabet, starting as `{` does, and no JSON
        "ewerandlambkinsfold",
        "eyJub3QganNvbg",  # `{"not json`
        "eyJhbGciOiJIUzI1NiJ9",  # a JWT's header alone: `{"alg":"HS256"}`
        "e30",  # `{}`
        "eyewitness-accounts/v2.json",
        "Cn and DQ and IH",  # how white space before a `{` starts in base64, in plain words
    ],
    ids=["no-credential", "no-credential-url-safe", "word", "word-ew", "no-json", "jwt-header", "empty-object",
         "path", "words"],
)  # fmt: skip
def test_base64_json_values_without_credentials_stay_on_command_lines_and_in_headers(value: str) -> None:
    for argv in (
        ["npx", "srv", f"--config={value}"],
        ["npx", "srv", "--config", value],
        ["npx", "srv", value],
        ["docker", "run", "-e", f"SMITHERY_CONFIG={value}", "img"],
        ["sh", "-c", f"npx srv --config '{value}'"],
    ):
        assert redact_argv(argv, RED) == argv
    assert HttpRedaction(RED).header_value("X-Config", value) == value
    assert HttpRedaction(RED).header_value("User-Agent", value) == value


@pytest.mark.parametrize("argv", [["npx", "srv", "--config", JWT], ["npx", "srv", JWT], ["srv", f"-e=CONFIG={JWT}"]])
def test_a_jwt_argument_is_still_hashed_by_its_shape(argv: list[str]) -> None:
    shown = " ".join(redact_argv(argv, RED))
    assert JWT not in shown and RED.hash(JWT) in shown, shown


def test_a_base64_json_configuration_hashes_alike_in_a_url_an_argument_and_a_header() -> None:
    """The whole hash of one configuration, wherever it was given, still tells it apart and alike."""
    hashed = RED.hash(ARG_CONFIG_URLSAFE)
    assert hashed in HttpRedaction(RED).url(f"{SMITHERY}?config={ARG_CONFIG_URLSAFE}")
    assert hashed in redact_argv([*SMITHERY_CLI, "--config", ARG_CONFIG_URLSAFE], RED)
    assert hashed == HttpRedaction(RED).header_value("X-Config", ARG_CONFIG_URLSAFE)


PLUS_CONFIG = _b64({"apiKey": "B64Plus0001", "note": "??>>~~"})  # its base64 holds `+` and `/`
assert "+" in PLUS_CONFIG


@pytest.mark.parametrize(
    "shown",
    [
        # a raw `+`, as a URL written by hand carries it: a form parser reads a space there
        lambda: HttpRedaction(RED).url(f"{SMITHERY}?config={PLUS_CONFIG}&profile=work"),
        lambda: HttpRedaction(RED).url(f"https://h.example/app#/cb?state={PLUS_CONFIG}"),
        lambda: HttpRedaction(RED).header_value("Referer", f"{SMITHERY}?config={PLUS_CONFIG}"),
        # a URL given as a query value, its own query's `+` raw once decoded
        lambda: unquote(
            HttpRedaction(RED).url(f"https://h.example/login?next={quote(f'{SMITHERY}?config={PLUS_CONFIG}', safe='')}")
        ),
        lambda: " ".join(redact_argv(["npx", "-y", "mcp-remote", f"{SMITHERY}?config={PLUS_CONFIG}"], RED)),
        lambda: " ".join(redact_argv(["srv", "--params", f"user=u&config={PLUS_CONFIG}"], RED)),
        lambda: HttpRedaction(RED).body(f"grant_type=x&config={PLUS_CONFIG}".encode())[0].decode(),
        # a `+` the client encoded, and a space it encoded where a `+` stood
        lambda: HttpRedaction(RED).url(f"{SMITHERY}?config={quote(PLUS_CONFIG, safe='')}"),
        lambda: HttpRedaction(RED).url(f"{SMITHERY}?config={PLUS_CONFIG.replace('+', '%20')}"),
    ],
    ids=["url", "fragment", "referer", "nested-url", "argument-url", "argument-pairs", "form-body", "encoded-plus",
         "encoded-space"],
)  # fmt: skip
def test_a_base64_json_configuration_with_a_raw_plus_hashes_as_the_argument_does(shown: Callable[[], str]) -> None:
    """A base64 configuration holding a `+` hashed as the text a form parser makes of it (`+` a space)
    in a query value, and as it came as an argument or a header: one configuration, two hashes."""
    text = shown()
    assert RED.hash(PLUS_CONFIG) in text, text
    assert "B64Plus" not in _decoded_values(text), text
    assert RED.hash(PLUS_CONFIG) in redact_argv(["npx", "srv", "--config", PLUS_CONFIG], RED)
    assert RED.hash(PLUS_CONFIG) == HttpRedaction(RED).header_value("X-Config", PLUS_CONFIG)


def test_a_plus_in_a_secret_named_query_value_is_still_a_space() -> None:
    """A value of no base64 JSON is hashed as a form parser reads it: `a+b` is the secret `a b`."""
    redaction = HttpRedaction(RED)
    assert redaction.url("https://h/mcp?api_key=Plus+0002") == f"https://h/mcp?api_key={RED.hash('Plus 0002')}"
    assert redaction.url("https://h/mcp?api_key=Plus%2B0002") == f"https://h/mcp?api_key={RED.hash('Plus+0002')}"


def test_base64_json_configurations_with_a_plus_and_no_credential_stay_and_others_differ() -> None:
    plain = _b64({"region": "eu", "note": "??>>~~"})
    assert "+" in plain
    assert HttpRedaction(RED).url(f"{SMITHERY}?config={plain}") == f"{SMITHERY}?config={plain}"
    other = _b64({"apiKey": "B64Plus0003", "note": "??>>~~"})
    redaction = HttpRedaction(RED)
    assert redaction.url(f"{SMITHERY}?config={other}") != redaction.url(f"{SMITHERY}?config={PLUS_CONFIG}")


ARRAY_CONFIG = _b64([{"name": "github", "githubPersonalAccessToken": "B64Array0001"}])  # `W3si…`: `[{"`
ARRAY_CONFIG_URLSAFE = _b64([{"note": "??>>~~", "apiKey": "B64Array0002"}], urlsafe=True, padded=False)
ARRAY_OF_TOKENS = _b64([SMITHERY_GHP])  # `WyJ…`: `["`
ARRAY_CONFIG_SPACED = _b64([{"password": "B64Array0003"}], lead=b"\n ")


@pytest.mark.parametrize("config", [ARRAY_CONFIG, ARRAY_CONFIG_URLSAFE, ARRAY_OF_TOKENS, ARRAY_CONFIG_SPACED],
                         ids=["objects", "url-safe", "tokens", "white-space"])  # fmt: skip
@pytest.mark.parametrize(
    "shown",
    [
        lambda c: HttpRedaction(RED).url(f"{SMITHERY}?config={c}&profile=work"),
        lambda c: HttpRedaction(RED).url(f"{SMITHERY}?config={quote(c, safe='')}"),
        lambda c: HttpRedaction(RED).header_value("X-Config", c),
        lambda c: " ".join(redact_argv([*SMITHERY_CLI, "--config", c], RED)),
        lambda c: " ".join(redact_argv(["docker", "run", "-e", f"SMITHERY_CONFIG={c}", "img"], RED)),
    ],
    ids=["url", "url-encoded", "header", "argument", "variable"],
)
def test_a_base64_json_array_holding_credentials_is_hashed_as_an_object_is(
    shown: Callable[[str], str], config: str
) -> None:
    """A configuration given as base64 of a JSON array (`W3si…`, `[{"…`) rather than an object
    (`eyJ…`) was recorded as it came, its credentials readable to anyone decoding it."""
    text = shown(config)
    assert config not in text and quote(config, safe="") not in text and RED.hash(config) in text, text
    assert not any(s in _decoded_words(text) for s in ("B64Array", SMITHERY_GHP)), text


@pytest.mark.parametrize(
    "value",
    [
        _b64([{"region": "eu", "debug": True}]),  # an array holding no credential
        _b64(["eu", "us"], urlsafe=True, padded=False),
        "Wednesday-afternoon-report",  # a word starting as `[` does in base64
        "W1siYWJjIiwgImRlZiJdXQ",  # `[["abc", "def"]]`
        'W/"0815abcdef0123456789"',  # a weak entity tag
    ],
    ids=["no-credential", "strings", "word", "nested-array", "etag"],
)
def test_base64_json_arrays_without_credentials_stay(value: str) -> None:
    assert HttpRedaction(RED).url(f"{SMITHERY}?config={value}&page=2") == f"{SMITHERY}?config={value}&page=2"
    assert HttpRedaction(RED).header_value("X-Config", value) == value
    assert HttpRedaction(RED).header_value("ETag", value) == value
    assert redact_argv(["npx", "srv", "--config", value], RED) == ["npx", "srv", "--config", value]


BODY_CONFIG = _b64({"githubPersonalAccessToken": "B64Body0001", "owner": "me"})
BODY_CONFIG_URLSAFE = _b64({"note": "??>>~~", "dbUrl": "postgresql://u:B64Body0002@h/db"}, urlsafe=True, padded=False)
BODY_CONFIG_ARRAY = _b64([{"apiKey": "B64Body0003"}])


@pytest.mark.parametrize(
    ("body", "config", "kept"),
    [
        # a hosted server's configuration posted to a deployment or session endpoint of the origin
        (orjson.dumps({"config": BODY_CONFIG, "profile": "work"}), BODY_CONFIG, [b'"profile":"work"']),
        (orjson.dumps({"servers": [{"name": "gh", "settings": BODY_CONFIG_URLSAFE}]}), BODY_CONFIG_URLSAFE,
         [b'"name":"gh"']),
        (orjson.dumps({"x": {"y": BODY_CONFIG_ARRAY}, "n": 1}), BODY_CONFIG_ARRAY, [b'"n":1']),
        (b'  {"config" : "' + BODY_CONFIG.encode() + b'"}\n', BODY_CONFIG, [b'"config"']),
    ],
    ids=["top-level", "nested-url-safe", "array", "spaced"],
)  # fmt: skip
def test_a_base64_json_configuration_in_a_json_body_that_is_no_json_rpc_message_is_hashed(
    body: bytes, config: str, kept: list[bytes]
) -> None:
    """A body that is no JSON-RPC message had its secret-named fields hashed, and a field of any other
    name holding base64 JSON with a credential (`{"config": "eyJ…"}`) kept, its credential readable to
    anyone decoding it, where a query value, a header or an argument holding it is hashed whole."""
    shown, policy = HttpRedaction(RED).body(body)
    assert config.encode() not in shown and RED.hash(config).encode() in shown, shown
    assert "B64Body" not in _decoded_words(shown.decode()), shown
    assert all(k in shown for k in kept), shown
    assert policy == "credentials"


@pytest.mark.parametrize(
    "body",
    [
        orjson.dumps({"config": _b64({"region": "eu", "debug": True}), "n": 1}),  # holding no credential
        orjson.dumps({"note": "eyebrowsandeyelashes", "etag": 'W/"0815abcdef0123456789"'}),
        orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"config": BODY_CONFIG}}),
        f"grant_type=x&config={BODY_CONFIG}".encode(),  # a form: hashed already, as a query is
    ],
    ids=["no-credential", "words", "json-rpc", "form"],
)
def test_json_bodies_without_base64_configurations_holding_credentials_keep_them(body: bytes) -> None:
    shown, policy = HttpRedaction(RED).body(body)
    if body.startswith(b"grant_type"):
        assert shown == f"grant_type=x&config={RED.hash(BODY_CONFIG)}".encode() and policy == "credentials"
    else:
        assert (shown, policy) == (body, "full")


def _configurations_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the base64 JSON configurations the redaction decodes and reads, as it reads them."""
    import addon.redact as redact

    read: list[int] = []
    real = redact._redact_json_strings

    def counted(doc: Any, redactor: Redactor) -> bool:
        read.append(len(orjson.dumps(doc)))
        return real(doc, redactor)

    monkeypatch.setattr(redact, "_redact_json_strings", counted)
    return read


def test_base64_json_strings_of_a_body_are_read_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every string of a body read as a configuration held the proxy's event loop a fifth of a second
    for 60 KiB of them: they are read up to as many characters as one query value, the rest hashed
    unread when they start as base64 JSON does, so a credential past the bound is still hidden."""
    import addon.redact as redact

    innocent = _b64({f"k{i}": f"value {i}" for i in range(60)})
    read = _configurations_read(monkeypatch)
    body = orjson.dumps({"c": [innocent] * 40 + [BODY_CONFIG]})
    assert len(body) <= redact._CREDENTIAL_BODY_MAX
    shown, policy = HttpRedaction(RED).body(body)
    assert policy == "credentials" and BODY_CONFIG.encode() not in shown and RED.hash(BODY_CONFIG).encode() in shown
    assert "B64Body" not in _decoded_words(shown.decode())
    assert 0 < sum(read) <= redact._BASE64_JSON_READ_MAX, read


_FILLER = [{"id": f"item-{i}", "title": f"Title number {i}", "monkey": "kept", "zipcode": "75001"} for i in range(1200)]


def _big_json(**fields: object) -> bytes:
    """A JSON object over 64 KiB, `fields` after a long list of items holding no credential."""
    body = orjson.dumps({"items": _FILLER, **fields})
    assert len(body) > 64 << 10
    return body


_BIG_FORM_HEAD = b"&".join(b"field%d=%s" % (i, b"x" * 60) for i in range(1100))


@pytest.mark.parametrize(
    ("body", "secret"),
    [
        (_big_json(access_token="BigBody0001", token_type="Bearer"), b"BigBody0001"),
        (_big_json(nested={"deeper": {"clientSecret": "BigBody0002"}}), b"BigBody0002"),
        (_big_json(items2=[{"password": "BigBody0003"}]).replace(b'"password":', b'"password" :\n'), b"BigBody0003"),
        (b"  " + _big_json(API_KEY="BigBody0004"), b"BigBody0004"),
        (_BIG_FORM_HEAD + b"&client_secret=BigBody0005&client_id=app", b"BigBody0005"),
        (_BIG_FORM_HEAD + b"&auth[token]=BigBody0006", b"BigBody0006"),
        (b"code=BigBody0007&" + _BIG_FORM_HEAD, b"BigBody0007"),
    ],
    ids=["token", "camel-nested", "spaced", "upper-case", "form", "form-bracket", "form-first"],
)
def test_a_secret_named_field_in_a_body_over_64_kib_is_hashed(body: bytes, secret: bytes) -> None:
    """A body that is no JSON-RPC message and longer than 64 KiB was recorded as it came unread, a
    secret-named field in it in clear, where the same field in a shorter body is hashed."""
    shown, policy = HttpRedaction(RED).body(body)
    assert secret not in shown, shown[-200:]
    assert policy == "credentials"
    assert orjson.loads(shown) == {"$redacted": {"len": len(body), "hash": RED.hash(body)}}


@pytest.mark.parametrize(
    "body",
    [
        _big_json(bypass="kept", hotkey="ctrl-k", encode="utf-8", keyboard="us", tokens=5),
        orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"items": _FILLER, "password": "kept"}}),
        orjson.dumps({"result": {"items": _FILLER, "access_token": "kept"}, "jsonrpc": "2.0", "id": 1}),
        b"<html>" + b"<p>password: kept, token=kept</p>" * 3000 + b"</html>",
        _BIG_FORM_HEAD + b"&compass=north&bypass=1",
    ],
    ids=["no-secret-names", "json-rpc", "json-rpc-last", "html", "form"],
)
def test_bodies_over_64_kib_without_secret_named_fields_stay_whole(body: bytes) -> None:
    assert len(body) > 64 << 10
    assert HttpRedaction(RED).body(body) == (body, "full")


def test_every_secret_name_is_found_in_a_body_over_64_kib() -> None:
    """The long body's search reads names backwards from their end: each name a short body hashes
    must be found so, as a JSON key and as a form's name, in any case the short body takes."""
    names = [*SECRET_QUERY_PARAMS, "api_key", "API_KEY", "db.password", "X-Api-Token", "apiKey", "sortKey",
             "clientSecret", "auth[token]", "user[password]", "Authorization", "SESSION_ID"]  # fmt: skip
    redaction = HttpRedaction(RED)
    for name in names:
        for body in (_big_json(**{name: "BigName0001"}), _BIG_FORM_HEAD + f"&{name}=BigName0001".encode()):
            shown, policy = redaction.body(body)
            assert policy == "credentials" and b"BigName0001" not in shown, (name, body[-60:])


@pytest.mark.parametrize(
    ("body", "secret"),
    [
        (_big_json().replace(b'{"items"', b'{"pass\\u0077ord":"BigEsc0001","items"', 1), b"BigEsc0001"),
        (_BIG_FORM_HEAD + b"&api%5Fkey=BigEsc0002", b"BigEsc0002"),
        (_BIG_FORM_HEAD + b"&client%5fsecret=BigEsc0003&next=https%3A%2F%2Fh%2F", b"BigEsc0003"),
    ],
    ids=["json-escape", "form-escape", "form-escape-lower"],
)
def test_a_secret_name_written_with_escapes_in_a_body_over_64_kib_is_found(body: bytes, secret: bytes) -> None:
    """A server reads `"pass\\u0077ord"` as `password` and `api%5Fkey` as `api_key`, as a short body's
    parse does."""
    shown, policy = HttpRedaction(RED).body(body)
    assert policy == "credentials" and secret not in shown, shown[-100:]


def test_a_long_form_with_encoded_values_and_no_secret_name_stays() -> None:
    body = _BIG_FORM_HEAD + b"&next=https%3A%2F%2Fh%2Fcb&q=a%20b"
    assert HttpRedaction(RED).body(body) == (body, "full")


HEADER_GHP = "ghp_" + "HdrTok" * 6 + "0001"
HEADER_SK = "sk-proj-" + "HdrTok0002" * 4
HEADER_XOXB = "xoxb-123456789012-1234567890123-HdrTok0003abcdef"
HEADER_AKIA = "AKIAHDRTOK0004EXAMPL"


@pytest.mark.parametrize(
    ("name", "value", "token"),
    [
        ("X-Upstream-Credentials-Hint", HEADER_GHP, HEADER_GHP),
        ("X-Forwarded-For-Upstream", f"Bearer {HEADER_SK}", HEADER_SK),
        ("X-Slack", HEADER_XOXB, HEADER_XOXB),
        ("X-Aws-Id", HEADER_AKIA, HEADER_AKIA),
        ("X-Identity", JWT, JWT),
        ("x-mcp-upstream", f"token {HEADER_GHP}", HEADER_GHP),
    ],
    ids=["github", "bearer-openai", "slack", "aws", "jwt", "lower-case-name"],
)
def test_a_well_known_token_in_a_header_on_no_list_is_hashed(name: str, value: str, token: str) -> None:
    """A header named as no rule names a credential (`X-Upstream-Credentials-Hint`, `X-Slack`) carrying
    a token of a well-known shape was recorded as it came, where the same token in a URL or an argument
    is hashed: the token is hashed alone, alike there, the scheme before it kept."""
    redaction = HttpRedaction(RED)
    shown = redaction.header_value(name, value)
    assert token not in shown and shown == value.replace(token, RED.hash(token)), shown
    assert RED.hash(token) in redact_argv(["srv", token], RED)
    assert redaction.headers([(name, value)]) == [[name, shown]]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("User-Agent", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 Chrome/120.0.0.0"),
        ("Accept", "application/json, text/event-stream"),
        ("X-Request-Id", "0f8fad5b-d9cb-469f-a165-70867728950e"),
        ("X-Route", "ghp_cache_warmup_entries_for_the_day"),  # a token's prefix, not its characters
        ("X-Note", "skeleton-key-of-the-castle-walls-and-towers"),
        ("Date", "Wed, 21 Oct 2015 07:28:00 GMT"),
        ("Mcp-Protocol-Version", "2025-06-18"),
    ],
)
def test_headers_on_no_list_without_a_well_known_token_stay(name: str, value: str) -> None:
    assert HttpRedaction(RED).header_value(name, value) == value


@pytest.mark.parametrize("name", sorted(PLAIN_HEADERS))
def test_headers_whose_grammar_holds_no_credential_are_not_searched(name: str) -> None:
    """The searches of a header on no list cost 0.1-0.4 µs each on the proxy's event loop, for every
    header of every request and answer; the standard headers whose values are media types, dates,
    lengths or ids (`PLAIN_HEADERS`) are kept as they are. The same value in a header of another
    name is searched."""
    redaction = HttpRedaction(RED)
    assert redaction.header_value(name.title(), HEADER_GHP) == HEADER_GHP
    assert redaction.header_value("X-" + name.title(), HEADER_GHP) == RED.hash(HEADER_GHP)


@pytest.mark.parametrize(
    "redact",
    [
        lambda query: HttpRedaction(RED).url(f"{SMITHERY}?{query}"),
        lambda query: HttpRedaction(RED).body(query.encode())[0].decode(),
        lambda query: " ".join(redact_argv(["srv", "--params", f"user=u&{query}"], RED)),
    ],
    ids=["url", "form-body", "argument-pairs"],
)
def test_base64_json_values_of_a_query_are_read_within_a_bound(
    monkeypatch: pytest.MonkeyPatch, redact: Callable[[str], str]
) -> None:
    """Each base64 JSON value of a query was read whole, up to 4,096 characters each, however many
    there were: forty of them (a form body under 64 KiB, a long URL) held the proxy's event loop a
    tenth of a second or more. They are read up to 4,096 characters a query, the rest hashed unread
    when they start as base64 JSON does, so a credential past the bound is still hidden."""
    innocent = _b64({f"k{i}": f"value {i}" for i in range(60)})
    read = _configurations_read(monkeypatch)
    query = "&".join(f"c{i}={innocent}" for i in range(40)) + f"&config={BODY_CONFIG}"
    shown = redact(query)
    assert BODY_CONFIG not in shown and RED.hash(BODY_CONFIG) in shown, shown[-200:]
    assert 0 < sum(read) <= _BASE64_JSON_READ_MAX, len(read)


@pytest.mark.parametrize(
    ("body", "member", "secret"),
    [
        (b'{"jsonrpc":"2.0","id":{"note":"IdSecret01"},"method":"x"}', "id", "IdSecret01"),
        (b'{"jsonrpc":"2.0","id":["IdSecret02"],"result":{}}', "id", "IdSecret02"),
        (b'{"jsonrpc":{"t":"RpcSecret03"},"id":1,"method":"x"}', "jsonrpc", "RpcSecret03"),
        (b'{"jsonrpc":"RpcSecret04","id":1,"method":"x"}', "jsonrpc", "RpcSecret04"),
        (b'{"jsonrpc":"2.0","id":1,"method":{"m":"MethodSecret05"}}', "method", "MethodSecret05"),
        (b'{"jsonrpc":"2.0","id":1,"method":["MethodSecret06"]}', "method", "MethodSecret06"),
    ],
)
@pytest.mark.parametrize("batch", [False, True], ids=["message", "batch"])
def test_metadata_bodies_keep_the_envelope_only_as_json_rpc_writes_it(
    body: bytes, member: str, secret: str, batch: bool
) -> None:
    """`--bodies metadata` kept `jsonrpc`, `id` and `method` as they came whatever they held: an object or
    an array there (no JSON-RPC message writes one) passed with its contents in clear."""
    out, _ = HttpRedaction(RED, bodies="metadata").body(b"[" + body + b"]" if batch else body)
    assert secret.encode() not in out
    (msg,) = orjson.loads(out) if batch else [orjson.loads(out)]
    assert set(msg[member]) == {"$redacted"}


@pytest.mark.parametrize("ident", ["1", '"s-1"', "null", "1.5", "-0", "true"])
def test_metadata_bodies_keep_an_id_as_json_rpc_writes_one(ident: str) -> None:
    body = f'{{"jsonrpc":"2.0","id":{ident},"method":"tools/call","params":{{"name":"q"}}}}'.encode()
    out, _ = HttpRedaction(RED, bodies="metadata").body(body)
    assert orjson.loads(out)["id"] == orjson.loads(ident)
    assert orjson.loads(out)["jsonrpc"] == "2.0" and orjson.loads(out)["method"] == "tools/call"
