"""client_table: per server and client, probes, outcomes, the era it acted in, findings."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import polars as pl
from polars.testing import assert_frame_equal

from analyzer.clients import CLIENT_TABLE_SCHEMA, client_table
from analyzer.rules import run_rules
from analyzer.rules.scenario import Scenario

_NO_PARTS = dict.fromkeys(("name", "version", "user_agent", "address", "host_process"))


def test_client_table_counts_and_findings() -> None:
    s = Scenario()
    for i in range(6):
        c = s.conn("weather", f"spawn{i}", client="agent")
        c.probe(i * 2.0, "discover-result", ttl_ms=0)
        c.call(i * 2.0 + 0.4, modern=True)
    legacy = s.conn("weather", "old", client="classic")
    legacy.probe(0.0, "legacy-answer")
    legacy.init(0.1)
    legacy.call(0.2)
    analysis = s.analysis()
    findings = run_rules(analysis)
    table = client_table(SimpleNamespace(**vars(analysis), findings=findings, servers=[]))
    expected = pl.DataFrame(
        {
            "server": ["weather", "weather"],
            "client": ["agent", "classic"],
            "identity": [dict(_NO_PARTS, name="agent"), dict(_NO_PARTS, name="classic")],
            "connections": [6, 1],
            "requests": [6, 1],
            "probes": [6, 1],
            "outcomes": ["discover-result ×6", "legacy-answer ×1"],
            "inits": [0, 1],
            "acted_as": ["modern", "legacy"],
            "server_era": [None, None],
            "findings": [1, 0],
            "worst": ["warning", None],
        },
        schema=CLIENT_TABLE_SCHEMA,
    )
    assert_frame_equal(table, expected)


def test_legacy_http_session_connections_belong_to_the_initializing_client() -> None:
    s = Scenario()
    first = s.conn("api", "c1", client="host", transport="http")
    first.init(0.0)
    s.add("c1.jsonl", 0.02, server="api", conn="c1", transport="http", record_type="http.response", dir="s2c",
          kind="response", session_id="sess-1")
    # later requests of the session arrive on new connections with only a User-Agent
    later = s.conn("api", "c2", client=None, transport="http")
    s.add("c2.jsonl", 1.0, server="api", conn="c2", transport="http", record_type="http.request", dir="c2s",
          kind="request", method="tools/call", id="2", session_id="sess-1", user_agent="python-httpx/0.28",
          client_name="python-httpx/0.28")
    assert later.file == "c2.jsonl"
    table = client_table(s.analysis(), findings=[])
    assert table.select("client", "connections", "requests", "acted_as").to_dicts() == [
        {"client": "host", "connections": 2, "requests": 1, "acted_as": "legacy"}
    ]


def test_empty_analysis_gives_an_empty_table() -> None:
    table = client_table(SimpleNamespace(), findings=[])
    assert table.schema == pl.Schema(CLIENT_TABLE_SCHEMA)
    assert table.height == 0


def test_pipeline_shares_one_rule_context_and_gets_the_same_table(tmp_path: Path) -> None:
    from analyzer.pipeline import analyze
    from analyzer.rules import RuleContext, RuleOptions
    from tests.test_messages import Cap, discover_result, probe

    cap = Cap(tmp_path)
    for n in range(3):
        cap.c2s(probe(n + 1))
        cap.s2c(discover_result(n + 1))
    a = analyze([str(cap.close())])
    assert isinstance(a.rule_context, RuleContext)
    assert RuleContext.from_analysis(a, RuleOptions()) is a.rule_context
    fresh = SimpleNamespace(messages=a.messages, probes=a.probes, inits=a.inits, findings=a.findings, servers=a.servers)
    assert a.clients is not None
    assert_frame_equal(a.clients, client_table(fresh))
    assert a.clients.get_column("probes").to_list() == [3]


def test_acted_as_names_both_eras_in_name_order_and_none_for_probes_only() -> None:
    s = Scenario()
    both = s.conn("weather", "mixed", client="both")
    both.init(0.0)  # the handshake acts in the legacy era
    both.call(0.5, modern=True)  # an enveloped call acts in the modern one
    s.conn("weather", "probing", client="prober").probe(1.0, "discover-result")
    table = client_table(s.analysis(), findings=[])
    assert dict(zip(table["client"], table["acted_as"], strict=True)) == {"both": "legacy+modern", "prober": "none"}


# --- client identity: clientInfo name and version, User-Agent, client address, host process ------


def _clients(s: Scenario) -> dict[str, int]:
    table = client_table(s.analysis(), findings=[])
    return dict(zip(table["client"], table["connections"], strict=True))


def test_stdio_clients_with_one_client_info_are_told_apart_by_their_host_process() -> None:
    # both mcp SDKs send clientInfo {"name": "mcp", "version": "0.1.0"}
    s = Scenario()
    for i, host in enumerate(["/venv/bin/python agent.py", "/legacy/bin/python agent.py", "/venv/bin/python agent.py"]):
        c = s.conn("weather", f"spawn{i}", client="mcp", version="0.1.0")
        c.spawn(i * 1.0, host=host)
        c.probe(i * 1.0 + 0.1, "discover-result")
    assert _clients(s) == {
        "mcp 0.1.0 · host: /legacy/bin/python agent.py": 1,
        "mcp 0.1.0 · host: /venv/bin/python agent.py": 2,  # the same program twice: one client
    }


def test_http_clients_are_told_apart_by_user_agent_and_client_host_not_port() -> None:
    s = Scenario()
    conns = [
        ("c1", "python-httpx2/2.16.2", "127.0.0.1:40001"),
        ("c2", "python-httpx2/2.16.2", "127.0.0.1:40002"),  # another connection of the same program
        ("c3", "python-httpx/0.28.1", "127.0.0.1:40003"),  # another SDK on the same host
        ("c4", "python-httpx2/2.16.2", "10.0.0.7:40001"),  # the same SDK on another host
    ]
    for i, (conn, agent, address) in enumerate(conns):
        c = s.conn("api", conn, client="mcp", version="0.1.0", transport="http", user_agent=agent, address=address)
        c.probe(i * 1.0, "discover-result")
    assert _clients(s) == {
        "mcp 0.1.0 · python-httpx/0.28.1 · from 127.0.0.1": 1,
        "mcp 0.1.0 · python-httpx2/2.16.2 · from 10.0.0.7": 1,
        "mcp 0.1.0 · python-httpx2/2.16.2 · from 127.0.0.1": 2,
    }


def test_identity_without_client_info_and_ipv6_address() -> None:
    s = Scenario()
    c = s.conn("api", "c1", client=None, transport="http", user_agent="curl/8.5.0", address="[::1]:5000")
    c.call(0.0, modern=True)
    s.conn("weather", "spawn", client=None).call(0.0)  # nothing names it
    assert set(_clients(s)) == {"curl/8.5.0 · from [::1]", "unknown"}


def test_session_continuations_take_the_identity_of_the_initializing_connection() -> None:
    s = Scenario()
    first = s.conn("api", "c1", client="host", version="1.2", transport="http", user_agent="ua/1", address="10.0.0.1:1")
    first.init(0.0)
    s.add("c1.jsonl", 0.02, server="api", conn="c1", transport="http", record_type="http.response", dir="s2c",
          kind="response", session_id="sess-1")
    later = s.conn("api", "c2", client=None, transport="http", user_agent="ua/1", address="10.0.0.1:2")
    later.call(1.0, session="sess-1")
    assert _clients(s) == {"host 1.2 · ua/1 · from 10.0.0.1": 2}


def test_client_table_shows_the_identity_parts() -> None:
    s = Scenario()
    c = s.conn("weather", "spawn", client="mcp", version="0.1.0")
    c.spawn(0.0, host="python agent.py --token=hmac:abc")
    c.probe(0.1, "discover-result")
    h = s.conn("api", "c1", client="mcp", version="0.1.0", transport="http", user_agent="ua/1", address="10.0.0.1:9")
    h.probe(0.0, "discover-result")
    table = client_table(s.analysis(), findings=[])
    assert table["identity"].to_list() == [
        {"name": "mcp", "version": "0.1.0", "user_agent": "ua/1", "address": "10.0.0.1", "host_process": None},
        {"name": "mcp", "version": "0.1.0", "user_agent": None, "address": None,
         "host_process": "python agent.py --token=hmac:abc"},
    ]


def test_server_verdicts_list_the_same_client_identities_as_the_client_table() -> None:
    from analyzer.eras import server_verdicts

    s = Scenario()
    for i, agent in enumerate(["python-httpx2/2.16.2", "python-httpx/0.28.1"]):
        c = s.conn("api", f"c{i}", client="mcp", version="0.1.0", transport="http", user_agent=agent,
                   address=f"127.0.0.1:{4000 + i}")
        c.probe(i * 1.0, "discover-result")
    a = s.analysis()
    [verdict] = server_verdicts(a.messages, a.probes, a.inits)
    assert verdict.clients == sorted(client_table(a, findings=[])["client"].to_list())
    assert len(verdict.clients) == 2
