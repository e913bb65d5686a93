"""The messages frame: kinds, ids, pairing, versions and HTTP specifics.

Captures are written with the real `CaptureWriter`; `Cap` (also used by the other analyzer tests)
builds small inline exchanges with explicit, deterministic timestamps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import polars as pl

from addon.writer import CaptureWriter
from analyzer.load import LoadOptions, combine, extract_file
from analyzer.pipeline import Analysis, AnalyzeOptions, analyze

MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test-client", "version": "1.0"},
}


def probe(id_: Any = 1, *, envelope: bool = True) -> dict[str, Any]:
    params: dict[str, Any] = {"_meta": dict(ENVELOPE)} if envelope else {}
    return {"jsonrpc": "2.0", "id": id_, "method": "server/discover", "params": params}


def init(id_: Any = 2, version: str = "2025-11-25") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "test-client", "version": "1"},
        },
    }


def err(id_: Any, code: int, message: str = "error", data: Any = None) -> dict[str, Any]:
    e: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        e["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": e}


def discover_result(id_: Any = 1, versions: tuple[str, ...] = (MODERN,), ttl: int = 0) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "result": {
            "supportedVersions": list(versions),
            "capabilities": {},
            "resultType": "complete",
            "ttlMs": ttl,
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "srv", "version": "1"}},
        },
    }


def init_result(id_: Any = 2, version: str = "2025-11-25") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "result": {"protocolVersion": version, "capabilities": {}, "serverInfo": {"name": "srv", "version": "1"}},
    }


def _text(obj: Any) -> str:
    return obj if isinstance(obj, str) else orjson.dumps(obj).decode()


class Cap:
    """One capture file written through the real `CaptureWriter`, with explicit timestamps."""

    def __init__(self, out_dir: Path, *, transport: str = "stdio", server: str = "srv", conn: str = "c1") -> None:
        self.writer = CaptureWriter(out_dir, transport=transport, server=server)
        self.conn = conn
        self.t = 1_800_000_000.0

    def at(self, dt: float) -> float:
        self.t += dt
        return self.t

    def frame(self, direction: str, obj: Any, dt: float = 0.1, conn: str | None = None) -> None:
        raw = _text(obj)
        self.writer.write(
            {"type": "frame", "conn": conn or self.conn, "dir": direction, "raw": raw, "len": len(raw), "nl": True,
             "ts": self.at(dt)}
        )

    def c2s(self, obj: Any, dt: float = 0.1, conn: str | None = None) -> None:
        self.frame("c2s", obj, dt, conn)

    def s2c(self, obj: Any, dt: float = 0.1, conn: str | None = None) -> None:
        self.frame("s2c", obj, dt, conn)

    def life(self, event: str, dt: float = 0.1, conn: str | None = None, **fields: Any) -> None:
        self.writer.write({"type": "lifecycle", "conn": conn or self.conn, "event": event, "ts": self.at(dt), **fields})

    def http_request(self, flow: str, body: Any, *, headers: list[list[str]] | None = None, dt: float = 0.1) -> None:
        raw = "" if body is None else _text(body)
        self.writer.write(
            {"type": "http.request", "conn": self.conn, "flow": flow, "dir": "c2s", "method": "POST",
             "url": "http://127.0.0.1/mcp", "headers": headers or [], "raw": raw, "len": len(raw), "ts": self.at(dt)}
        )

    def http_response(
        self, flow: str, status: int, body: Any = None, *, streamed: bool = False, peer: str = "10.0.0.1:8000",
        headers: list[list[str]] | None = None, dt: float = 0.1,
    ) -> None:
        rec: dict[str, Any] = {"type": "http.response", "conn": self.conn, "flow": flow, "dir": "s2c", "status": status,
                               "headers": headers or [], "streamed": streamed, "peer": peer, "ts": self.at(dt)}
        if not streamed:
            raw = "" if body is None else _text(body)
            rec.update(raw=raw, len=len(raw))
        self.writer.write(rec)

    def sse(self, flow: str, index: int, body: Any, dt: float = 0.1) -> None:
        raw = _text(body)
        self.writer.write({"type": "sse.event", "conn": self.conn, "flow": flow, "dir": "s2c", "index": index,
                           "sse_event": "message", "raw": raw, "len": len(raw), "ts": self.at(dt)})

    def record(self, rec: dict[str, Any], dt: float = 0.1) -> None:
        self.writer.write({"conn": self.conn, "ts": self.at(dt), **rec})

    def close(self) -> Path:
        self.writer.close()
        return self.writer.paths[0]


def modern_headers(method: str = "server/discover") -> list[list[str]]:
    return [["Content-Type", "application/json"], ["MCP-Protocol-Version", MODERN], ["Mcp-Method", method],
            ["User-Agent", "ua-client/2"]]


def run(path: Path, **opts: Any) -> Analysis:
    return analyze([str(path)], AnalyzeOptions(**opts))


def messages_of(path: Path) -> pl.DataFrame:
    """Every message row of the capture (not condensed: these tests look at each row)."""
    return combine([extract_file(str(path), LoadOptions(condense=False))]).messages


# --- tests ---------------------------------------------------------------------------------------
def test_kinds_and_banner(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.life("spawn", pid=4)
    cap.c2s(probe(1))
    cap.s2c("Starting server v1.2 ...")
    cap.s2c(discover_result(1))
    cap.c2s({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}})
    cap.s2c({"jsonrpc": "2.0", "id": 9})  # neither result nor error
    cap.life("exit", code=0)
    m = messages_of(cap.close())
    assert m.get_column("kind").to_list() == [
        "lifecycle", "request", "invalid", "response", "notification", "invalid", "lifecycle"
    ]
    assert m.get_column("line").to_list() == [2, 3, 4, 5, 6, 7, 8]
    assert m.filter(pl.col("event") == "exit").get_column("exit_code").to_list() == [0]


def test_ids_keep_their_json_type(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.c2s(probe("1"))
    cap.c2s(probe("server-discover-probe-1"))
    cap.c2s(probe('a"b'))
    cap.s2c(discover_result("1"))
    cap.s2c(discover_result(1))
    m = messages_of(cap.close())
    assert m.get_column("id").to_list() == ["1", '"1"', '"server-discover-probe-1"', '"a\\"b"', '"1"', "1"]
    # each response is paired with the request of the same JSON type of id
    resp = m.filter(pl.col("kind") == "response")
    assert resp.get_column("req_line").to_list() == [3, 2]


def test_pairing_uses_latest_request_with_that_id_on_the_same_connection(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1), conn="a")
    cap.c2s(probe(1), conn="b")
    cap.s2c(err(1, -32602, "Invalid request parameters", ""), conn="b")
    cap.c2s(init(1), conn="a")  # id reused after the probe on connection a
    cap.s2c(init_result(1), conn="a")
    m = messages_of(cap.close())
    answers = m.filter(pl.col("kind").is_in(["response", "error"]))
    assert answers.select("conn", "method", "req_line").rows() == [("b", "server/discover", 3), ("a", "initialize", 5)]
    assert answers.get_column("req_ts").null_count() == 0


def test_versions_envelope_and_client_info(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(err(1, -32022, "Unsupported protocol version", {"supported": [MODERN], "requested": "2099-01-01"}))
    cap.c2s(probe(2, envelope=False))
    cap.s2c(discover_result(2, (MODERN, "2025-11-25"), ttl=60000))
    cap.c2s(init(3))
    cap.s2c(init_result(3))
    m = messages_of(cap.close())
    rows = {r["line"]: r for r in m.iter_rows(named=True)}
    assert rows[2]["meta_version"] == MODERN and rows[2]["has_envelope"] is True
    assert rows[2]["client_name"] == "test-client" and rows[2]["client_version"] == "1.0"
    assert rows[3]["error_code"] == -32022
    assert rows[3]["error_supported"] == [MODERN] and rows[3]["error_requested"] == "2099-01-01"
    assert rows[4]["has_envelope"] is False and rows[4]["meta_version"] is None
    assert rows[5]["supported_versions"] == [MODERN, "2025-11-25"] and rows[5]["ttl_ms"] == 60000
    assert rows[5]["node_hint"] == "srv"
    assert rows[6]["init_version"] == "2025-11-25" and rows[6]["client_name"] == "test-client"
    assert rows[7]["init_version"] == "2025-11-25"


def test_error_data_string_or_object_never_fatal(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(err(1, -32602, "Invalid request parameters", ""))
    cap.c2s(probe(2))
    cap.s2c(err(2, -32022, "Unsupported", {"supported": [MODERN, 7]}))
    cap.c2s(probe(3))
    cap.s2c({"jsonrpc": "2.0", "id": 3, "result": {"supportedVersions": "oops", "ttlMs": "soon"}})
    m = messages_of(cap.close()).filter(pl.col("dir") == "s2c")
    assert m.get_column("error_supported").to_list() == [None, [MODERN], None]
    assert m.get_column("ttl_ms").to_list() == [None, None, None]
    assert m.get_column("kind").to_list() == ["error", "error", "response"]


def test_versions_are_the_strings_of_the_array_itself(tmp_path: Path) -> None:
    # `[{"version": "2026-07-28"}]` read as the versions "version" and "2026-07-28": a DiscoverResult no
    # SDK client validates (`supportedVersions: list[str]`) proved the server modern. Only the array's
    # own strings are versions, read as a parser reads them (`"2026\u002d07-28"` is `2026-07-28`), and
    # an array holding anything else is no DiscoverResult's (`tests/test_discover_shape.py`); the
    # error's `data.supported` is no DiscoverResult and names its strings.
    cap = Cap(tmp_path)
    arrays = [f'[{{"version":"{MODERN}"}}]', f'[["{MODERN}"],"2025-11-25"]', r'["2026\u002d07-28",7,null]',
              f'["a\\"b]","{MODERN}"]', r'["2026\u002d07-28"]']  # fmt: skip
    for n, array in enumerate(arrays, 1):
        cap.c2s(probe(n))
        cap.s2c(f'{{"jsonrpc":"2.0","id":{n},"result":{{"supportedVersions":{array},"capabilities":{{}}}}}}')
    cap.c2s(probe(9))
    cap.s2c(err(9, -32022, "Unsupported", {"supported": [{"v": MODERN}, "2025-06-18"]}))
    m = messages_of(cap.close()).filter(pl.col("dir") == "s2c")
    assert m.get_column("supported_versions").to_list() == [None, None, None, ['a"b]', MODERN], [MODERN], None]
    assert m.get_column("error_supported").to_list()[-1] == ["2025-06-18"]
    [verdict] = run(tmp_path).servers
    assert verdict.versions == sorted(["2025-06-18", MODERN, 'a"b]'])


def test_versions_inside_member_objects_are_no_versions_in_a_capture_without_escapes(tmp_path: Path) -> None:
    # a piece holding no escape is read without the rare reading, and read again with it for this array
    cap = Cap(tmp_path)
    cap.c2s(probe(1))
    cap.s2c(f'{{"jsonrpc":"2.0","id":1,"result":{{"supportedVersions":[{{"version":"{MODERN}"}}],"capabilities":{{}}}}}}')
    path = cap.close()
    assert b"\\u" not in path.read_bytes()
    m = messages_of(path).filter(pl.col("dir") == "s2c")
    assert m.get_column("supported_versions").to_list() == [None]
    [verdict] = run(tmp_path).servers
    assert (verdict.era, verdict.versions) == ("unknown", [])


def test_http_json_sse_and_plain_text_errors(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http", server="http://127.0.0.1/mcp")
    # 1: JSON response
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, discover_result(1), headers=[["Server", "node-a"]])
    # 2: legacy 400 with JSON-RPC body and a different id
    cap.http_request("f2", probe(2), headers=modern_headers())
    cap.http_response("f2", 400, err("server-error", -32600, "Bad Request: Missing session ID"))
    # 3: middleware 404 with a plain-text body
    cap.http_request("f3", probe(3), headers=modern_headers())
    cap.http_response("f3", 404, "Not Found")
    # 4: streamed answer: a progress notification, then the result
    cap.http_request("f4", {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"_meta": ENVELOPE}},
                     headers=modern_headers("tools/call"))
    cap.http_response("f4", 200, streamed=True, peer="10.0.0.2:8000")
    cap.sse("f4", 0, {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})
    cap.sse("f4", 1, {"jsonrpc": "2.0", "id": 4, "result": {"content": []}})
    cap.record({"type": "sse.end", "flow": "f4", "how": "clean", "events": 2})
    m = messages_of(cap.close())
    by_line = {r["line"]: r for r in m.iter_rows(named=True)}
    assert by_line[2]["header_version"] == MODERN and by_line[2]["header_method"] == "server/discover"
    assert by_line[2]["user_agent"] == "ua-client/2"
    assert (by_line[3]["kind"], by_line[3]["method"], by_line[3]["req_line"]) == ("response", "server/discover", 2)
    assert by_line[3]["node_hint"] == "srv"
    assert (by_line[5]["kind"], by_line[5]["error_code"], by_line[5]["req_line"]) == ("error", -32600, 4)
    assert (by_line[7]["kind"], by_line[7]["error_code"], by_line[7]["http_status"]) == ("error", None, 404)
    assert by_line[7]["req_line"] == 6
    assert by_line[9]["kind"] == "lifecycle" and by_line[9]["event"] == "sse-start"
    assert by_line[10]["kind"] == "notification" and by_line[10]["http_status"] == 200
    assert (by_line[11]["kind"], by_line[11]["method"], by_line[11]["req_line"]) == ("response", "tools/call", 8)
    assert by_line[11]["peer"] == "10.0.0.2:8000"
    assert by_line[12]["event"] == "sse-end:clean"


def test_http_empty_202_and_get_are_lifecycle(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", {"jsonrpc": "2.0", "method": "notifications/initialized"})
    cap.http_response("f1", 202, None)
    cap.record({"type": "http.request", "flow": "f2", "method": "GET", "headers": [], "raw": "", "len": 0})
    cap.record({"type": "http.error", "flow": "f2", "kind": "upstream-reset", "error": "reset by peer"})
    m = messages_of(cap.close())
    assert m.select("kind", "event").rows() == [
        ("notification", "http-post"),
        ("lifecycle", "http-202"),
        ("lifecycle", "http-get"),
        ("lifecycle", "http-error:upstream-reset"),
    ]


def test_object_ids_and_methods_fall_back_to_the_robust_reading(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s({"jsonrpc": "2.0", "id": {"weird": 1}, "method": "ping"})
    cap.c2s({"jsonrpc": "2.0", "id": 2, "method": ["not", "a", "string"]})
    cap.c2s(probe(3))
    cap.s2c(discover_result(3))
    m = messages_of(cap.close())
    assert m.get_column("id").to_list()[2:] == ["3", "3"]
    assert m.get_column("method").to_list()[2:] == ["server/discover", "server/discover"]
    assert m.get_column("kind").to_list()[2:] == ["request", "response"]


def test_sse_error_without_id_answers_its_flow(tmp_path: Path) -> None:
    cap = Cap(tmp_path, transport="http")
    cap.http_request("f1", probe(1), headers=modern_headers())
    cap.http_response("f1", 200, streamed=True)
    cap.sse("f1", 0, err(None, -32000, "Server not initialized"))
    m = messages_of(cap.close())
    row = m.filter(pl.col("kind") == "error").row(0, named=True)
    assert (row["method"], row["req_line"], row["http_status"]) == ("server/discover", 2, 200)


def test_a_result_mentioning_error_is_still_a_response(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    cap.c2s({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}})
    cap.s2c({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "error"}], "isError": True}})
    cap.c2s({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {}})
    cap.s2c({"jsonrpc": "2.0", "id": 2, "error": "not an object"})
    m = messages_of(cap.close())
    # an error that is no object is no message: the SDKs refuse it (tests/test_error_type.py)
    assert m.get_column("kind").to_list() == ["request", "response", "request", "invalid"]
    assert m.get_column("error_code").to_list() == [None, None, None, None]
