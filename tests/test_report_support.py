"""What `modern` and `legacy` support say for an `inconsistent` server, in every format.

A half-rolled fleet answers both ways at the same time: its probes get DiscoverResults from the new
nodes and legacy answers (or sessionless refusals) from the old ones. Its modern support is then
`mixed`, never the `no` of whichever node answered last next to "6 discover" probes; a dimension
that got one answer only keeps it. Tested on the recorded rollouts of the bundled corpus.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from analyzer.eras import MIXED
from analyzer.pipeline import analyze
from analyzer.report import REPORT_SCHEMA, render

CORPUS = Path(__file__).resolve().parent.parent / "captures" / "corpus"
ROLLOUTS = {
    # scenario: (server, modern, legacy)
    "rollout-split-http": ("rollout-split-http-fleet", MIXED, "yes"),
    "rollout-per-request-http": ("rollout-per-request-http-fleet", MIXED, "unknown"),
}


@pytest.mark.parametrize("scenario", sorted(ROLLOUTS))
def test_inconsistent_support_is_mixed_in_every_format(scenario: str) -> None:
    server, modern, legacy = ROLLOUTS[scenario]
    analysis = analyze([str(CORPUS / scenario)])
    [verdict] = analysis.servers
    assert (verdict.server, verdict.era) == (server, "inconsistent")
    assert (verdict.modern_support, verdict.legacy_support) == (modern, legacy)

    doc = orjson.loads(render(analysis, "json"))
    assert doc["schema"] == REPORT_SCHEMA == "erascope-report/2"
    [s] = doc["servers"]
    assert (s["modern_support"], s["legacy_support"]) == (modern, legacy)

    md = render(analysis, "markdown")
    assert f"| `{server}` | http | **inconsistent** | {modern} | {legacy} |" in md

    for width in (80, 100, 120):
        text = render(analysis, "text", width=width)
        servers = text.split("\nServers\n", 1)[1].split("\n\n", 1)[0]
        assert re.search(rf"\binconsistent +{modern} +{legacy}\b", servers), servers


def test_consistent_servers_keep_plain_support_values() -> None:
    analysis = analyze([str(CORPUS / "upgrade-stdio")])
    [verdict] = analysis.servers
    assert (verdict.era, verdict.modern_support) == ("modern", "yes")
