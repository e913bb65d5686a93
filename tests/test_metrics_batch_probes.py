"""A probe inside an HTTP JSON-RPC batch: the analyzer reads a POSTed array as its members (a row per
member, `analyzer.messages.batch_members`) and pairs each answer with the member of its id, so the
probe in it has its own outcome; the live counters kept one key per flow and counted no probe of a
batch. Each case is compared with what `analyze` reports on the same records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from addon import format as fmt
from addon.metrics import LiveStats
from tests.test_metrics import (
    MODERN,
    SERVER,
    TOOLS_LIST,
    _http_outcomes,
    _sse_end,
    _sse_event,
    at,
    err,
    feed,
    init,
    ok,
    probe,
    req,
    resp,
)

NOTE = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _posted(*members: dict[str, Any]) -> dict[str, Any]:
    """A POST of the batch `members` (flow `b`) with the headers a modern client sends with a probe."""
    return {**req("b", probe(1)), fmt.F_RAW: orjson.dumps(list(members)).decode()}


def _found(ident: Any) -> dict[str, Any]:
    return {**ok({"supportedVersions": [MODERN], "capabilities": {}}), "id": ident}


def _refused(ident: Any, code: int) -> dict[str, Any]:
    return {**err(code), "id": ident}


def _init_result(ident: Any) -> dict[str, Any]:
    return {**ok({"protocolVersion": "2025-11-25", "capabilities": {}}), "id": ident}


def _body(answer: Any, status: int = 200) -> list[dict[str, Any]]:
    return [resp("b", status, answer)]


def _events(*data: Any, how: str = "clean") -> list[dict[str, Any]]:
    raws = [d if isinstance(d, str) else orjson.dumps(d).decode() for d in data]
    return [resp("b", 200, sse=True), *(_sse_event("b", raw, i) for i, raw in enumerate(raws)), _sse_end("b", how)]


CASES: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], dict[str, int]]] = [
    ("probe-first", [probe(1), init(2)], _body([_init_result(2), _found(1)]), {"discover-result": 1}),
    ("probe-second", [init(1), probe(2)], _body([_found(2), _init_result(1)]), {"discover-result": 1}),
    (
        "two-probes",
        [probe(1), probe(2)],
        _body([_found(1), _refused(2, -32022)]),
        {"discover-result": 1, "unsupported-version": 1},
    ),
    ("after-a-notification", [NOTE, probe(1)], _body(_found(1)), {"discover-result": 1}),
    ("one-refusal-for-the-batch", [init(1), probe(2)], _body(_refused(None, -32602), 400), {"legacy-answer": 1}),
    (
        "one-refusal-naming-no-member",
        [probe(1), init(2)],
        _body(_refused("server-error", -32602), 400),
        {"legacy-answer": 1},
    ),
    ("only-the-other-member-answered", [init(1), probe(2)], _body(_init_result(1)), {"no-answer": 1}),
    ("an-answer-naming-no-member", [init(1), probe(2)], _body([_init_result(1), _found(9)]), {"discover-result": 1}),
    ("on-its-stream", [init(1), probe(2)], _events(_init_result(1), _found(2)), {"discover-result": 1}),
    (
        "one-of-two-on-a-stream-that-died",
        [probe(1), probe(2)],
        _events(_found(2), how="upstream-reset"),
        {"discover-result": 1, "connection-died": 1},
    ),
    ("garbage-on-its-stream", [init(1), probe(2)], _events("oops"), {"garbage": 1}),
    # JSON holding a member's id that is no answer answers nothing: the answer after it does
    (
        "its-id-without-an-answer-on-its-stream",
        [probe(1), probe(2)],
        _events({"jsonrpc": "2.0", "id": 2}, _found(2), _found(1)),
        {"discover-result": 2},
    ),
    (
        "only-its-id-on-its-stream",
        [probe(1), probe(2)],
        _events({"jsonrpc": "2.0", "id": 2}, _found(1)),
        {"discover-result": 1, "garbage": 1},
    ),
    (
        "a-flow-error",
        [init(1), probe(2)],
        [{fmt.F_TYPE: fmt.HTTP_ERROR, "flow": "b", "kind": "upstream-reset", "msg": "reset"}],
        {"connection-died": 1},
    ),
    ("gated", [init(1), probe(2)], _body("Unauthorized", 401), {"auth-required": 1}),
    ("text", [probe(1), init(2)], _body("oops"), {"garbage": 1}),
    # text on a 2xx answers the member at its index (0), not the whole batch
    ("text-to-the-second", [init(1), probe(2)], _body("oops"), {"no-answer": 1}),
    ("plain-500-to-the-second", [init(1), probe(2)], _body("Internal Server Error", 500), {"legacy-answer": 1}),
    ("result-naming-no-member", [init(1), probe(2)], _body(_found(9)), {"no-answer": 1}),
    ("result-naming-no-member-to-the-first", [probe(1), init(2)], _body(_found(9)), {"discover-result": 1}),
    # an error that is no object is no error: on a 2xx it answers the member at its index, not the batch
    ("string-error-to-the-second", [init(1), probe(2)], _body({"jsonrpc": "2.0", "error": "x"}), {"no-answer": 1}),
    ("string-error-to-the-first", [probe(1), init(2)], _body({"jsonrpc": "2.0", "error": "x"}), {"garbage": 1}),
    (
        "string-error-refusing-the-batch",
        [init(1), probe(2)],
        _body({"jsonrpc": "2.0", "error": "x"}, 400),
        {"legacy-answer": 1},
    ),
]


@pytest.mark.parametrize(
    ("members", "answer", "expected"),
    [pytest.param(members, answer, expected, id=name) for name, members, answer, expected in CASES],
)
def test_a_probe_in_an_http_batch_is_counted_as_the_analyzer_counts_it(
    tmp_path: Path, members: list[dict[str, Any]], answer: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    records = [
        at(0, _posted(*members)),
        *(at(0.1, r) for r in answer),
        # the client moves on after the timeout: nothing later changes an outcome
        at(12, req("l", {"jsonrpc": "2.0", "id": 3, **TOOLS_LIST})),
        at(12.1, resp("l", 200, ok({"tools": []}))),
    ]
    assert _http_outcomes(tmp_path, records) == expected
    assert feed(LiveStats(), records)["servers"].get(SERVER, {}).get("outcomes", {}) == expected
