"""The HTTP+SSE transport's session as each SDK names it in the endpoint it announces and the URLs the
client POSTs to: `?session_id=` (the Python SDK), `?sessionId=` (the TypeScript SDK's
`SSEServerTransport`, Go servers). Only the first was read: a TypeScript legacy server's answers on its
`GET` stream paired with no POST, and the server read `broken` (its `initialize` `no-answer`, its client
two), in the analysis and in the recorders' live counters."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import orjson
import pytest

from addon import format as fmt
from addon.metrics import LiveStats
from analyzer.pipeline import analyze
from analyzer.report import report_dict

CAPTURE: Final = next((Path(__file__).parent.parent / "captures/corpus/legacy-sse-http").glob("*.jsonl"))


@pytest.mark.parametrize("name", ["session_id", "sessionId", "sessionid"])
def test_each_sdks_session_parameter_pairs_the_stream_with_its_posts(tmp_path: Path, name: str) -> None:
    text = CAPTURE.read_text()
    assert "session_id=" in text
    path = tmp_path / CAPTURE.name
    path.write_text(text.replace("session_id=", f"{name}="))
    (server,) = report_dict(analyze([str(path)]))["servers"]
    assert (server["era"], server["init_outcomes"], server["legacy_support"]) == ("legacy", {"served": 1}, "yes")
    assert len(server["clients"]) == 1, server["clients"]
    live = LiveStats()
    live.observe_all([orjson.loads(line) for line in path.read_bytes().splitlines()[1:]])
    assert live.snapshot()["servers"][server["server"]]["era"] == "legacy"


@pytest.mark.parametrize(
    ("url", "session"),
    [("/messages/?session_id=a1", "a1"), ("/messages?sessionId=b2&x=1", "b2"), ("/m?x=1&sessionid=c3", "c3"),
     ("/m?mysession_id=d4", None), ("/m?session_ids=e5", None)],
)  # fmt: skip
def test_the_session_of_a_url(url: str, session: str | None) -> None:
    assert fmt.named_session([], url) == session
