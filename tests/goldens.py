"""Golden reports for the bundled corpus: the stable part of the analyzer's json report per scenario.

Regenerate after a deliberate analyzer change or a new recording (also `make goldens`):

    .venv/bin/python -m tests.goldens            # every scenario in captures/manifest.json
    .venv/bin/python -m tests.goldens NAME...    # some of them

Then review `git diff tests/goldens/` by hand: every change must be explained by the analyzer change
or the new recording. The command also lists where the analyzer disagrees with the manifest's
expectations (era per server, findings by rule id); those are analyzer bugs to fix, not goldens to
accept as they are.

It also rewrites the README's excerpt of the corpus report (the block between `EXCERPT_START` and
`EXCERPT_END`): lines cut from what `erascope analyze captures/` prints at `EXCERPT_WIDTH` columns,
for the servers in `EXCERPT_SERVERS` (review `git diff README.md` too).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "captures" / "corpus"
MANIFEST = ROOT / "captures" / "manifest.json"
GOLDENS = Path(__file__).resolve().parent / "goldens"
README = ROOT / "README.md"
EXCERPT_START = "<!-- report-excerpt:start -->"
EXCERPT_END = "<!-- report-excerpt:end -->"
EXCERPT_WIDTH = 100
"""Columns of the excerpt: a piped report's width."""
EXCERPT_SERVERS = ("auto-legacy-stdio-server", "crash-on-start-http-server", "rollout-split-http-fleet",
                   "upgrade-stdio-server")
"""The servers the excerpt shows: legacy, broken with a client misread, a fleet mid-rollout, an upgrade."""


def manifest_scenarios() -> list[dict[str, Any]]:
    """The scenarios of `captures/manifest.json`, in manifest order."""
    return list(orjson.loads(MANIFEST.read_bytes())["scenarios"])


def reduce_report(report: dict[str, Any]) -> dict[str, Any]:
    """The parts of an `erascope-report/2` document that do not change between recordings.

    Era and support per server (with the sequence of eras on its timeline), findings as sorted
    [rule, severity, server] triples, and the malformed/torn line counts. Timestamps, file names,
    line numbers, counts of connections and messages are left out: they differ on every recording.
    """
    servers = {
        s["server"]: {
            "era": s["era"],
            "modern_support": s["modern_support"],
            "legacy_support": s["legacy_support"],
            "timeline": [t["era"] for t in s["timeline"]],
        }
        for s in report["servers"]
    }
    findings = sorted([f["rule"], f["severity"], f["server"]] for f in report["findings"])
    return {
        "servers": dict(sorted(servers.items())),
        "findings": findings,
        "malformed": len(report["inputs"]["malformed"]),
        "torn": len(report["inputs"]["torn"]),
    }


def reduced_analysis(folder: Path) -> dict[str, Any]:
    """The reduced report the analyzer gives today for one folder of captures."""
    from analyzer.pipeline import analyze
    from analyzer.report import report_dict

    return reduce_report(report_dict(analyze([str(folder)])))


def current(scenario: str) -> dict[str, Any]:
    """The reduced report the analyzer gives today for `captures/corpus/<scenario>`."""
    return reduced_analysis(CORPUS / scenario)


def structure(folder: Path) -> dict[str, int]:
    """What a recording consists of, without anything that changes between runs.

    Counts of (record type, direction, JSON-RPC shape, lifecycle event, HTTP method and status)
    over every capture file in the folder, plus the number of files. stderr lines are left out:
    they are the servers' logs, not protocol; so are client-gone flow errors (see below).
    """
    counts: dict[str, int] = {}
    files = sorted(folder.glob("*.jsonl"))
    counts["files"] = len(files)
    for path in files:
        for line in path.read_bytes().splitlines():
            record = orjson.loads(line)
            kind = record["type"]
            if kind in ("header", "stderr", "part-end"):
                continue
            if kind == "lifecycle" and record.get("event") == "recorder-end":
                # Recorder bookkeeping (the hash chain's part-end, the tee's counters): the corpus
                # was recorded before recorders wrote them, and they describe the recorder, not MCP.
                continue
            if kind == "http.error" and record.get("kind") == "client-gone":
                # A legacy session's GET stream is cut by the client's shutdown or ended by its
                # DELETE, whichever comes first: a race in the client, not a change in behaviour.
                continue
            parts = [kind, record.get("dir") or "", record.get("event") or ""]
            if kind == "http.request":
                headers = {k.lower(): v for k, v in record.get("headers") or []}
                parts += [record["method"], headers.get("mcp-method", "")]
            if kind == "http.response":
                parts.append(str(record["status"]))
            parts.append(_rpc_shape(record.get("raw")))
            key = " ".join(p for p in parts if p)
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def _rpc_shape(raw: object) -> str:
    """`request <method>`, `notification <method>`, `result`, `error <code>`, or `` for non-JSON-RPC."""
    if not isinstance(raw, str) or not raw.startswith("{"):
        return ""
    try:
        msg = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(msg, dict):
        return ""
    if "method" in msg:
        return f"{'request' if 'id' in msg else 'notification'} {msg['method']}"
    if "error" in msg:
        return f"error {msg['error'].get('code')}"
    return "result" if "result" in msg else ""


def golden_path(scenario: str) -> Path:
    return GOLDENS / f"{scenario}.json"


def encode(data: dict[str, Any]) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"


def disagreements(scenario: dict[str, Any], reduced: dict[str, Any]) -> list[str]:
    """Where a reduced report differs from the manifest's expected eras and findings."""
    out = []
    for key, spec in scenario["servers"].items():
        got = reduced["servers"].get(key, {}).get("era", "(server missing)")
        if got != spec["expected"]:
            out.append(f"era of {key}: expected {spec['expected']}, analyzer says {got}")
    for key in sorted(set(reduced["servers"]) - set(scenario["servers"])):
        out.append(f"unexpected server key in the report: {key}")
    expected = set(scenario["expected_findings"])
    got_rules = {rule for rule, _sev, _server in reduced["findings"]}
    for rule in sorted(expected - got_rules):
        out.append(f"missing finding: {rule}")
    for rule in sorted(got_rules - expected):
        out.append(f"unexpected finding: {rule}")
    return out


def _blocks(lines: list[str]) -> list[list[str]]:
    """A section's lines in blocks: a line at the margin and the indented lines under it."""
    blocks: list[list[str]] = []
    for line in lines:
        if (line and not line.startswith(" ")) or not blocks:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return blocks


def report_excerpt(text: str) -> str:
    """Lines of a text report of the corpus, cut down to `EXCERPT_SERVERS` (`…` where lines were left out).

    Kept: the summary, the Servers header and the chosen servers' rows, the era legend, their why
    lines, their findings, and the Files entries the kept lines cite.
    """
    sections: dict[str, list[str]] = {}
    name = "summary"
    for line in text.splitlines():
        if line.split(":")[0].split(" (")[0] in ("Servers", "Eras", "Why each verdict", "Findings", "Clients", "Files"):
            name = line.split(":")[0].split(" (")[0]
        sections.setdefault(name, []).append(line)

    def chosen(block: list[str]) -> bool:
        head = block[0]
        return any(head.startswith(s + " ") or head == s or f" server {s} " in head + " " for s in EXCERPT_SERVERS)

    out = [line for line in sections["summary"] if line] + [""]
    servers = sections["Servers"]
    rule = next(i for i, line in enumerate(servers) if line.strip().startswith("─"))
    out += servers[: rule + 1]
    for section in ("Servers", "Why each verdict", "Findings"):
        lines = sections[section]
        body = lines[rule + 1 :] if section == "Servers" else lines[1:]
        if section != "Servers":
            out.append(lines[0])
        kept = [b for b in _blocks([line for line in body if line]) if chosen(b)]
        for block in kept:
            out += block
            if section == "Findings":
                out.append("")
        if section == "Findings":
            out.pop()
        out += ["…", ""]
        if section == "Servers":
            out += [line for line in sections["Eras"] if line] + [""]
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", "\n".join(out))}
    out.append("Files")
    for block in _blocks(sections["Files"][1:]):
        files = [line for line in block[1:] if int(re.match(r" +\[(\d+)\]", line)[1]) in cited]
        if files:
            out += [block[0], *files]
    return "\n".join(out) + "\n"


def excerpt_block(text: str) -> str:
    """The README block between the markers for the report `text`: the excerpt as a code block."""
    lines = [f"    {line}" if line else "" for line in report_excerpt(text).splitlines()]
    note = (f"<!-- generated by `python -m tests.goldens` from `erascope analyze captures/` at {EXCERPT_WIDTH}"
            " columns; do not edit -->")
    return "\n" + note + "\n\n" + "\n".join(lines) + "\n\n"


def sync_readme_excerpt() -> bool:
    """Rewrite the README's report excerpt from the analyzer's report today; True when it changed."""
    from analyzer.pipeline import analyze
    from analyzer.report import render

    text = render(analyze(["captures/"]), "text", width=EXCERPT_WIDTH)
    readme = README.read_text(encoding="utf-8")
    head, rest = readme.split(EXCERPT_START, 1)
    _, tail = rest.split(EXCERPT_END, 1)
    updated = head + EXCERPT_START + excerpt_block(text) + EXCERPT_END + tail
    if updated == readme:
        return False
    README.write_text(updated, encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    import os

    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    scenarios = manifest_scenarios()
    wanted = set(argv)
    unknown = wanted - {s["scenario"] for s in scenarios}
    if unknown:
        print(f"unknown scenario(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    GOLDENS.mkdir(exist_ok=True)
    changed = 0
    for scenario in scenarios:
        name = scenario["scenario"]
        if wanted and name not in wanted:
            continue
        reduced = current(name)
        path = golden_path(name)
        new = encode(reduced)
        old = path.read_bytes() if path.exists() else None
        if new != old:
            path.write_bytes(new)
            changed += 1
        state = "unchanged" if new == old else ("new" if old is None else "CHANGED")
        print(f"{name:34} {state}")
        for problem in disagreements(scenario, reduced):
            print(f"    differs from manifest: {problem}")
    print(f"{changed} golden(s) written; review them with `git diff tests/goldens/`")
    if not wanted:
        state = "rewritten; review it with `git diff README.md`" if sync_readme_excerpt() else "unchanged"
        print(f"README report excerpt {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
