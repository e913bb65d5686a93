"""`captures/FORMAT.md` documents every record type, lifecycle event and field named in `addon/format.py`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from addon import format as fmt

DOC = (Path(__file__).resolve().parent.parent / "captures" / "FORMAT.md").read_text()


def constants(prefix: str) -> dict[str, str]:
    return {name: value for name, value in vars(fmt).items() if name.startswith(prefix) and isinstance(value, str)}


def section(heading: str) -> str:
    """The text of one `##`/`###` section, up to the next heading of the same or a higher level."""
    m = re.search(rf"^(#+) {re.escape(heading)}\s*$", DOC, re.MULTILINE)
    assert m, f"FORMAT.md has no section {heading!r}"
    level = len(m.group(1))
    rest = DOC[m.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def test_constants_found() -> None:
    # Guards the introspection below: if it found nothing, every other test would pass vacuously.
    assert len(constants("F_")) >= 10
    assert fmt.FRAME in fmt.RECORD_TYPES and fmt.EV_SPAWN in fmt.LIFECYCLE_EVENTS


@pytest.mark.parametrize("rtype", sorted(fmt.RECORD_TYPES))
def test_every_record_type_has_its_own_section(rtype: str) -> None:
    assert re.search(rf"^###.*`{re.escape(rtype)}`", DOC, re.MULTILINE), f"no `### `{rtype}`` section"


@pytest.mark.parametrize("event", sorted(fmt.LIFECYCLE_EVENTS))
def test_every_lifecycle_event_is_in_the_lifecycle_table(event: str) -> None:
    assert re.search(rf"^\| `{re.escape(event)}` \|", section("`lifecycle` (stdio)"), re.MULTILINE)


def test_lifecycle_table_names_no_unknown_event() -> None:
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", section("`lifecycle` (stdio)"), re.MULTILINE))
    documented.discard("event")  # the table's own header row
    assert documented == set(fmt.LIFECYCLE_EVENTS)


@pytest.mark.parametrize(("name", "field"), sorted(constants("F_").items()))
def test_every_field_constant_is_documented(name: str, field: str) -> None:
    assert f"`{field}`" in DOC, f"{name} = {field!r} is not documented in FORMAT.md"


@pytest.mark.parametrize("value", [fmt.STDIO, fmt.HTTP, fmt.C2S, fmt.S2C, fmt.FORMAT_ID])
def test_transport_direction_and_format_values_are_documented(value: str) -> None:
    assert f"`{value}`" in DOC


def test_capture_suffix_is_documented() -> None:
    assert fmt.CAPTURE_SUFFIX in section("Files")


def test_exit_statuses_are_documented() -> None:
    text = section("`lifecycle` (stdio)")
    assert "128+signal" in text and "127" in text and "126" in text
