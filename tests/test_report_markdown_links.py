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

Two more passes read the same text nodes: the emoji filter turns `:warning:` or `:+1:` into an
emoji, and a word of 7 to 40 hex digits (`a5c3785`, also `user@a5c3785` and `owner/repo@a5c3785`)
becomes a link to that commit when the repository the report is pasted in has one (digits alone
included). Their tests match a superset too: any `:name:` of the characters gemoji names are made
of (none of them one or two digits, so a time of day is not one), and any hex word of that length.

GitHub also draws math between dollar signs; it is not in cmark-gfm, so its tests ask of the
markdown that every `$` a capture holds is in code.
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


SHA = "a5c3785ed8d6a35868bc169f07e40e889087fd2e"
SHORTCODES = (
    f":warning: deploy :+1: :white_check_mark:, see {SHA} or a5c3785 (and 1234567, DEADBEEF0),"
    f" by jlord@a5c3785 in jlord/sheetsee.js@{SHA}; cc @someone and @org/team at 12:30:45"
)
SHORTCODE = re.compile(r"(?=(:(?![0-9]{1,2}:)[0-9A-Za-z_+-]+:))")
"""Where GitHub's emoji filter could see a shortcode (overlapping: `:foo:warning:` holds one)."""
COMMIT = re.compile(r"(?<![0-9A-Za-z])[0-9A-Fa-f]{7,40}(?![0-9A-Za-z])")
"""A word GitHub links to a commit of that SHA prefix, if the repository has one."""


@pytest.fixture(scope="module")
def shortcodes(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("shortcodes")
    cap = Cap(out, server="srv")
    p = probe(1)
    p["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = {"name": ":warning: " + SHA, "version": ":+1:"}
    cap.c2s(p)
    cap.s2c(err(1, -32601, SHORTCODES))
    i = init(2)
    i["params"]["clientInfo"] = {"name": ":warning: " + SHA, "version": ":+1:"}
    cap.c2s(i)
    cap.s2c(init_result(2, version=SHORTCODES))  # the versions cell
    cap.c2s({"jsonrpc": "2.0", "id": 3, "method": "meth " + SHORTCODES, "params": {"_meta": dict(ENVELOPE)}})
    cap.s2c(err(3, -32600, "Session not found " + SHORTCODES))  # the method, in an evidence note
    cap.close()
    return render(analyze([str(out)]), "markdown")


def test_github_makes_no_emoji_commit_link_or_mention_of_what_the_capture_says(shortcodes: str) -> None:
    html = cmarkgfm.github_flavored_markdown_to_html(shortcodes)
    texts = GitHubReferences(html).texts
    assert [m for t in texts for m in SHORTCODE.findall(t)] == []
    assert [m for t in texts for m in COMMIT.findall(t)] == []
    assert [t for t in texts if "@" in t] == []
    # in code each reads as sent, and the text around it too
    assert SHORTCODES in unescape(re.sub(r"<[^>]+>", "", html))
    codes = set(re.findall(r"<code>(.*?)</code>", html))
    assert {":warning:", ":+1:", ":white_check_mark:", SHA, "a5c3785", "1234567", "DEADBEEF0"} <= codes
    assert {"@a5c3785", "@" + SHA, "@"} <= codes


@pytest.mark.parametrize(
    "text",
    ["12:30:45", "08:00:00.100Z", "a:b", "::", "std::vector", "123456", "abcdefg", "deadbeefx", SHA + "0",
     "v1.2.3-rc.4", "2026-07-28"],
)
def test_text_github_leaves_alone_is_left_alone(text: str) -> None:
    assert _md_text(text) == text


@pytest.mark.parametrize(
    ("text", "markdown"),
    [
        (":warning:", "`:warning:`"),
        ("ok :+1: :-1:", "ok `:+1:` `:-1:`"),
        (":white_check_mark:", "`:white_check_mark:`"),  # no `\_` in code: it would be shown
        ("a:foo:warning:b", "a`:foo:warning:`b"),  # no emoji `:foo:`, so GitHub goes on to `:warning:`
        ("at 12:30:100:", "at 12:30`:100:`"),
        ("`:warning:`", "\\``:warning:`\\`"),
        (SHA, f"`{SHA}`"),
        ("commit 1234567.", "commit `1234567`."),
        ("jlord@a5c3785", "jlord`@a5c3785`"),
        (f"jlord/sheetsee.js@{SHA}", f"jlord/sheetsee.js`@{SHA}`"),
        ("a5c3785@x", "`a5c3785@`x"),
        ("#1deadbeef", "`#1deadbeef`"),  # a span ending mid-word would start a text node at the SHA
        ("cafe1234gh-5", "`cafe1234gh-5`"),
    ],
)
def test_an_emoji_or_a_commit_is_set_in_code(text: str, markdown: str) -> None:
    assert _md_text(text) == markdown


MATH = "$\\frac{a}{b}$ and $$x$$ or $`x`$ costs $5; ```math"
"""GitHub draws math between dollar signs (inline `$…$`, display `$$…$$`, and ``$`…`$``) and in a
```` ```math ```` block. cmark-gfm has no math, so the tests read where each `$` ends up: in code,
which GitHub's math never enters, or not. A lone `$` is in code too: one later in the line may pair
with it, and GitHub's own escape for a dollar beside math is a `<span>`, not a backslash."""


@pytest.fixture(scope="module")
def math(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("math")
    cap = Cap(out, server="srv")
    p = probe(1)
    p["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = {"name": "$$x^2$$", "version": "$5"}
    cap.c2s(p)
    cap.s2c(err(1, -32601, MATH))
    i = init(2)
    i["params"]["clientInfo"] = {"name": "$\\frac{a}{b}$", "version": "$`x`$"}
    cap.c2s(i)
    cap.s2c(init_result(2, version=MATH))  # the versions cell
    cap.c2s({"jsonrpc": "2.0", "id": 3, "method": "meth " + MATH, "params": {"_meta": dict(ENVELOPE)}})
    cap.s2c(err(3, -32600, "Session not found " + MATH))  # the method, in an evidence note
    cap.close()
    return render(analyze([str(out)]), "markdown")


def test_github_draws_no_math_the_capture_says(math: str) -> None:
    assert math.count("frac") >= 2 and "$5" in math, math
    html = cmarkgfm.github_flavored_markdown_to_html(math)
    assert [t for t in GitHubReferences(html).texts if "$" in t] == []
    assert "<pre" not in html  # no ```math block either
    # in code each `$` reads as sent, and the text around it too
    assert MATH in unescape(re.sub(r"<[^>]+>", "", html))
    assert {"$", "$$"} <= set(re.findall(r"<code>(.*?)</code>", html))


@pytest.mark.parametrize(
    ("text", "markdown"),
    [
        ("$\\frac{a}{b}$", "`$`\\\\frac{a}{b}`$`"),
        ("$$x$$", "`$$`x`$$`"),
        ("$`x`$", "`$`\\`x\\``$`"),
        ("costs $5", "costs `$`5"),
        ("5$", "5`$`"),
        ("$deadbeef1", "`$deadbeef1`"),  # one span with the SHA next to it
        ("a@$b", "a`@$`b"),
        ("```math", "\\`\\`\\`math"),
    ],
)
def test_a_dollar_sign_is_set_in_code(text: str, markdown: str) -> None:
    assert _md_text(text) == markdown
