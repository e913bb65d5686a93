"""The text report at 80, 100 and 120 columns: tables never break a token of the data.

Labels, server keys, dates, versions, client names and file names are read and copied whole: a
table folds them nowhere (`transpor/t`, `inconsis/tent`, `2025-11-/25`, `python-/httpx/0.2/8.1`
were the symptoms). Tables stack instead (the server's name above its row, a long column on a
labelled line of its own) and a token wider than the whole line is shortened in the middle with a
visible `…`. Checked on the bundled corpus against the same report at a width where nothing wraps:
every word of the narrow report is a word of the wide one, or carries the `…` marker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.cells import cell_len

from analyzer.pipeline import Analysis, analyze
from analyzer.report import render

CORPUS = Path(__file__).resolve().parent.parent / "captures" / "corpus"
WIDTHS = (80, 100, 120)
_EDGES = ",;:()"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    return analyze([str(CORPUS)])


def _words(text: str) -> set[str]:
    """Whitespace-separated words, without the punctuation around them and the table rules."""
    words = {w.strip(_EDGES) for w in text.split()}
    return {w for w in words if w and set(w) != {"─"}}


@pytest.mark.parametrize("width", WIDTHS)
def test_no_token_is_split(corpus: Analysis, width: int) -> None:
    text = render(corpus, "text", width=width)
    whole = _words(render(corpus, "text", width=2000))
    broken = sorted(w for w in _words(text) - whole if "…" not in w)
    assert not broken, f"split at {width} columns: {broken[:20]}"
    shortened = [w for w in _words(text) - whole if "…" in w]
    assert all(cell_len(w) >= width - 10 for w in shortened), shortened  # only what cannot fit
    assert max(map(cell_len, text.splitlines())) <= width


@pytest.mark.parametrize("width", WIDTHS)
def test_every_server_name_and_era_appears_whole(corpus: Analysis, width: int) -> None:
    text = render(corpus, "text", width=width)
    servers = text.split("\nServers\n", 1)[1].split("\n\n", 1)[0]
    for v in corpus.servers:
        assert re.search(rf"(^|\s){re.escape(v.server)}(\s|$)", servers, re.M), (width, v.server)
        # a client identity shows a part a line (`analyzer.identity`), each part whole
        parts = [part for c in v.clients for part in c.split(" · ")]
        for token in (v.era, *v.versions, *parts):
            assert re.search(rf"(^|\s){re.escape(token)}(\s|,|$)", servers, re.M), (width, token)


def test_a_wide_terminal_keeps_each_server_on_few_lines(corpus: Analysis) -> None:
    """At 120 columns no column wraps a value it has room for: a server takes one line per value
    of its longest list (versions, probe outcomes, clients), plus its name when names are stacked."""
    text = render(corpus, "text", width=120)
    servers = text.split("\nServers\n", 1)[1].split("\n\n", 1)[0].splitlines()
    body = [line for line in servers if line.strip() and not set(line.strip()) <= {"─"}]
    stacked = any(line == v.server for line in body for v in corpus.servers)
    expected = sum(
        max(len(v.versions), len(v.probe_outcomes), sum(len(c.split(" · ")) for c in v.clients), 1)
        + (1 if stacked else 0)
        for v in corpus.servers
    )
    header_lines = len(body) - expected
    assert header_lines == 1, "\n".join(servers)


def test_a_name_wider_than_the_line_is_shortened_visibly(corpus: Analysis) -> None:
    from dataclasses import replace

    long = "fleet-" + "x" * 150 + "-node-7"
    servers = [replace(corpus.servers[0], server=long, clients=["c" * 120])]
    text = render(replace(corpus, servers=servers, findings=[], clients=None), "text", width=80)
    assert max(map(cell_len, text.splitlines())) <= 80
    shortened = [w for w in text.split() if w.startswith("fleet-x") and "…" in w]
    assert shortened and all(w.endswith("-node-7") for w in shortened)
    assert long not in text


def test_a_clients_line_shows_each_client_as_one_identity(corpus: Analysis) -> None:
    # At 80 columns the clients move to a labelled line; each part of one identity was joined like
    # another client ("mcp 0.1.0, · python-httpx2/2.16.2, · from 127.0.0.1").
    text = render(corpus, "text", width=80)
    servers = " ".join(text.split("\nServers\n", 1)[1].split("\n\n", 1)[0].split())
    assert "clients: " in servers
    for v in corpus.servers:
        if v.clients:
            assert f"clients: {', '.join(v.clients)}" in servers, (v.server, v.clients)
    assert ", ·" not in servers


@pytest.mark.parametrize("width", WIDTHS)
def test_a_server_key_with_spaces_is_never_broken_over_lines(corpus: Analysis, width: int) -> None:
    # A stdio key is the command by default ("python3 srv.py"): the server column broke it at its
    # spaces ("python3" on one line, "srv.py" on the next) instead of stacking the name above its row.
    from dataclasses import replace

    key = "python3 srv.py"
    servers = [replace(v, server=key) for v in corpus.servers if v.server == "upgrade-stdio-server"]
    text = render(replace(corpus, servers=servers, findings=[], clients=None), "text", width=width)
    sections = [text.split("\nServers\n", 1)[1].split("\n\n", 1)[0], text.split("\nWhy each verdict", 1)[1]]
    for section in sections:
        assert any(line.strip().startswith(key) for line in section.splitlines()), section
