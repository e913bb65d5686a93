"""The markdown report under GitHub's renderer links nothing a capture says.

Postmortems are pasted into issues and pull requests, where GitHub-flavoured markdown turns bare
`https://…`, `www.…` and e-mail addresses in text into links (its autolink extension), and `@name`
into a mention that notifies that account. A server's versions, error messages and evidence notes
are the sender's words: rendered by cmark-gfm (`cmarkgfm`, the library GitHub's renderer is built
on), none of them may become a link, and every `@` must sit in code, where mentions are not made.
"""

from __future__ import annotations

import re
from html import unescape

import cmarkgfm
import pytest

from analyzer.pipeline import analyze
from analyzer.report import render
from tests.test_messages import ENVELOPE, Cap, err, init, init_result, probe

LURE = (
    "see https://evil.example/login or www.evil.example, mail admin@evil.example, xmpp:a@evil.example/x,"
    " ping @octocat"
)


@pytest.fixture(scope="module")
def markdown(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("links")
    cap = Cap(out, server="srv")
    cap.s2c("banner " + LURE)  # stdout pollution: the line is quoted in the evidence
    cap.c2s(probe(1))
    cap.s2c(err(1, -32601, LURE))
    cap.c2s(init(2))
    cap.s2c(init_result(2, version=LURE))  # the versions cell
    cap.c2s({"jsonrpc": "2.0", "id": 3, "method": "meth " + LURE, "params": {"_meta": dict(ENVELOPE)}})
    cap.s2c(err(3, -32600, "Session not found " + LURE))
    cap.close()
    return render(analyze([str(out)]), "markdown")


def test_the_lure_reaches_the_report(markdown: str) -> None:
    assert markdown.count("evil") >= 8, markdown


def test_github_links_nothing_the_capture_says(markdown: str) -> None:
    html = cmarkgfm.github_flavored_markdown_to_html(markdown)
    assert re.findall(r"<a\b[^>]*>", html) == []
    # and what it says reads exactly as sent
    assert LURE in unescape(re.sub(r"<[^>]+>", "", html))


def test_every_at_sign_is_in_code(markdown: str) -> None:
    html = cmarkgfm.github_flavored_markdown_to_html(markdown)
    outside = re.sub(r"<code>.*?</code>", "", html, flags=re.S)
    assert "@" not in outside, [line for line in outside.splitlines() if "@" in line]
