"""A server that never answers a probe and never closes the connection: the analyzer, its input ended,
calls the probe `no-answer` (`garbage` when the server wrote garbage in time); the live counters decided
a probe only when a later record came, so a silent hung server's probe stayed in no count however long
it was scraped. A scrape (`LiveStats.snapshot(now)`) now decides the probes whose timeout ran out by
`now`. The clock is given, never read: no test here waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from addon import format as fmt
from addon.metrics import PROBE_TIMEOUT, LiveStats, RecorderCollector
from tests.test_metrics import (
    GARBAGE_LINE,
    SERVER,
    WELL_FORMED,
    _analyzed,
    _http_outcomes,
    _sse_end,
    _sse_event,
    at,
    event,
    frame,
    probe,
    req,
    resp,
    with_id,
)

T0: Final = 1_800_000_000.0
"""`tests.test_metrics.at`'s 0 s."""
LATER: Final = T0 + 10 * PROBE_TIMEOUT
"""A scrape long after the probe's timeout ran out."""

HTTP: list[tuple[str, list[dict[str, Any]], dict[str, int]]] = [
    ("its-stream-open-and-silent", [at(0, req("f1", probe(1))), at(0.01, resp("f1", 200, sse=True))], {"no-answer": 1}),
    ("no-response-at-all", [at(0, req("f1", probe(1)))], {"no-answer": 1}),
    (
        "garbage-on-its-open-stream",
        [at(0, req("f1", probe(1))), at(0.01, resp("f1", 200, sse=True)), at(0.02, _sse_event("f1", GARBAGE_LINE))],
        {"garbage": 1},
    ),
    (
        "its-stream-ended-without-an-answer",
        [at(0, req("f1", probe(1))), at(0.01, resp("f1", 200, sse=True)), at(0.02, _sse_end("f1", "clean"))],
        {"no-answer": 1},
    ),
]


def _scraped(live: LiveStats, now: float) -> dict[str, dict[str, float]]:
    """Per server label, the outcomes a scrape at `now` exposes (read back by prometheus_client's parser)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RecorderCollector(lambda: live.snapshot(now)))  # type: ignore[arg-type]
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name == "erascope_probe_outcomes_total":
                out.setdefault(sample.labels["server"], {})[sample.labels["outcome"]] = sample.value
    return out


@pytest.mark.parametrize(("records", "expected"), [pytest.param(r, e, id=name) for name, r, e in HTTP])
def test_a_scrape_decides_an_http_probe_a_silent_server_left_unanswered(
    tmp_path: Path, records: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    assert _http_outcomes(tmp_path, records) == expected
    live = LiveStats()
    live.observe_all(records)
    # within the timeout nothing is decided yet: an answer may still come
    assert _scraped(live, T0 + PROBE_TIMEOUT / 2) == {}
    assert _scraped(live, LATER) == {SERVER: expected}
    assert _scraped(live, LATER + 1) == {SERVER: expected}  # counted once


def test_a_scrape_decides_a_stdio_probe_a_silent_server_left_unanswered(tmp_path: Path) -> None:
    records = [at(0, event("a", fmt.EV_SPAWN)), at(0, frame("a", fmt.C2S, with_id("1", WELL_FORMED)))]
    assert _analyzed(tmp_path, records[1:])["outcomes"] == {"no-answer": 1}  # `_analyzed` writes the spawn
    live = LiveStats()
    live.observe_all(records)
    assert live.snapshot(T0 + PROBE_TIMEOUT / 2)["servers"]["srv"]["outcomes"] == {}
    assert live.snapshot(LATER)["servers"]["srv"]["outcomes"] == {"no-answer": 1}


def test_a_scrape_decides_by_the_timeout_the_recorder_was_given(tmp_path: Path) -> None:
    records = [at(0, req("f1", probe(1))), at(0.01, resp("f1", 200, sse=True))]
    live = LiveStats(probe_timeout=60.0)
    live.observe_all(records)
    assert _scraped(live, T0 + 30) == {}  # past the default 10 s, within its 60 s
    assert _scraped(live, T0 + 120) == {SERVER: {"no-answer": 1}}


def test_an_answer_in_time_that_comes_after_a_scrape_still_counts() -> None:
    """A scrape before the deadline leaves the probe to its answer."""
    live = LiveStats()
    live.observe_all([at(0, req("f1", probe(1)))])
    assert _scraped(live, T0 + 1) == {}
    found = {"jsonrpc": "2.0", "id": 1, "result": {"supportedVersions": ["2026-07-28"], "capabilities": {}}}
    live.observe_all([at(2, resp("f1", 200, found))])
    assert _scraped(live, LATER) == {SERVER: {"discover-result": 1}}
