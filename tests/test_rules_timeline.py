"""stale-era and rollout-split on tiny inline frames."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.findings import Evidence, Severity
from analyzer.pipeline import AnalyzeOptions, analyze
from analyzer.rules import run_rules
from analyzer.rules.scenario import MODERN, Scenario
from analyzer.rules.timeline import split_windows, window_aggregates
from tests.test_messages import ENVELOPE, Cap, discover_result, err, modern_headers, probe


def test_stale_era_keeps_sending_refused_initialize() -> None:
    s = Scenario()
    lines = [
        s.conn("api", f"c{i}", client="cached").init(i * 5.0, "refused-named", versions=[MODERN]) for i in range(3)
    ]
    [f] = run_rules(s.analysis(), only=["stale-era"])
    assert (f.rule, f.severity, f.client) == ("stale-era", Severity.WARNING, "cached")
    assert f.details["requests"] == 3
    assert [e.line for e in f.evidence] == lines
    assert "refuses it with unsupported-version" in f.message


def test_stale_era_refused_then_reprobe_is_fine() -> None:
    s = Scenario()
    s.conn("api", "c0").init(0.0, "refused-named", versions=[MODERN])
    s.conn("api", "c1").probe(1.0, "discover-result")
    s.conn("api", "c2").init(2.0, "refused-named", versions=[MODERN])
    assert run_rules(s.analysis(), only=["stale-era"]) == []


def test_stale_era_modern_requests_refused_the_legacy_way() -> None:
    s = Scenario()
    c = s.conn("api", "c1", client="cached", transport="http")
    c.probe(0.0, "discover-result")
    c.call(1.0, id="2", modern=True)
    c.call(100.0, id="3", modern=True, error_code=-32000, http_status=400)
    c.call(101.0, id="4", modern=True, error_code=-32000, http_status=400)
    [f] = run_rules(s.analysis(), only=["stale-era"])
    assert "now answers as legacy" in f.message


def test_stale_era_after_other_clients_saw_the_upgrade() -> None:
    s = Scenario()
    old = s.conn("svc", "a1", client="A")
    old.probe(0.0, "legacy-answer")
    old.init(0.1)
    old.call(1.0, session="s1")
    # the server is upgraded; B's probe sees it
    change = s.conn("svc", "b1", client="B").probe(50.0, "discover-result")
    stale = s.conn("svc", "a2", client="A")
    init = stale.init(60.0)
    [f] = run_rules(s.analysis(), only=["stale-era"])
    assert f.client == "A"
    assert Evidence("b1.jsonl", change, "B saw modern") in f.evidence
    assert Evidence("a2.jsonl", init, "legacy request") in f.evidence


def test_no_stale_era_for_a_client_that_never_probed() -> None:
    """A legacy-only client (`mcp` 1.x) never probes: it holds no era verdict that could go stale, and a
    server upgraded to dual-era that still serves it contradicts nothing (one it refuses is case (a))."""
    s = Scenario()
    s.conn("svc", "a1", client="legacy-only").init(0.0)
    s.conn("svc", "b1", client="B").probe(1.0, "legacy-answer")
    s.conn("svc", "b2", client="B").probe(50.0, "discover-result")  # upgraded in place
    again = s.conn("svc", "a2", client="legacy-only")
    again.init(60.0)
    again.call(61.0, session="s2")
    assert run_rules(s.analysis(), only=["stale-era"]) == []


def test_no_stale_era_when_the_client_reprobes_after_the_upgrade() -> None:
    s = Scenario()
    old = s.conn("svc", "a1", client="A")
    old.probe(0.0, "legacy-answer")
    old.init(0.1)
    s.conn("svc", "b1", client="B").probe(50.0, "discover-result")
    fresh = s.conn("svc", "a2", client="A")
    fresh.probe(60.0, "discover-result")
    fresh.call(60.5, modern=True)
    assert run_rules(s.analysis(), only=["stale-era"]) == []


def test_rollout_split_between_peers() -> None:
    s = Scenario()
    for i in range(4):
        peer = "10.0.0.1:8000" if i % 2 == 0 else "10.0.0.2:8000"
        outcome = "discover-result" if i % 2 == 0 else "legacy-answer"
        s.conn("lb", f"c{i}", transport="http").probe(i * 5.0, outcome, peer=peer, http_status=200)
    [f] = run_rules(s.analysis(), only=["rollout-split"])
    assert (f.rule, f.severity, f.server, f.client) == ("rollout-split", Severity.WARNING, "lb", None)
    assert f.details["axis"] == "era"
    assert f.details["peers"] == [
        {"peer": "10.0.0.1:8000", "era": "modern", "count": 2},
        {"peer": "10.0.0.2:8000", "era": "legacy", "count": 2},
    ]
    assert f.details["duration_s"] == 15.0
    assert "10.0.0.2:8000 → legacy ×2" in f.message


def test_rollout_split_initialize_served_and_refused() -> None:
    s = Scenario()
    s.conn("lb", "c1", transport="http").init(0.0, peer="10.0.0.1:8000")
    s.conn("lb", "c2", transport="http").init(1.0, "refused-named", versions=[MODERN], peer="10.0.0.2:8000")
    [f] = run_rules(s.analysis(), only=["rollout-split"])
    assert f.details["axis"] == "initialize"


def test_a_split_seen_only_in_how_modern_requests_were_answered() -> None:
    """Every probe answered modern; modern calls answered with results and sessionless refusals by turns."""
    s = Scenario()
    c = s.conn("lb", "c1", transport="http")
    c.probe(0.0, "discover-result")
    for i in range(4):
        refused = {"error_code": -32000, "http_status": 400} if i % 2 else {}
        c.call(1.0 + i, id=f"r{i}", modern=True, **refused)  # type: ignore[arg-type]
    [f] = run_rules(s.analysis(), only=["rollout-split"])
    assert f.details["axis"] == "era"
    assert f.details["peers"] == [
        {"peer": "(no peer address)", "era": "legacy", "count": 2},
        {"peer": "(no peer address)", "era": "modern", "count": 3},
    ]
    # answered modern throughout: no split
    calm = Scenario()
    c = calm.conn("lb", "c1", transport="http")
    c.probe(0.0, "discover-result")
    for i in range(4):
        c.call(1.0 + i, id=f"r{i}", modern=True)
    assert run_rules(calm.analysis(), only=["rollout-split"]) == []


def test_a_clean_upgrade_is_not_a_split() -> None:
    s = Scenario()
    for i in range(3):
        s.conn("svc", f"old{i}").probe(i * 5.0, "legacy-answer")
    for i in range(3):
        s.conn("svc", f"new{i}").probe(20.0 + i * 5.0, "discover-result")
    assert run_rules(s.analysis(), only=["rollout-split"]) == []


def test_flipping_without_peer_addresses_is_a_split() -> None:
    s = Scenario()
    for i, outcome in enumerate(["legacy-answer", "discover-result", "legacy-answer", "discover-result"]):
        s.conn("svc", f"c{i}").probe(i * 5.0, outcome)
    [f] = run_rules(s.analysis(), only=["rollout-split"])
    assert f.details["peers"][0]["peer"] == "(no peer address)"


def test_stale_era_runs_are_per_client_and_broken_by_an_answered_request() -> None:
    s = Scenario()
    refused = {"modern": True, "error_code": -32000, "http_status": 400}
    a = s.conn("api", "a1", client="A", transport="http")
    b = s.conn("api", "b1", client="B", transport="http")
    c = s.conn("api", "c1", client="C", transport="http")
    a.probe(0.0, "discover-result")
    b.probe(0.0, "discover-result")
    c.probe(0.0, "discover-result")
    # A: refused, answered, refused: never two in a row
    a.call(10.0, id="a2", **refused)
    a.call(11.0, id="a3", modern=True)
    a.call(12.0, id="a4", **refused)
    # B: two refused in a row, interleaved in time with A's and C's requests, and a legacy request
    # in between, which is not a modern request and does not break the run
    b.call(10.5, id="b2", **refused)
    b.call(11.2, id="b3")
    b.call(11.5, id="b4", **refused)
    # C: its only refusal comes right after B's in the request order: a run never spans clients
    c.call(12.5, id="c2", **refused)
    [f] = run_rules(s.analysis(), only=["stale-era"])
    assert f.client == "B"
    assert f.details["requests"] == 2
    assert "now answers as legacy" in f.message


def test_rollout_split_evidence_is_the_first_answers_in_file_line_order_however_the_files_were_first_seen() -> None:
    """rollout-split turns only the answers it shows into text (`_first_evidence`): they must be
    those a text sort of every answer gives, whatever order the file names' categories were made
    in, with several notes on one line, missing files and lines, and the count of all."""
    import random

    import polars as pl

    from analyzer.rules.frames import evidence
    from analyzer.rules.timeline import _first_evidence

    rng = random.Random(7)
    cat = pl.Categorical()
    # categories made in an order unlike the names' text order
    files = [f"cap-{rng.randrange(10**6):06d}.jsonl" for _ in range(12)] + [None]
    for draw in range(20):
        n = rng.randrange(1, 400)
        inside = pl.DataFrame(
            {
                "server": [rng.choice(["s1", "s2", "s3"]) for _ in range(n)],
                "axis": [rng.choice(["era", "initialize"]) for _ in range(n)],
                "file": [rng.choice(files) for _ in range(n)],
                "line": [rng.choice([None, *range(1, 30)]) for _ in range(n)],
                "era": [rng.choice(["modern", "legacy"]) for _ in range(n)],
                "peer": [rng.choice(["10.0.0.1:80", "10.0.0.2:80", "(no peer address)"]) for _ in range(n)],
            },
            schema_overrides={c: cat for c in ("server", "axis", "file", "era", "peer")},
        )
        shown = rng.choice([1, 3, 10])
        expected = (
            inside.select(
                "server",
                "axis",
                pl.col("file").cast(pl.String),
                pl.col("line").cast(pl.UInt32),
                pl.format("{} via {}", "era", "peer").alias("note"),
            )
            .unique()
            .sort("file", "line", "note")
            .group_by("server", "axis", maintain_order=True)
            .agg(pl.len().alias("evidence_total"), evidence(note=pl.col("note")).head(shown).alias("evidence"))
        )
        got = _first_evidence(inside, shown)
        key = ["server", "axis"]
        assert got.sort(key).equals(expected.sort(key)), draw


_PEERS_SPLIT = """
from analyzer.rules import run_rules
from analyzer.rules.scenario import Scenario
s = Scenario()
for i in range(4):
    peer = "10.0.0.1:8000" if i % 2 == 0 else "10.0.0.2:8000"
    outcome = "discover-result" if i % 2 == 0 else "legacy-answer"
    s.conn("lb", f"c{i}", transport="http").probe(i * 5.0, outcome, peer=peer, http_status=200)
far = float(__import__("sys").argv[1])
if far:  # one answer centuries later (a clock gone wrong, a timestamp in milliseconds)
    s.conn("lb", "late", transport="http").probe(far - s.start, "legacy-answer", peer="10.0.0.2:8000", http_status=200)
[f] = run_rules(s.analysis(), only=["rollout-split"])
print(f.details["peers"], f.ts)
"""


def test_an_answer_centuries_later_costs_no_walk_through_the_years_between() -> None:
    """rollout-split's windows were laid by `group_by_dynamic`, which steps through every window from a
    server's first answer to its last: one answer stamped in year 9000 (the capture's `ts` is any
    number up to year 9999) made `analyze`, and every `watch` round, run for hours. The far answer is
    in no split window, so the finding is the one without it."""
    import subprocess
    import sys

    runs = [
        subprocess.run(
            [sys.executable, "-c", _PEERS_SPLIT, far], capture_output=True, text=True, timeout=300, check=True
        )
        for far in ("0", "2.5e11")
    ]
    assert runs[0].stdout.startswith("[{'peer': '10.0.0.1:8000', 'era': 'modern', 'count': 2}")
    assert runs[1].stdout == runs[0].stdout


def _windows_by_walking(answers: pl.DataFrame, window_us: int) -> pl.DataFrame:
    """The windows as `group_by_dynamic` lays them, walking from one to the next (what `split_windows`
    replaced: the model its windows must equal)."""
    return (
        answers.group_by_dynamic(
            "dt", every=f"{max(window_us // 2, 1)}us", period=f"{window_us}us", group_by=["server", "axis"]
        )
        .agg(*window_aggregates())
        .drop("dt")
    )


_answer = st.tuples(
    st.sampled_from(["a", "b"]),
    st.sampled_from(["era", "initialize"]),
    st.sampled_from(["modern", "legacy"]),
    st.sampled_from(["p1", "p2"]),
    st.one_of(st.integers(-4_000_000, 4_000_000), st.integers(-(10**12), 10**12)),  # µs around 1970 and a day
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_answer, min_size=1, max_size=40), st.sampled_from([1, 2, 3, 999_999, 1_000_000, 60_000_000]))
def test_split_windows_are_the_windows_group_by_dynamic_lays(
    rows: list[tuple[str, str, str, str, int]], window_us: int
) -> None:
    answers = (
        pl.DataFrame(rows, schema=["server", "axis", "era", "peer", "us"], orient="row")
        .with_columns(pl.from_epoch("us", time_unit="us").alias("dt"), (pl.col("us") / 1e6).alias("ts"))
        .sort("dt")
        .with_columns(
            _change=(pl.col("era") != pl.col("era").shift(1)).over("server", "axis").fill_null(False).cast(pl.UInt32)
        )
    )
    key = ["server", "axis", "w_start", "w_end", "eras", "peers", "runs"]
    got = split_windows(answers, window_us).select(key).sort(key)
    assert got.equals(_windows_by_walking(answers, window_us).select(key).sort(key))


def test_refusals_of_requests_without_the_version_header_are_no_rollout_split(tmp_path: Path) -> None:
    """A client that sends enveloped calls without the `mcp-protocol-version` header lands on a
    dual-era server's legacy path (one SDK routes on the header alone) and is refused "Missing session
    ID": that is the request's fault, not a node in another era. The eras read only well-formed modern
    requests; rollout-split and stale-era (b) read them all, and one server behind one peer split."""
    cap = Cap(tmp_path, server="dual", transport="http")
    headerless = [["Content-Type", "application/json"], ["User-Agent", "ua-client/2"]]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    for k in range(3):
        cap.http_request(f"p{k}", probe(1), headers=modern_headers(), dt=2)
        cap.http_response(f"p{k}", 200, discover_result(1))
        cap.http_request(f"c{k}", call, headers=headerless)
        cap.http_response(f"c{k}", 400, err("server-error", -32600, "Bad Request: Missing session ID"))
    a = analyze([str(cap.close())], AnalyzeOptions())
    assert [v.era for v in a.servers] == ["modern"]
    assert not {f.rule for f in a.findings} & {"rollout-split", "stale-era"}, a.findings
