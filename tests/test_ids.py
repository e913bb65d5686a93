"""JSON-RPC ids survive loading and pairing exactly: their JSON type, huge integers, any unicode.

`"1"` and `1` are different ids (a server that answers `"1"` to the request `1` did not answer it);
an integer beyond 64 bits and beyond a float's precision is still one exact id; a string id may be
any unicode. Each case pairs the right answer and leaves the wrong one unpaired (`no-answer`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_messages import Cap, discover_result, messages_of, modern_headers, probe, run

HUGE = 123456789012345678901234567890
"""Beyond Int64 and beyond a float's 53 bits: only its exact text identifies it."""


def _json(obj: Any) -> str:
    """Payload text (the standard library's encoder: orjson refuses integers beyond 64 bits)."""
    return json.dumps(obj, ensure_ascii=False)


def _outcome(tmp_path: Path, sent: Any, answered: Any, *, transport: str = "stdio") -> str:
    cap = Cap(tmp_path, transport=transport)
    if transport == "stdio":
        cap.c2s(_json(probe(sent)))
        cap.s2c(_json(discover_result(answered)))
    else:
        cap.http_request("f1", _json(probe(sent)), headers=modern_headers())
        cap.http_response("f1", 200, streamed=True, headers=[["content-type", "text/event-stream"]])
        cap.sse("f1", 0, _json(discover_result(answered)))
    (outcome,) = run(cap.close()).probes.get_column("outcome").to_list()
    return str(outcome)


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(
    ("sent", "answered", "paired"),
    [
        (1, 1, True),
        ("1", "1", True),
        (1, "1", False),
        ("1", 1, False),
        (HUGE, HUGE, True),
        (HUGE, HUGE + 1, False),
        (-(2**70), -(2**70), True),
        ("探针-🔍", "探针-🔍", True),
        ("探针-🔍", "探针-🔎", False),
        ('quote"and\\backslash', 'quote"and\\backslash', True),
    ],
)
def test_an_answer_pairs_only_with_its_exact_id(
    tmp_path: Path, transport: str, sent: Any, answered: Any, paired: bool
) -> None:
    assert _outcome(tmp_path, sent, answered, transport=transport) == ("discover-result" if paired else "no-answer")


def test_ids_keep_their_json_text(tmp_path: Path) -> None:
    cap = Cap(tmp_path)
    for n, id_ in enumerate((HUGE, "探针-🔍", "1", 1)):
        cap.c2s(_json(probe(id_)))
        cap.s2c(_json(discover_result(id_)), dt=0.1 + n)
    ids = messages_of(cap.close()).get_column("id").to_list()
    assert ids == [
        str(HUGE), str(HUGE), '"探针-🔍"', '"探针-🔍"', '"1"', '"1"', "1", "1",
    ]  # fmt: skip


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(("sent", "answered"), [("[1]", [1]), ("true", True), ('{"a":1}', {"a": 1}), ("[]", [])])
def test_an_array_object_or_boolean_id_answers_no_string_of_its_text(
    tmp_path: Path, transport: str, sent: str, answered: Any
) -> None:
    """An answer whose id is an array, an object or a boolean answers nothing (JSON-RPC allows a string, a
    number or null): it was read as the string of its text and settled the probe of that string id."""
    assert _outcome(tmp_path, sent, answered, transport=transport) == "garbage"
