"""The markdown report under GitHub's renderer links nothing a capture says.

Postmortems are pasted into issues and pull requests, where GitHub-flavoured markdown turns bare
`https://…`, `www.…` and e-mail addresses in text into links (its autolink extension), and `@name`
into a mention that notifies that account. A server's versions, error messages and evidence notes
are the sender's words: rendered by cmark-gfm (`cmarkgfm`, the library GitHub's renderer is built
on), none of them may become a link, and every `@` must sit in code, where mentions are not made.

GitHub then links references in the rendered HTML (docs.github.com, "Autolinked references and
URLs"): `#26`, `GH-26`, `owner/repo#26`, `owner#26`, and `/issues/26`, `/pull/26`, `/discussions/26`
(GitHub Desktop's copy of the rule). It matches the text of each text node outside `<a>`, `<code>`
and `<pre>`, after markdown's escapes and entities are resolved: `\\#26` and `&#35;26` are still
links, so a capture's reference must end up in code too. `GitHubReferences` is that pass as a test
sees it: a superset of GitHub's patterns (any preceding character, any case).
"""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser

import cmarkgfm
import pytest

from analyzer.pipeline import analyze
from analyzer.report import _md_text, render
from tests.test_messages import ENVELOPE, Cap, err, init, init_result, probe

LURE = (
    "see https://evil.example/login or www.evil.example, mail admin@evil.example, xmpp:a@evil.example/x,"
    " ping @octocat; fixes #12, GH-7 and gh-8, octo/repo#34 and octo#5 (https://github.com/octo/repo/issues/9,"
    " /pull/10, /discussions/11), `#13`, C#14"
)
REFERENCE = re.compile(r"(?i)(?:#|gh-|/(?:issues|pull|discussions)/)[0-9]")
"""What starts an issue, pull request or discussion reference on GitHub, wherever it stands in a text
node (GitHub's own rule wants a non-word character or an `owner/repo` before it)."""


class GitHubReferences(HTMLParser):
    """The text nodes of rendered HTML that GitHub's reference filters read: those outside `<a>`,
    `<code>` and `<pre>`, with entities resolved."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.texts: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        while self.open and self.open.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        if not {"a", "code", "pre"} & set(self.open):
            self.texts.append(data)

    def references(self) -> list[str]:
        return [text for text in self.texts if REFERENCE.search(text)]


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


def test_github_references_nothing_the_capture_says(markdown: str) -> None:
    html = cmarkgfm.github_flavored_markdown_to_html(markdown)
    assert GitHubReferences(html).references() == []
    # in code the reference reads as sent, and the text around it too (checked by the test above)
    codes = re.findall(r"<code>(.*?)</code>", html)
    assert {"#12", "GH-7", "gh-8", "#34", "#5", "/issues/9", "/pull/10", "/discussions/11", "#13", "#14"} <= set(codes)


def test_references_are_found_as_github_finds_them() -> None:
    """The test's pass finds what GitHub links (so an empty list above means something): a backslash
    or an entity before the `#` does not hide a reference, code and links do."""
    rendered = cmarkgfm.github_flavored_markdown_to_html(
        "see \\#1, &#35;2, x/y#3, GH-4, `#5`, [#6](https://example.com) and <https://example.com/a/b/pull/7>"
    )
    assert [REFERENCE.findall(t) for t in GitHubReferences(rendered).references()] == [["#1", "#2", "#3", "GH-4"]]


@pytest.mark.parametrize(
    "text",
    ["2026-07-28", "3 probes, 2 answered -32601", "v1.2.3-rc.4", "C# 12", "#entry=4", "gh-pages", "/issues/",
     "pull/7", "issues#x", "ab12#", "1#"],
)
def test_ordinary_text_is_left_as_it_is(text: str) -> None:
    assert _md_text(text) == text


@pytest.mark.parametrize(
    ("text", "markdown"),
    [
        ("#12", "`#12`"),
        ("fixes #3.", "fixes `#3`."),
        ("GH-7 gh-8", "`GH-7` `gh-8`"),
        ("octo/repo#34", "octo/repo`#34`"),
        ("##9#10", "#`#9#10`"),  # one code span: two side by side would read as one with `` inside
        ("mail a@b #2, @#3", "mail a`@`b `#2`, `@#3`"),
        ("a/issues/9/b", "a`/issues/9`/b"),
        ("/PULL/10", "`/PULL/10`"),
    ],
)
def test_a_reference_is_set_in_code(text: str, markdown: str) -> None:
    assert _md_text(text) == markdown
