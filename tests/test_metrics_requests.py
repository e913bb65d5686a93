"""Which client messages the live counters take for a probe or an `initialize` (addon/metrics.py).

The counters must stay exactly what they were however cheaply a message is looked at: these cases
pin them for messages small and huge (a client line of a megabyte is read on the writer thread for
every message), and a property test holds the recognition to its specification on generated
messages: a message is a probe or an `initialize` when it decodes (orjson, as the analyzer reads it) to
an object whose `method` is one of them and whose `id` is a string or a number, however the method is
written: its slash escaped (`"server\\/discover"` as PHP's `json_encode` writes it, or `\\u002f`) or any
of its letters (`"server/discove\\u0072"`: a client that hides its probes from the counters this way is
still read by `analyze`).
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon import format as fmt
from addon import metrics as m
from addon.metrics import LiveStats
from tests.test_metrics import _in_pieces

D, INIT = "server/discover", "initialize"
BIG = 1 << 20

# (name, raw template, what it is taken for: "probe", "init" or None). `PAD` becomes the padding text:
# empty, or a megabyte, so that each case is seen both ways.
CASES: list[tuple[str, str, str | None]] = [
    ("probe", '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"pad":"PAD"}}', "probe"),
    (
        "probe, method after the params",
        '{"jsonrpc":"2.0","params":{"pad":["PAD",{"a":"}]"}]},"id":1,"method":"server/discover"}',
        "probe",
    ),
    ("initialize", '{"jsonrpc":"2.0","id":"i-1","method":"initialize","params":{"clientInfo":{"name":"PAD"}}}', "init"),
    (
        "spaced, leading whitespace",
        ' \t\r\n{ "jsonrpc" : "2.0" , "id" : 7 , "method" : "initialize" , "p" : "PAD" } ',
        "init",
    ),
    (
        "tool call naming both",
        '{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        '"params":{"name":"initialize","arguments":{"t":"server/discover PAD"}}}',
        None,
    ),
    (
        "tool call, nested method",
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"method":"server/discover","id":1,"p":"PAD"}}',
        None,
    ),
    ("response naming both", '{"jsonrpc":"2.0","id":1,"result":{"text":"initialize server/discover PAD"}}', None),
    ("notification", '{"jsonrpc":"2.0","method":"server/discover","params":{"p":"PAD"}}', None),
    ("id null", '{"jsonrpc":"2.0","id":null,"method":"server/discover","params":{"p":"PAD"}}', None),
    ("id true", '{"jsonrpc":"2.0","id":true,"method":"server/discover","params":{"p":"PAD"}}', None),
    ("id object", '{"jsonrpc":"2.0","id":{"a":1},"method":"server/discover","params":{"p":"PAD"}}', None),
    ("id float", '{"jsonrpc":"2.0","id":1.5,"method":"server/discover","params":{"p":"PAD"}}', "probe"),
    ("batch", '[{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"p":"PAD"}}]', "probe"),
    ("truncated", '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"p":"PAD"', None),
    ("trailing garbage", '{"jsonrpc":"2.0","id":1,"method":"server/discover","p":"PAD"} x', None),
    ("trailing comma", '{"jsonrpc":"2.0","id":1,"method":"server/discover","p":"PAD",}', None),
    ("text", "server/discover initialize PAD", None),
    ("BOM", '\ufeff{"jsonrpc":"2.0","id":1,"method":"server/discover","p":"PAD"}', None),
    ("method escaped only", '{"jsonrpc":"2.0","id":1,"method":"server\\/discover","params":{"p":"PAD"}}', "probe"),
    (
        "method's letters escaped",
        '{"jsonrpc":"2.0","id":1,"method":"server/disc\\u006fver","params":{"p":"PAD"}}',
        "probe",
    ),
    ("method's last letter escaped", '{"jsonrpc":"2.0","id":1,"method":"server/discove\\u0072","p":"PAD"}', "probe"),
    ("initialize's letters escaped", '{"jsonrpc":"2.0","id":1,"method":"initializ\\u0065","p":"PAD"}', "init"),
    (
        "every letter escaped",
        '{"jsonrpc":"2.0","id":1,"method":"\\u0069\\u006E\\u0069\\u0074ialize","p":"PAD"}',
        "init",
    ),
    (
        "method escaped, named elsewhere",
        '{"jsonrpc":"2.0","id":1,"method":"server\\/discover","params":{"p":"server/discover PAD"}}',
        "probe",
    ),
    ("key escaped", '{"jsonrpc":"2.0","id":1,"\\u006dethod":"initialize","params":{"p":"PAD"}}', "init"),
    (
        "duplicate method, the last wins",
        '{"jsonrpc":"2.0","id":1,"method":"initialize","p":"PAD","method":"tools/call"}',
        None,
    ),
    (
        "duplicate method, a probe last",
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","p":"PAD","method":"server/discover"}',
        "probe",
    ),
    (
        "escaped key duplicate last",
        '{"jsonrpc":"2.0","id":1,"method":"tools/list","p":"PAD","\\u006Dethod":"server/discover"}',
        "probe",
    ),
    (
        "quotes and backslashes before",
        '{"a":"x\\\\\\"y\\\\","b":["\\"]",{"c":"\\\\"}],"id":1,"method":"server/discover","p":"PAD","jsonrpc":"2.0"}',
        "probe",
    ),
    ("string ends in a backslash pair", '{"a":"PAD\\\\","id":2,"method":"initialize","jsonrpc":"2.0"}', "init"),
    (
        "numbers and literals",
        '{"n":[1,-2.5e3,true,false,null,{"x":[[]]}],"id":3,"method":"initialize","p":"PAD","jsonrpc":"2.0"}',
        "init",
    ),
    ("non-ASCII", '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"t":"текст 😀 PAD server/discover"}}', None),
    ("long member name", '{"jsonrpc":"2.0","id":1,"PAD":[1],"method":"server/discover"}', "probe"),
    ("long method value", '{"jsonrpc":"2.0","id":1,"method":"initialize PAD"}', None),
    ("non-ASCII probe", '{"t":"текст 😀 PAD","jsonrpc":"2.0","id":1,"method":"server/discover"}', "probe"),
]


def pad(template: str, size: int) -> str:
    return template.replace("PAD", "x" * size)


def taken_for(raw: str | fmt.PieceText, *, http: bool) -> str | None:
    """What the counters took `raw` for: answered with -32022, a probe counts an outcome and an
    `initialize` sets the era alone; anything else leaves the server unseen."""
    try:
        msg = orjson.loads(raw.text() if isinstance(raw, fmt.PieceText) else raw)
        msg = msg[0] if isinstance(msg, list) and msg else msg  # a batch: its member's answer
        ident = msg.get("id") if isinstance(msg, dict) else None
    except orjson.JSONDecodeError:
        ident = None
    answer = orjson.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": -32022, "message": "x"}}).decode()
    stats = LiveStats()
    if http:
        records: list[dict[str, Any]] = [
            {fmt.F_TYPE: fmt.HTTP_REQUEST, "flow": "f", fmt.F_SERVER: "s", fmt.F_RAW: raw},
            {fmt.F_TYPE: fmt.HTTP_RESPONSE, "flow": "f", fmt.F_SERVER: "s", "status": 400, fmt.F_RAW: answer},
        ]
    else:
        records = [
            {fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c", fmt.F_DIR: fmt.C2S, fmt.F_RAW: raw, fmt.F_SERVER: "s"},
            {fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c", fmt.F_DIR: fmt.S2C, fmt.F_RAW: answer, fmt.F_SERVER: "s"},
        ]
    for record in records:
        stats.observe(record)
    servers = stats.snapshot()["servers"]
    if not servers:
        return None
    assert servers["s"]["era"] == "modern-other-version"
    return "probe" if servers["s"]["outcomes"] == {"unsupported-version": 1} else "init"


@pytest.mark.parametrize("http", [False, True], ids=["stdio", "http"])
@pytest.mark.parametrize("size", [0, 100, BIG], ids=["bare", "small", "1MB"])
@pytest.mark.parametrize(("name", "template", "expected"), CASES, ids=[c[0] for c in CASES])
def test_what_a_client_message_is_taken_for(
    name: str, template: str, expected: str | None, size: int, http: bool
) -> None:
    raw = pad(template, size)
    if expected is not None:  # the table itself is checked against orjson
        msg = orjson.loads(raw)
        assert (msg[0] if isinstance(msg, list) else msg)["method"] == (D if expected == "probe" else INIT)
    assert taken_for(raw, http=http) == expected


@pytest.mark.parametrize(("name", "template", "expected"), CASES, ids=[c[0] for c in CASES])
def test_what_a_long_line_in_pieces_is_taken_for(name: str, template: str, expected: str | None) -> None:
    """The tee hands a long line to the writer in pieces (`fmt.PieceText`), searched for the names
    before it is ever made one `str`: the same answers as the line's text."""
    pieced = _in_pieces({fmt.F_RAW: pad(template, BIG)}, 65_536)[fmt.F_RAW]
    assert taken_for(pieced, http=False) == expected


def test_binary_client_lines_are_not_requests() -> None:
    stats = LiveStats()
    stats.observe(
        {fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c", fmt.F_DIR: fmt.C2S, fmt.F_RAW_B64: "AAA=", fmt.F_SERVER: "s"}
    )
    assert stats.snapshot()["servers"] == {} and not stats._pending


def test_a_huge_request_that_only_mentions_the_names_is_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    # a megabyte of tool arguments that mention `initialize` says so in its first bytes: its method
    # is tools/call, and nothing after can change that but another top-level `method`
    decoded: list[int] = []
    real = m._json

    def counting(raw: object) -> Any:
        decoded.append(len(raw) if isinstance(raw, str) else -1)
        return real(raw)

    monkeypatch.setattr(m, "_json", counting)
    text = ("call initialize() first, then server/discover; " * (BIG // 48))[:BIG]
    raw = orjson.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {"t": text}}}
    ).decode()
    assert taken_for(raw, http=False) is None
    assert taken_for(raw, http=True) is None
    assert len(raw) > BIG // 2 and len(raw) not in decoded


# --- the specification, on generated messages ---------------------------------------------------------


def spec(raw: str) -> str | None:
    try:
        msg = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(msg, dict) or msg.get("method") not in (D, INIT) or "id" not in msg:
        return None
    ident = msg["id"]
    if isinstance(ident, bool) or not isinstance(ident, str | int | float):
        return None
    return "probe" if msg["method"] == D else "init"


def _escaped(text: str, rng: random.Random) -> str:
    out = []
    for ch in text:
        r = rng.random()
        if ch in '"\\' or ord(ch) < 0x20:
            out.append(orjson.dumps(ch).decode()[1:-1])
        elif r < 0.1:
            out.append(f"\\u{ord(ch):04{'x' if rng.random() < 0.5 else 'X'}}" if ord(ch) < 0x10000 else ch)
        elif r < 0.15 and ch == "/":
            out.append("\\/")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _ws(rng: random.Random) -> str:
    return "".join(rng.choice(" \t\r\n") for _ in range(rng.choice([0, 0, 0, 1, 2])))


def write_json(value: Any, rng: random.Random) -> str:
    """JSON text of `value` with random spacing and escapes; a list of pairs is an object (duplicate
    names allowed)."""
    if isinstance(value, tuple) and value and value[0] == "obj":
        members = [
            _ws(rng) + _escaped(k, rng) + _ws(rng) + ":" + _ws(rng) + write_json(v, rng) + _ws(rng) for k, v in value[1]
        ]
        return "{" + (",".join(members) or _ws(rng)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_ws(rng) + write_json(v, rng) + _ws(rng) for v in value) + "]"
    if isinstance(value, str):
        return _escaped(value, rng)
    return orjson.dumps(value).decode()


WORDS = st.sampled_from(
    ["method", "id", "params", "jsonrpc", D, INIT, "tools/call", "x", "a\\b", 'q"', "}", "]", "", "é😀"]
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False), WORDS
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(st.tuples(WORDS, inner), max_size=4).map(lambda pairs: ("obj", pairs)),
    ),
    max_leaves=12,
)
MESSAGES = st.lists(
    st.tuples(st.sampled_from(["method", "id", "params", "jsonrpc", "x"]), VALUES), min_size=0, max_size=6
).map(lambda pairs: ("obj", pairs))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    message=st.one_of(MESSAGES, VALUES),
    seed=st.integers(0, 2**32),
    cut=st.one_of(st.none(), st.integers(0, 400)),
    big=st.booleans(),
)
def test_recognition_follows_the_specification(message: Any, seed: int, cut: int | None, big: bool) -> None:
    rng = random.Random(seed)
    raw = write_json(message, rng)
    if cut is not None:
        raw = raw[:cut]  # torn or malformed
    if big:  # the same message past any size at which it would be read differently
        raw = raw.replace('"x"', '"' + "x" * 70_000 + '"', 1) if '"x"' in raw else raw + " " * 70_000
    assert taken_for(raw, http=False) == spec(raw)
