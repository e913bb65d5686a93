"""`erascope watch`: follow capture directories while the recorders write them, and report each new
finding and era change as soon as the traffic that proves it is on disk.

How it stays proportional to the new bytes:

- Every capture part (a file, or its logrotated `.gz`/`.zst` copy: one part, told by its header's
  `analyzer.load.part_identity`) keeps the byte offset and line count read so far. A round reads only
  the complete lines written since (`analyzer.load.extract_lines`); a last line without its newline is
  not complete yet and is read in a later round, unless it reads as a record: a line short only of its
  newline is written (captures/FORMAT.md; a recorder stopped by a full disk leaves one), and `analyze`
  reads it (`_Part.unterminated`). A compressed copy of a part read already is the same
  data: only lines past those read are taken from it (a closed part is decompressed once for that).
  A plain file is known by its inode too: one replaced, rewritten (truncated, its header changed) or
  renamed to another listed name is read from its start as a new part, and the old part dropped
  (`Watcher._follow`), as `analyze` afterwards reads the files as they are then.
- Copies of one capture part (a copy under another name, a file of joined captures holding it) are
  read once, from the file first in input order holding it, as `analyze` reads them
  (`analyzer.load.repeats`): a copy written after the one read but named before it takes the part
  over, and the file read until then is read again from its start without it (`Watcher._part_for`,
  `Watcher._repeated`); a file whose first capture part another file keeps is read for the parts
  joined after it. Copies under one name in one directory (a part and its compressed copy) are one
  part, read from the plain file until it goes, and a file gone keeps what it contributed. Of copies
  under a recorder's file name in two directories, `analyze` reads the one holding the most complete
  lines (`analyzer.load.fullest_first`): the copies not read have their lines counted as they grow
  (`Watcher._count_copy`, the new bytes only), and one that ranks before the file read takes the
  part over (`Watcher._take_fuller_copies`). A finding a copy taking a part over holds is the one
  reported from the other copy: it is found by its lines as lines of the capture part
  (`Watcher._part_line`), and reported once more as a `finding-update` naming the report it
  replaces, as when its first line moves.
- Every verdict and finding is a function of one server key's traffic. A round analyzes again
  (`analyzer.pipeline.analyze_facts`, the pipeline `analyze` runs) only the traffic of the server
  keys the new lines touched (a row of theirs kept or condensed away): of a part holding other
  servers' traffic too (a proxy's), only their rows (`analyzer.watch_shard`), so a capture of many
  servers is not analyzed whole when one of them spoke. The other servers' verdicts and findings are carried from
  the round that last analyzed them (`Watcher.results`; tests/test_watch_shard.py compares them, in
  every round, with `analyze` on the same files).
- Carried across rounds (`analyzer.watch_state`): the connections' client identities. A round
  computes them again only for the connections its new lines are on, and the connections sharing a
  session id with those (the session's opener names them); every other connection keeps the identity
  of the last round, which is the one the whole history gives (tests/test_watch_state.py compares
  the two in every round).

What a round still reads in proportion to history: the touched servers' condensed rows, whole
(about a row per request: at a 100 MB backlog of the synthetic load, 8,000 message rows and 44,000
moved requests for its five HTTP servers, of which each megabyte of its traffic touches three to
five). Every verdict and finding is an aggregate over a server's
(or a server and client's) whole traffic, with evidence the first lines by file:line, so none is a
function of a bounded tail of it. What each step reads:

- probe and `initialize` outcomes (`analyzer.probes`): per request, its answer, and the first
  garbage, death or client EOF on its connection or flow within the probe timeout; the client name
  first named on the connection. Bounded by the connection's life, which a stdio session can make days.
- verdicts (`analyzer.eras`): the server's whole sequence of evidence (probe and `initialize`
  outcomes, sessionless refusals): forward-filled support, the epoch a modern flip starts (legacy
  support forgotten), contradictions within the inconsistency window of the latest; and whole-history
  aggregates (versions ever listed, connections, the clients of every connection, first and last seen).
- client identities (`analyzer.identity`): per connection the first clientInfo, User-Agent and
  address, and the connection that opened each session id, wherever in the history it lies. Carried
  (above): what a round computes is the new lines' connections; what it still reads of the history is
  one pass picking those connections' rows.
- the rules' request view and `probe_rows` (`analyzer.rules.context`): every request of the server
  in (client, time) order; a probe's next request on its connection can lie any distance later.
- probe-storm: per (server, client) counts over the whole history (probes, real requests,
  connections), the runs of distinct answers, the most probes within `storm_window_s` anywhere, each
  probe's cost (the next real request on its connection, else within `cost_horizon_s`).
- probe-timeout: every `no-answer` probe of (server, client), its cost up to the next request or the
  connection's end.
- retry-same-id, retry-unsupported-version, misread-modern, malformed-probe: each probe and the
  client's next request (local), grouped per (server, client) over the whole history.
- misread-crash, probe-kills-server: the same, and whether the server ever answered a probe as modern.
- retry-loop: runs of refused probes in the client's request sequence; the longest over the history.
- stale-era: runs of `stale_repeats` refused `initialize`s or legacy-refused modern requests; every
  request acting in the old era after any client's probe saw the server's era change, for clients
  that probed before the change (whole history per server and client).
- rollout-split: `split_window_s` windows over all the server's answers; the finding spans the first
  split window to the last, its evidence the first answers inside by file:line.
- unnamed-versions, stdout-pollution, rc-error-code, invalid-discover-result, upstream-unreachable:
  single messages, counted and the first ones kept per server over the whole history.

Measured per stage (`python -m bench.bench_watch_stages`, and step by step on one round's rows
`python -m bench.bench_watch_steps`; bench/README.md, 2026-12-01 23:00 and 2026-12-02 04:45 UTC): of
a round's growth from a 10 MB to a 100 MB backlog, the client identities were the largest single
part (+0.057 CPU s per new MB) and are carried now (+0.008). Some steps grew faster than their rows,
by work done group by group: stale-era built an evidence struct for every request acting in an old
era inside an aggregation per client and era change, rollout-split ran `rle_id` in every
`split_window_s` window of the history, the request view was sorted stretch by stretch. These now do
that work only for the rows shown (the first ten of each group) or in one pass (bench/README.md,
2026-12-02 04:45). What is left is a pass over the touched servers' rows in each step, linear in
them, a few milliseconds per 40,000 requests each, about twenty of them: probe and initialize
classification, the verdicts, the request view, `probe_rows` (the details of the probes and of the
requests after them, picked from every request), the answers, and the rules above (stale-era's and
rollout-split's requests and answers, probe-storm's cost look-ups over every real request of the
probed connections). A round at the 100 MB backlog still costs about 0.1 to 0.2 CPU s more than at
10 MB (1.2 to 1.6x per new MB at load 10 to 29). Flat CPU per new byte would need each of these to
carry a small state per server and client across rounds (counts, the first evidence lines, the last
run of each answer, open windows, the last era change; for the request view, its rows in order with
the new ones merged in, which a client identity changing for an old connection reorders): not done.
Carrying a frame while every step still reads it whole does not pay: the request view carried and
merged (new rows placed by a binary search, renamed connections and peers filled in since taken out
and merged in again) cost 27-34 ms a round at the 100 MB backlog against 18-20 ms built from scratch,
as picking the new rows, taking the changed ones out and gathering the merged frame are passes over
the history too, in some thirty polars calls (bench/README.md, 2026-12-02 07:50): what would have to
be carried is each step's result (counts, first evidence, open windows), not its rows. The view is
sorted by numpy's `lexsort` instead (`RuleContext.lexsort_view`): a round's pipeline at 100 MB 26-32 ms
cheaper, its growth from 10 MB about 80 ms instead of 95-100.

Measured again (bench/README.md, 2026-12-02 11:45–12:20 UTC; `bench_watch_steps` counts the rows a
round reads): from the 10 MB to the 100 MB backlog a round's rows grow 8 to 9 times (request view
5,453 → 47,159 rows, probes 325 → 2,161, connections 317 → 2,063, message rows 1,116 → 8,078) and its
pipeline by about 47 ms (least CPU of 8 at load 5: 90 → 137 ms; on a quieter moment 166 → 171 ms):
`probe_rows` +7.6, rollout-split +6.6, probe-storm +4.7, the request view +4.6, stale-era +3.7 ms, and
(`bench_watch_stages`) the verdicts, probe and initialize classification and the client identities
+3 to +9 ms each. What the watcher does itself is flat: reading, pairing the pieces (`combine`), and
merging a growing part's pieces (13–25 ms once every `MERGE_PIECES` rounds, for a part of 4 or of 40
MB). End to end (`bench_watch`, six runs at load 7–10) 1.08–1.48x; with the two backlogs' rounds
taking turns in one process, the cheapest round 1.24–1.44x in seven runs (0.05 CPU s per MB more).
Each growing step is a pass over every request of the touched servers, or a row per probe of the
whole history: a probe's next request, its cost and its answer runs are computed for every probe in
every round.
Carrying the probe and initialize outcomes per connection was measured and not done: classifying
only the new megabyte's connections (95 of 8,078 message rows) costs 7.2 + 6.6 ms against 14.0 + 10.1
ms for the 100 MB history (10 MB: 12.4 + 10.0), and picking those rows 1.7 ms more before the merge
with the carried ones: about 7 ms a round saved at 100 MB and 5 ms at 10 MB, 2 ms of it growth. Most
of such a step is its thirty-odd polars calls, not its rows; the carried identities show the same
(8–12 ms a round, against 5–15 ms computed from the whole history). Carrying pays where the rows
are the cost, which is the steps above, and each has a reason it cannot be carried as a plain
aggregate: a probe's next request (same connection, else the client's next) changes when a row of
its (server, client) lands between them (a capture read late, a connection renamed into the client
by a session's opener), and the view position `_i` the rules key probes by moves with every row
placed before it; probe-storm's densest `storm_window_s` and its answer runs extend only while new
probes come after the last; rollout-split's windows are fixed by time, but its evidence is the first
answers by file:line, which a new file can precede; stale-era's era change, decided by any client's
probe, makes requests read long before into evidence. Each would need its result carried per
(server, client) with those conditions checked on the new rows, and a recomputation when they fail,
each proven against `analyze` round by round as the identities are: not done. Their bound: computed
for the 23 probes of a new megabyte alone, `probe_rows` and probe-storm take 9.5 and 5.9 ms at 100 MB
(16.3 and 10.0 for all 2,161 probes; 6.4 and 4.3 at 10 MB), as they still pass over the request view.
And the ordinary requests are not all of it: with every moved request taken out of a round's rows
(not an analysis to run, a bound) its pipeline still grows 1.40x from 10 to 100 MB (+34 ms, against
+60 ms with them), with the history's kept rows, dropped answers and probes.

A round does skip what watch does not show: the client table, and temporary files for the request
view (the rows are in memory already). Analyzing only the touched servers (above) takes the
untouched ones' history out of a round, which the synthetic load hardly shows: each of its megabytes
touches three to five of its five HTTP servers, and the two it sometimes misses hold an eighth of
the history (bench/README.md, 2026-12-02).

Memory: the watcher holds every part's rows read so far (condensed: about a row per request, and
the answers condensing dropped: 0.6 MB of frames at the 10 MB backlog, 5.7 MB at 100 MB, linear in
the requests read; the process after reading them, 142 and 166 MB resident), as every verdict and
finding needs its server's whole history; holding the untouched servers' rows on disk instead
(`analyzer.spill`) would bound memory by the active servers only, at the cost of reading them back
in every round that touches them: not done.

What cannot be decided yet is not reported yet: an unanswered probe or initialize becomes `no-answer`
only once the probe timeout has passed in its capture's time: the latest record of its file, plus
the wall-clock time the file has been idle since (so a replayed old capture is judged by its own
timestamps, and a live one that went quiet by the clock). While a server has such a probe, its
findings and era changes wait; it is analyzed again when the timeout will have passed, even without
new traffic. Everything else a rule decides is decided by traffic that is present (a later request,
an answer), so it is reported in the round that reads it. Each era change is reported once (by
server, era and deciding line), each finding once (by rule, server, client and first evidence line); when
more traffic adds evidence to a finding reported already (a storm or a split going on), it is
reported again as `finding-update` with all its evidence so far (naming the report it `replaces`
when a line read later went ahead of its first one, or its capture part is read from another copy
now), so the last report of each finding
has the evidence `analyze` gives it on the same files (its message, counts and spans, is as of that
report: a count that grows without new evidence shown is not reported again). Evidence names each
line's file as it is when the event is printed (`Watcher._named_now`): a part compressed since its
last report (the plain file removed) holds the same lines in its copy, where `analyze` names them; the
move alone is not reported (an update per finding per rotation would carry nothing new).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import glob
import io
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

import polars as pl

from addon.errors import EMPTY_PATH, ErascopeError
from addon.format import cut_header
from analyzer.condense import merge
from analyzer.eras import ServerVerdict
from analyzer.facts import Joined, Refused, Repeated
from analyzer.findings import Evidence, Finding, Severity
from analyzer.load import (
    FileFacts,
    Head,
    InputError,
    LoadOptions,
    combine,
    display_name,
    extract_lines,
    find_inputs,
    first_line,
    format_refusal,
    heads_in,
    malformed_lines,
    name_key,
    not_a_capture,
    not_regular,
    part_identity,
    read_header,
    read_open_header,
    run_key,
)
from analyzer.pipeline import Analysis, AnalyzeOptions, analyze_facts
from analyzer.probes import DEFAULT_PROBE_TIMEOUT, decided_by_answer, output_ended
from analyzer.report import visible
from analyzer.rules.context import request_style
from analyzer.sources import COMPRESSED_SUFFIXES, FLOWS, HAR, CutStream, foreign_kind, open_stream, strip_compression
from analyzer.watch_shard import CarriedResults, ServerKey, SessionLinks, only_servers, piece_servers, piece_sessions
from analyzer.watch_state import CarriedIdentities, piece_connections

MERGE_PIECES: Final = 8
"""A part read in more pieces than this has them merged into one (`_merged`): a file growing for days
is not paired again piece by piece in every round."""
READ_LIMIT: Final = 64 << 20
"""Bytes read from one file in one round at most: a large backlog is taken in steps, each reported."""
UNDECIDED_OUTCOME: Final = "no-answer"
GARBAGE_OUTCOME: Final = "garbage"
"""A probe outcome decided early where the garbage is no answer (a stdout line, an event on the answer's
stream): an answer within the timeout still replaces it. Garbage that is the answer (an HTTP body
that is no JSON) is final (`analyzer.probes.decided_by_answer`)."""
DIED_OUTCOME: Final = "connection-died"
"""Decided early too on stdio where the death is an `exit`: the answer can still be in the pipe."""
FOREIGN: Final = {HAR: "a HAR file", FLOWS: "a mitmproxy dump"}
ANALYZE_THEM: Final = "watch follows erascope captures only; use `erascope analyze` for HAR files and mitmproxy dumps"

FINDING: Final = "finding"
FINDING_UPDATE: Final = "finding-update"
WITHDRAWN: Final = "withdrawn"
STALE_ERA: Final = "stale-era"
ERA: Final = "era"


@dataclass(frozen=True)
class WatchEvent:
    """One thing `watch` reports: a new finding, or a server's era changing."""

    kind: str
    """`finding`, `finding-update` (a finding reported before, its evidence grown), `withdrawn` (a
    finding or era change reported before that the traffic read since no longer proves: `era` is
    set for an era change) or `era`."""
    server: str
    ts: float | None
    """When it happened in the capture (the finding's first evidence, the era change's deciding line)."""
    evidence: tuple[Evidence, ...]
    rule: str | None = None
    """The finding's rule id; None for an era change."""
    severity: str | None = None
    """The finding's severity; None for an era change."""
    era: str | None = None
    """The era the server changed to; None for a finding (and a finding withdrawn)."""
    previous: str | None = None
    """The era before (None for the server's first era, and for a finding)."""
    message: str = ""
    client: str | None = None
    """The client a finding is about (None for a server's finding, and for an era change): two
    clients' findings of one rule and server are two findings, even when their first evidence is one line."""
    replaces: Evidence | None = None
    """For a `finding-update` whose first evidence line moved (a line read later went ahead of the
    others), the first evidence of the report it replaces; None otherwise."""

    def as_json(self) -> dict[str, Any]:
        """The JSON line `--format json` writes (documented in README.md)."""
        return {
            "event": self.kind,
            "server": self.server,
            "client": self.client,
            "rule": self.rule,
            "severity": self.severity,
            "era": self.era,
            "previous": self.previous,
            "time": _iso(self.ts),
            "ts": self.ts,
            "message": self.message,
            "evidence": [_evidence_json(e) for e in self.evidence],
            "replaces": None if self.replaces is None else _evidence_json(self.replaces),
        }

    def as_text(self) -> str:
        """The line the text format writes: what the traffic wrote in it (server keys, messages, file
        names) with control characters shown, not acted on, as in the text report."""
        where = " ".join(f"{e.file}:{e.line}" for e in self.evidence[:3])
        more = f" (+{len(self.evidence) - 3} more)" if len(self.evidence) > 3 else ""
        why = " (no longer holds)" if self.kind == WITHDRAWN else ""
        server = "-" if self.server is None else self.server  # records without a key: as the text report
        if self.era is None:
            head = f"{_iso(self.ts)} {self.kind} {self.severity} {self.rule} server={server}"
            if self.client is not None:
                head += f" client={self.client}"
            moved = "" if self.replaces is None else f" (first line was {self.replaces.file}:{self.replaces.line})"
            return visible(f"{head}: {self.message}{why} [{where}{more}]{moved}")
        was = f" (was {self.previous})" if self.previous else ""
        head = f"{_iso(self.ts)} {'' if self.kind == ERA else self.kind + ' '}era server={server}"
        return visible(f"{head} {self.era}{was}{why} [{where}]")


def _evidence_json(e: Evidence) -> dict[str, Any]:
    return {"file": e.file, "line": e.line, "at": f"{e.file}:{e.line}", "note": e.note}


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class _Reported:
    """A finding as `watch` last reported it."""

    evidence: tuple[tuple[str, int], ...]
    """Its evidence (as `_same_data`): when it grows, the finding is reported again."""
    finding: Finding
    """The finding as reported: what a `withdrawn` event names."""
    lines: frozenset[_Line] = frozenset()
    """Its evidence by file and line (`_same_data`) and as lines of capture parts (`Watcher._part_line`),
    whatever file held them: a report whose first line moved, or whose capture part is now read from
    another copy, is found by them (`_moved`)."""

    @property
    def first(self) -> Evidence | None:
        """Its first evidence as printed: what an update that moves it names."""
        return self.finding.evidence[0] if self.finding.evidence else None


def _first_line(f: Finding) -> tuple[str, int] | None:
    """What `watch` knows a finding by, besides its rule, server and client."""
    return _same_data(f.evidence[0]) if f.evidence else None


def _moved(
    gone: dict[tuple[str, int] | None, _Reported],
    lines: frozenset[_Line],
    reported: dict[tuple[str, int] | None, _Reported],
) -> Evidence | None:
    """The first evidence printed for a finding of evidence `lines` (`Watcher._part_line`) when its
    first line moved: a line read later joined it ahead of the others (an answer written before its
    request), or its capture part is read from another copy now, the one `analyze` keeps (its lines
    there). That report is one of its rule, server and client's `reported` that this round's analysis
    no longer has (`gone`), and shares evidence with it; its entry goes."""
    shared = {first: len(lines & r.lines) for first, r in gone.items()}
    # the report sharing the most lines (then the first by line, for a fixed choice)
    old = min((k for k, n in shared.items() if n), key=lambda k: (-shared[k], str(k)), default=None)
    return None if old is None else reported.pop(old).first


def _same_data(e: Evidence) -> tuple[str, int]:
    """Evidence as a key that a part and its compressed copy share."""
    return strip_compression(e.file), e.line


_Line = tuple[object, int]
"""A line of a capture part, whichever file holds it (`Watcher._part_line`)."""


@dataclass
class _Part:
    """One capture part, wherever its bytes are now (the plain file, then maybe its compressed copy)."""

    path: str
    identity: tuple[bytes, ...]
    header: dict[str, Any]
    offset: int = 0
    """Bytes of the (decompressed) stream read: always the end of a complete line (or of one whole but
    for its newline: `unterminated`)."""
    lines: int = 0
    """Complete lines read (and a last one whole but for its newline: `unterminated`)."""
    compressed: bool = False
    seen_size: int = -1
    """The compressed file's size when last read (it is read again only when that changes)."""
    inode: tuple[int, int] | None = None
    """The plain file's (st_dev, st_ino): another file under its name is not this part."""
    checked: tuple[int, int] = (-1, -1)
    """The plain file's (size, mtime_ns) when its header was last found unchanged (`_read_new`)."""
    pieces: list[FileFacts] = field(default_factory=list)
    servers: set[str] = field(default_factory=set)
    horizon: float = float("-inf")
    """The latest record time read from the part: how far its capture has got."""
    grown: float = 0.0
    """When (wall clock) the part last had new lines: idle since, its capture time runs on with the clock."""
    gone: bool = False
    """Its plain file was missing from the last listing (deleted, or compressed: `Watcher._follow` looked
    for the copy then); false again once the file is listed under its name again."""
    unterminated: bool = False
    """The last line read was the file's last, whole but for its newline (`Watcher._taken`): the newline,
    when it comes, ends that line; anything else means the line went on, and was not the record read
    (the file is read again from its start)."""
    joined: tuple[Joined, ...] = ()
    """The captures found joined after the part's own in the lines read (`analyzer.facts.Joined`): the
    next piece's rows are labelled by them too."""
    noted: int = 0
    """Lines whose malformed ones are noted already: those before a line that went on (`unterminated`)."""
    keys: list[bytes] = field(default_factory=list)
    """The identity keys (`analyzer.load.run_key`) of the capture parts joined after the part's own
    that it holds: a copy of one in a file of its own later in input order is left out
    (`Watcher._part_for`)."""
    left_from: int | None = None
    """The first line of the capture part in the file that is being left out, another file (or this
    one, before) holding it (`Watcher._repeated`): up to the next header. Line 1 when it is the file's
    own capture part (`Watcher._part_for`), whose identity keys then name the file holding it."""
    left_holder: str = ""
    """The file holding the part left out."""
    holders: list[_Part] = field(default_factory=list)
    """The parts holding a copy left out here: when one is dropped, this one is read again
    (`Watcher._drop`), as another file may keep the copy now, or this one."""
    refused_from: Refused | None = None
    """The capture joined into the file whose header names a format this erascope does not read, being
    left out (`Watcher._repeated`): up to the next header, as `analyze` leaves it out."""
    heads: list[tuple[int, bytes | None]] = field(default_factory=list)
    """The file's headers read so far, by line: (its line, the key of its capture part, as copies of
    the part share it: `analyzer.load.run_key`, else the part's identity; None for a joined header
    naming no run). What `Watcher._part_line` numbers a line of the part by."""
    behind: bool = False
    """The last read stopped short of the file's end (`READ_LIMIT`): it holds more complete lines
    than those read, and is not ranked against its copies by them (`Watcher._take_fuller_copies`)."""
    listed: int = 0
    """The round that last listed its file and read it (`Watcher._read_file`)."""

    def now(self, wall: float) -> float:
        """The part's capture time now: its latest record, plus the time it has been idle since."""
        return self.horizon + max(0.0, wall - self.grown)


@dataclass
class _Copy:
    """A copy of a part followed, under the part's recorder file name in another directory (plain or
    compressed), not read: `analyze` reads the copy holding the most complete lines
    (`analyzer.load.fullest_first`), so its lines are counted, from where they were counted last
    (`Watcher._count_copy`), and ranked against the part's (`Watcher._take_fuller_copies`)."""

    path: str
    of: _Part
    """The part read instead, as the last count found it."""
    lines: int = 0
    """Its complete (newline-ended) lines, as `fullest_first` counts them (decompressed)."""
    offset: int = 0
    """Bytes of the plain file counted."""
    file: tuple[int, int] | None = None
    """The plain file's (st_dev, st_ino), or the compressed one's (size, mtime_ns), when counted."""
    round: int = 0
    """The round that last listed and counted it: a copy no longer listed is forgotten."""


class Watcher:
    """Follows capture paths; `poll` reads what is new and returns the events it proves."""

    def __init__(
        self,
        paths: Iterable[str],
        probe_timeout: float = DEFAULT_PROBE_TIMEOUT,
        rule_options: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.paths = [str(p) for p in paths]
        self.probe_timeout = probe_timeout
        self.rule_options = dict(rule_options or {})
        self.clock = clock
        self._parts: dict[bytes, _Part] = {}
        self._by_path: dict[str, _Part] = {}
        self._eras: dict[str, dict[tuple[str, tuple[str, int], str | None], WatchEvent]] = {}
        """Reported era changes by server, then by (era, deciding line as `_same_data`, era before)."""
        self._findings: dict[tuple[Any, ...], dict[tuple[str, int] | None, _Reported]] = {}
        """Reported findings by (rule, server, client), then by first evidence line (`_same_data`)."""
        self._wake: dict[str, float] = {}
        """Server → when its undecided probes are decided (a round analyzes it then)."""
        self.bytes_read = 0
        """Bytes of complete lines read, and of last lines whole but for their newline (a compressed part
        counts its decompressed lines)."""
        self.records = 0
        """Well-formed records read."""
        self.notes: list[str] = []
        """Input notes for the CLI to show (malformed lines as `file:line: why`, files refused), each
        once; the caller drains the list."""
        self._dropped: set[str] = set()
        """Servers of parts dropped since the last round (`_follow`): their results go with them."""
        self._moved: dict[str, _Part] = {}
        """A file a part was read from before another took its place (its compressed copy, the plain
        file removed), as evidence names it → the part: an event printed since names the file the part is
        in now (`_named_now`), as `analyze` on the files then does."""
        self._refused: dict[str, tuple[tuple[int, int, int, int], str]] = {}
        """Files not read (not regular, not a capture, an unknown format major, unreadable): each path's
        file as it was (device, inode, size, mtime) and why, noted once. Tried again once the path names
        another file or the file changed (a FIFO replaced, a capture written over it)."""
        self._identities = CarriedIdentities()
        """The connections' client identities, carried across rounds (`analyzer.watch_state`)."""
        self._links = SessionLinks()
        """Server keys sharing sessions (`analyzer.watch_shard`): a round analyzes them together."""
        self._results = CarriedResults()
        """Every server's verdict and findings as of the round that last analyzed it (`analyzer.watch_shard`)."""
        self.analyzed: set[ServerKey] = set()
        """The server keys the last round analyzed (the others' results were carried)."""
        self._copies_of_name: dict[str, _Copy] = {}
        """The copies of parts under their recorder file names not read, by path (`_Copy`)."""
        self._round = 0
        """Rounds read so far (`_read_round`)."""
        self._copies_at_start = self._copies()
        """The compressed files the globs' plain names matched when watch started: history the globs
        do not name, unlike a part written since (`_files`)."""
        for p in self.paths:
            if not p:
                raise ErascopeError(EMPTY_PATH)
            # a glob may match nothing yet: the recorders have not started (`_files` looks each round)
            if not os.path.exists(p) and not glob.has_magic(p):
                raise ErascopeError(f"no such file or directory: {p}")

    # --- reading ---------------------------------------------------------------------------------
    def _files(self) -> list[str]:
        try:
            # a glob matching nothing yet, a directory gone for a moment: the other paths are read,
            # and the next round looks again
            found = find_inputs(self.paths, missing_ok=True)
        except ErascopeError:
            found = []  # a listing that failed (a store not answering): the next round looks again
        # a glob's `.json` (a report, a baseline beside the captures) is none of them; one named
        # explicitly (a HAR file saved as .json) is looked at, and noted
        files = [f for f in found if not f.endswith(".json") or f in self.paths]
        # A glob of plain names (`*.jsonl`) matched each part while it was written, but a part can be
        # written and compressed between two rounds, and a copy `_follow` found once can hold more
        # than one round reads (of a file named too): such copies are read as their plain files
        # would have been. Copies there before watch started (not followed from a plain file) were
        # never named.
        copies = {c for c in self._copies() if c not in self._copies_at_start or c in self._by_path}
        return sorted({*files, *copies})

    def _copies(self) -> set[str]:
        """The compressed files whose plain names the globs and files given match."""
        copies: set[str] = set()
        for p in self.paths:
            if glob.has_magic(p):
                copies.update(c for x in COMPRESSED_SUFFIXES for c in glob.glob(p + x, recursive=True))
            elif not os.path.isdir(p):
                copies.update(c for x in COMPRESSED_SUFFIXES if os.path.isfile(c := p + x))
        return copies

    def _follow(self, files: list[str]) -> None:
        """Drop every plain part whose file is no longer under its name: replaced (`mv new old`) or
        renamed (logrotate's rename before `create`) is another file for `analyze`, or the same under
        another name, so it is read from its start as a new part (what was read of the old one would be
        read from a stale offset, or named by a name `analyze` does not give). A part whose file is only
        gone (rotated and compressed, removed) is kept: its compressed copy goes on from the lines read.
        A file written over in place (the same inode) is found where it is read (`_read_new`)."""
        found: dict[str, os.stat_result] = {}
        for path in files:
            if not _is_compressed(path):
                try:
                    found[path] = os.stat(path)
                except OSError:
                    continue  # gone since it was listed: as if not listed
        inodes: dict[tuple[int, int], str] = {
            (st.st_dev, st.st_ino): path for path, st in found.items() if stat.S_ISREG(st.st_mode)
        }
        for path, part in list(self._by_path.items()):
            if part.compressed or part.path != path:
                continue
            st = found.get(path)
            if st is None:
                other = inodes.get(part.inode) if part.inode is not None else None
                if other is None or not self._same_header(other, part):
                    # only gone: a file now holding its inode is another (a file system reuses the
                    # inode of a deleted part, such as one retention removed, for the next file made);
                    # the part owns that inode no more, and that file's header is not read again
                    if other is not None:
                        part.inode = None
                    if not part.gone:
                        part.gone = True
                        # compressed (`--compress` writes `x.jsonl.zst` before it removes `x.jsonl`): its
                        # copy holds the lines not read yet, also where the paths given do not name it
                        # (a `*.jsonl` glob); looked for once, when the plain file is first missed
                        copy = next((path + x for x in COMPRESSED_SUFFIXES if os.path.isfile(path + x)), None)
                        if copy is not None and copy not in files:
                            files.append(copy)
                    continue
            elif (st.st_dev, st.st_ino) == part.inode:
                # under its name again after a listing that missed it (a directory gone for a moment):
                # its copy is looked for when the file is next missed, which may be its compressor's doing
                part.gone = False
                continue
            self._drop(part)

    @staticmethod
    def _same_header(path: str, part: _Part) -> bool:
        """Whether the file at `path` starts with `part`'s header (the part renamed, not a new file)."""
        try:
            return read_header(path) == part.header
        except (InputError, OSError):
            return False

    def _drop(self, part: _Part) -> None:
        """Forget a part and what it contributed: its servers are analyzed again without it."""
        for k in (*part.identity, *part.keys):
            if self._parts.get(k) is part:
                del self._parts[k]
        for path in [p for p, known in self._by_path.items() if known is part]:
            del self._by_path[path]
        for name in [n for n, known in self._moved.items() if known is part]:
            del self._moved[name]
        for piece in part.pieces:
            self._identities.touch(piece_connections(piece))
        self._dropped |= part.servers
        # the parts that left out a copy this one held: read again from their starts (later in input
        # order, so later this round), but for one whose file is gone, which keeps what it contributed
        dependents = {id(p): p for p in self._by_path.values() if any(h is part for h in p.holders)}
        for other in dependents.values():
            if os.path.exists(other.path):
                self._drop(other)

    def _part_for(self, path: str) -> _Part | None:
        part = self._by_path.get(path)
        if part is not None:
            return part
        try:
            try:
                st = os.stat(path)
                # a FIFO would block open() (and the signals that stop watch) until a writer comes; only
                # a file that is not regular needs `analyze`'s words for what it is
                why = None if stat.S_ISREG(st.st_mode) else not_regular(path)
            except FileNotFoundError:
                st = os.lstat(path)  # a dangling symbolic link: the link is what changes
                why = not_regular(path)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                st = os.lstat(path)  # a link that leads to itself: never readable, named as `analyze` does
                why = f"cannot read: {exc.strerror}"
        except (InputError, OSError):
            return None  # gone since it was listed: the next round sees
        file = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        refused = self._refused.get(path)
        if refused is not None and refused[0] == file:
            return None
        header = None
        if why is None:
            try:
                header = read_header(path)
                if header is None:
                    why = _never_followed(path)
            except (InputError, OSError) as exc:
                why = str(exc)
        if why is not None:
            if refused is None or refused[1] != why:
                self.notes.append(f"{display_name(path)}: {why}")
            self._refused[path] = (file, why)
            return None
        self._refused.pop(path, None)
        if header is None:
            return None  # empty so far, or its first line not complete yet: looked at again next round
        inode = None if _is_compressed(path) else (st.st_dev, st.st_ino)
        identity = part_identity(path, header) or (os.fsencode("path:" + path),)
        known = next((self._parts[k] for k in identity if k in self._parts), None)
        plain = self._by_path.get(strip_compression(path)) if inode is None else None
        if plain is not None and plain.identity == identity:
            # its compressed copy: found by name too, as a part whose first capture another file holds
            # has no identity keys of its own (below)
            known = plain
        held_by = None
        if known is not None:
            own = any(k in known.identity for k in identity)
            if own and (known.path == path or not os.path.exists(known.path)):
                self._moved[display_name(known.path)] = known
                known.path, known.compressed, known.seen_size, known.inode = path, _is_compressed(path), -1, inode
                self._by_path[path] = known
                return known
            if own and _same_name(path, known.path):
                if os.path.dirname(path) == os.path.dirname(known.path):
                    # a part and its compressed copy (a compressor at work): one part, read from the
                    # file read until it goes, then from the copy past the lines read (above)
                    return None
                if name_key(path) is not None:
                    # copies under the recorder's name in two directories: `analyze` reads the one
                    # holding the most lines, the first in input order of those holding as many;
                    # counted here, ranked once the round has read the part (`_take_fuller_copies`)
                    self._count_copy(path, known)
                    return None
                if path > known.path:
                    return None  # under another name copies are not ranked by their lines: input order
            if (own and _same_name(path, known.path)) or _kept_before(path, known.path):
                # `analyze` keeps this file's copy: the other file is read again, without it
                self._drop(known)
            else:
                # read there, as `analyze` does; what this file holds after it is read here
                held_by = known
        part = _Part(path=path, identity=identity, header=header, compressed=_is_compressed(path), inode=inode)
        part.heads.append((1, run_key(header) or identity[0]))
        if held_by is None:
            for k in identity:
                self._parts[k] = part
        else:
            part.left_from, part.left_holder = 1, held_by.path
            part.holders.append(held_by)
        self._by_path[path] = part
        return part

    def _read_new(self, part: _Part) -> bytes | None:
        """The complete lines written to `part` since it was last read (b"" when none), and after them
        the file's last line short of its newline when the read reached the file's end (`_taken` reads
        it if it is a record); None when the file under its name is no longer the part's: another moved
        there (since `_follow` looked), or it was truncated or written over from its start (`cat new >
        file`), or a line read whole but for its newline went on."""
        if part.compressed:
            return self._read_compressed(part)
        with open(part.path, "rb") as f:
            st = os.fstat(f.fileno())
            if (st.st_dev, st.st_ino) != part.inode or st.st_size < part.offset:
                return None
            reads = []
            at_end = True
            if st.st_size > part.offset:
                f.seek(part.offset)
                reads.append(f.read(min(st.st_size - part.offset, READ_LIMIT)))
                # a line longer than one read: read on to its end (or to the end written so far), each
                # read searched once and all joined once (a line of L bytes is not copied L/READ_LIMIT times)
                while b"\n" not in reads[-1] and (more := f.read(READ_LIMIT)):
                    reads.append(more)
                # bytes after the last newline are the file's last line only at its end, not where a read stopped
                at_end = f.tell() == os.fstat(f.fileno()).st_size
            part.behind = not at_end
            # Its header, read after the lines: a rewrite writes its header first, so one unchanged
            # then vouches for the bytes read before it, even when the rewrite landed between the
            # round's look at the file and this read (read from the old offset: the new capture's
            # middle). Unchanged while the file's size and mtime are.
            if (st.st_size, st.st_mtime_ns) != part.checked:
                try:
                    same = read_open_header(part.path, f) == part.header
                except InputError:
                    same = False
                if not same:
                    return None
                part.checked = (st.st_size, st.st_mtime_ns)
        data = b"".join(reads)
        if part.unterminated and data:
            if not data.startswith(b"\n"):
                return None  # the line read as whole went on: `analyze` reads the line as it is now
            # the newline of the line read already: no line of its own
            part.unterminated = False
            part.offset += 1
            self.bytes_read += 1
            data = data[1:]
        return data if at_end else data[: data.rfind(b"\n") + 1]

    def _read_compressed(self, part: _Part) -> bytes:
        size = os.stat(part.path).st_size
        if size == part.seen_size:
            return b""
        part.seen_size = size
        out = bytearray()
        skipped = 0
        part.behind = False
        with open_stream(part.path) as raw:
            f = io.BufferedReader(raw) if isinstance(raw, CutStream) else raw
            for line in f:
                if skipped < part.lines:
                    skipped += 1
                    continue
                out += line  # a line without its newline ends the stream read so far: `_taken` judges it
                if len(out) >= READ_LIMIT:
                    part.seen_size = -1  # more to read next round
                    part.behind = True
                    break
        return bytes(out)

    def _read_round(self) -> set[ServerKey]:
        """Read every file's new complete lines; the server keys they touched (None for rows without one)."""
        self._round += 1
        files = self._files()
        self._follow(files)
        touched: set[ServerKey] = set()
        for path in files:
            touched |= self._read_file(path)
        if self._take_fuller_copies():
            # a part now read from its copy under another directory's name: that file is read from its
            # start, and the files whose copies the part left out (`_drop`) are read again, this round
            for path in files:
                touched |= self._read_file(path)
        return touched | self._dropped

    def _read_file(self, path: str) -> set[ServerKey]:
        """Read the new complete lines of the file at `path` (listed this round); the server keys they touched."""
        part = self._part_for(path)
        if part is None or part.path != path:
            return set()
        part.listed = self._round
        try:
            data = self._read_new(part)
            if data is None:
                # another file now: what was read of the part goes, and the file is read from its start
                self._drop(part)
                old, part = part, self._part_for(path)
                if part is not None and old.unterminated and part.identity == old.identity:
                    part.noted = old.lines - 1  # only its last line went on: the lines before are as noted
                data = self._read_new(part) if part is not None else None
        except OSError:
            return set()  # gone since it was listed (rotated, compressed, removed): the next round sees
        if not data:
            return set()  # None again: written over once more while read, the next round sees
        first = part.lines + 1
        taken = self._taken(part, data, first, *self._repeated(part, data, first))
        if taken is None:
            return set()  # only the start of a line so far
        data, facts = taken
        part.joined = facts.joined
        part.offset += len(data)
        part.lines += data.count(b"\n") + int(part.unterminated)
        self.bytes_read += len(data)
        part.grown = self.clock()
        latest = facts.messages.get_column("ts").max()
        if isinstance(latest, float):
            part.horizon = max(part.horizon, latest)
        connections = piece_connections(facts)
        self._identities.touch(connections)
        self._links.add(piece_sessions(facts))
        part.pieces.append(facts)
        if len(part.pieces) > MERGE_PIECES:
            part.pieces = [_merged(part.pieces)]
        self.records += facts.records
        for bad in facts.malformed:
            if bad.line > part.noted:
                self.notes.append(f"{display_name(bad.file)}:{bad.line}: {bad.reason}")
        # every server with a row in the piece, kept or condensed: a server whose new lines were
        # all condensed away (moved requests, dropped bookkeeping) has a new last-seen time, requests
        # rows without a key too (`None`): `analyze` reports their findings, so watch must as well
        servers = piece_servers(facts, connections)
        server = part.header.get("server")
        if not servers and isinstance(server, str):
            servers = {server}
        part.servers |= servers
        return servers

    def _count_copy(self, path: str, part: _Part) -> None:
        """Count the complete lines of `path`, a copy of `part` under its recorder file name not read
        (`_Copy`): of a plain file, those written since the last count (the file read from its start
        when it is another one now, or shorter); of a compressed one, all of them, decompressed, when
        its size or time changed."""
        copy = self._copies_of_name.get(path)
        if copy is None:
            copy = self._copies_of_name[path] = _Copy(path, part)
        copy.of, copy.round = part, self._round
        try:
            if _is_compressed(path):
                st = os.stat(path)
                if (st.st_size, st.st_mtime_ns) != copy.file:
                    copy.file = (st.st_size, st.st_mtime_ns)
                    with open_stream(path) as f:  # a cut stream ends where it stops making sense
                        copy.lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
                return
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if (st.st_dev, st.st_ino) != copy.file or st.st_size < copy.offset:
                    copy.file, copy.offset, copy.lines = (st.st_dev, st.st_ino), 0, 0
                f.seek(copy.offset)
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    copy.lines += chunk.count(b"\n")
                    copy.offset += len(chunk)
        except OSError:
            copy.round = 0  # gone since it was listed: as if not listed

    def _take_fuller_copies(self) -> bool:
        """Read each part from the copy under its recorder file name that `analyze` reads: the one
        holding the most complete lines, of those holding as many the first in input order
        (`analyzer.load.fullest_first`). A copy counted this round (`_count_copy`) that ranks before
        the part's file, read to its end, takes the part over: the part is dropped (its servers
        analyzed again, the files leaving out copies it held read again: `_drop`) and the copy read
        from its start in this round; the file read until then is counted as a copy from there on.
        Whether any part was taken over. Each round ranks the counts alone: no file is read for it."""
        best: dict[int, _Copy] = {}
        for path, copy in list(self._copies_of_name.items()):
            part = copy.of
            if copy.round != self._round or path in self._by_path or self._by_path.get(part.path) is not part:
                del self._copies_of_name[path]  # not listed, read now, or its part is no longer read
                continue
            other = best.get(id(part))
            if other is None or (copy.lines, other.path) > (other.lines, copy.path):
                best[id(part)] = copy
        taken = False
        for copy in best.values():
            part = copy.of
            if part.listed != self._round or part.behind:
                continue  # its file not listed, or not read to its end: its lines are not all counted
            if (copy.lines, part.path) <= (part.lines - int(part.unterminated), copy.path):
                continue
            del self._copies_of_name[copy.path]
            self._drop(part)
            taken = True
            now = self._part_for(copy.path)
            if now is None:
                continue  # not readable now: the file read until then is read again this round
            if part.inode is not None and os.path.exists(part.path):
                # the file read until then: its lines counted already (the last, whole but for its
                # newline, is not one of them until the newline comes)
                self._copies_of_name[part.path] = _Copy(
                    part.path,
                    now,
                    lines=part.lines - int(part.unterminated),
                    offset=part.offset,
                    file=part.inode,
                    round=self._round,
                )
        return taken

    def _repeated(
        self, part: _Part, data: bytes, first: int
    ) -> tuple[tuple[Repeated, ...], tuple[Head, ...], tuple[Refused, ...]]:
        """The lines of `data` (read from `part`, its first line numbered `first`) to leave out, the
        headers among its whole lines, and the lines of the captures refused: a capture part joined into
        the file (`cat a.jsonl b.jsonl > both.jsonl`) that another file holds, or this one before it, is
        left out up to the next header, as `analyze` leaves it out (`analyzer.load.repeats`). The first
        file in input order holding a part keeps it, as in `analyze`: a file showing a part that a file
        later in that order was read for takes it over, and that file is read again without it
        (`_kept_before`). A capture joined whose header names a format this erascope does not read is
        not read either, up to the next header (`analyzer.load.extract_file`), and is noted."""
        heads = tuple(h for h in heads_in(data[: data.rfind(b"\n") + 1], first) if h.line > 1)
        left: list[Repeated] = []
        refused: list[Refused] = []
        for h in heads:
            part.heads.append((h.line, h.key))
            if part.left_from is not None:
                left.append(Repeated(part.left_from, h.line - 1, part.left_holder))
                part.left_from = None
            if part.refused_from is not None:
                refused.append(replace(part.refused_from, last=h.line - 1))
                part.refused_from = None
            refusal = format_refusal(h.format)
            if refusal is not None:
                part.refused_from = Refused(h.line, h.line, *refusal)
                if h.line > part.noted:
                    why = refusal[0] if refusal[1] else f"not an erascope capture (its header {refusal[0]})"
                    where = f"{display_name(part.path)}:{h.line}"
                    self.notes.append(f"{where}: {why}; the capture joined there is not read")
                continue
            holder = self._parts.get(h.key) if h.key is not None else None
            if holder is not None and holder is not part and _kept_before(part.path, holder.path):
                # `analyze` keeps this file's copy: the other file is read again, without it (it comes
                # later in input order, so later in this round)
                self._drop(holder)
                holder = None
            if holder is not None:
                part.left_from, part.left_holder = h.line, holder.path
                if holder is not part:
                    part.holders.append(holder)
            elif h.key is not None:
                self._parts[h.key] = part
                part.keys.append(h.key)
        end = first + data.count(b"\n")
        if part.left_from is not None:  # to the last line read so far
            left.append(Repeated(part.left_from, end, part.left_holder))
        if part.refused_from is not None:
            refused.append(replace(part.refused_from, last=end))
        return tuple(left), heads, tuple(refused)

    @staticmethod
    def _taken(
        part: _Part,
        data: bytes,
        first: int,
        leave_out: tuple[Repeated, ...] = (),
        heads: tuple[Head, ...] = (),
        refused: tuple[Refused, ...] = (),
    ) -> tuple[bytes, FileFacts] | None:
        """What of `data` (read from `part`, its first line numbered `first`) is read now, and its
        facts, without the lines `leave_out` and `refused` (`_repeated`); None when nothing is. A last line without
        its newline is read when it reads as a record, as `analyze` reads it (captures/FORMAT.md: a
        line short only of its newline is written; no shorter prefix of a record's line reads as one);
        torn or still being written, it waits for its newline."""
        cut = data.rfind(b"\n") + 1
        part.unterminated = False
        line, last, options = data[cut:], first + data.count(b"\n"), LoadOptions()
        # Only an object can read as a record. The line is tested alone first, by the reading that
        # extracting it does (nothing paired or condensed, a few ms): a read that stopped after a `}`
        # inside a record then costs one extraction of the lines before it, not two (with the line,
        # then without it). A line that reads alone can still be refused beside others (a lone
        # surrogate beside a malformed line): the extraction with the lines before it decides, as before.
        if line.rstrip().endswith(b"}") and not malformed_lines(part.path, line + b"\n", last, part.header, options):
            facts = extract_lines(
                part.path, data + b"\n", first, part.header, options, part.joined, leave_out, heads, refused
            )
            if all(b.line != last for b in facts.malformed):
                part.unterminated = True
                return data, facts
        if cut == 0:
            return None
        facts = extract_lines(
            part.path, data[:cut], first, part.header, options, part.joined, leave_out, heads, refused
        )
        return data[:cut], facts

    # --- analyzing -------------------------------------------------------------------------------
    def poll(self) -> list[WatchEvent]:
        """One round: read what is new, analyze again the servers it touched (with those sharing a
        session with them, and those whose undecided probes are due), return the events not reported
        before, in capture-time order."""
        touched = self._read_round()
        # the dropped parts' servers: their results as of this round's rows, none when it has none left
        self._results.update(self._dropped, [], [])
        self._dropped = set()
        now = self.clock()
        due = {s for s, at in self._wake.items() if at <= now}
        for s in due:
            del self._wake[s]
        touched = self._links.closure(touched | due)
        if not touched:
            return []
        parts = sorted({id(p): p for p in self._parts.values() if p.servers & touched}.values(), key=lambda p: p.path)
        # only the touched servers' rows (and those without a key, which no round can carry)
        facts = [
            replace(piece) if p.servers <= touched else only_servers(piece, touched)
            for p in parts
            for piece in p.pieces
        ]
        self.analyzed = set()
        analysis = None
        if any(f.messages.height for f in facts):
            with contextlib.suppress(ErascopeError):  # headers alone: no traffic to analyze
                analysis = self.analyze_round(facts)
        if analysis is None:
            # no traffic (so far, or any more: a capture rewritten down to its header): nothing
            # reported of the touched servers before holds now
            self._results.update(touched, [], [])
            return self._new_events([], [], touched, set())
        self.analyzed = {*touched, *(v.server for v in analysis.servers)}
        self._results.update(self.analyzed, analysis.servers, analysis.findings)
        undecided = self._undecided(analysis, now)
        held = self._awaiting_answers(analysis, now)
        return self._new_events(analysis.findings, analysis.servers, touched, undecided, held)

    def analyze_round(self, facts: list[FileFacts]) -> Analysis:
        """The pipeline `analyze` runs, on a round's rows (`facts`), as every round runs it."""
        opts = AnalyzeOptions(probe_timeout=self.probe_timeout, rule_options=self.rule_options, jobs=1)
        # the rows stay in memory (they are the watcher's already): no temporary files to write and
        # scan again each round; and no client table, which watch does not show
        return analyze_facts(
            facts, self.paths, opts, None, clients=False, identities=self._identities, lexsort_view=True
        )

    def results(self) -> tuple[list[ServerVerdict], list[Finding]]:
        """Every server's verdict and findings so far: what `analyze` gives on the lines read (each
        server's as of the last round that analyzed it: none of its traffic has been read since)."""
        return self._results.verdicts(), self._results.findings()

    def _undecided(self, analysis: Analysis, now: float) -> set[str]:
        """Servers with a probe or initialize unanswered (or with garbage that is not its answer), its
        server's output on the connection not over (`analyzer.probes.output_ended`) and not yet past the
        timeout in its capture's time (`_Part.now`); each is scheduled to be analyzed again when the
        timeout will have passed."""
        waiting: set[str] = set()
        parts = self._parts_by_name()
        # a probe's garbage (a stdout line before its answer) is not its outcome while the answer can still
        # come within the timeout (`analyzer.probes`: rule 1 wins): until then it is as undecided as no
        # answer; so is a stdio death, which the answer still in the pipe can follow (`exit`)
        pending = pl.col("outcome").is_in([UNDECIDED_OUTCOME, GARBAGE_OUTCOME]) | (
            (pl.col("outcome") == DIED_OUTCOME) & pl.col("flow").is_null()
        )
        for frame in (analysis.probes, analysis.inits):
            unanswered = frame.filter(pending)
            # a server whose output is over can say nothing more: a banner, then death, is `broken` at
            # once; and garbage that is the request's answer (an HTTP body that is no JSON) is rule 1's
            # outcome already, which no answer read later replaces (an `initialize`'s on its own event
            # stream once the stream has ended: until then an undecodable end can still replace it)
            final = output_ended(analysis.messages, unanswered) | decided_by_answer(analysis.messages, unanswered)
            unanswered = unanswered.filter(~final).select("server", "file", "ts")
            waiting.update(
                server for server, file, ts in unanswered.iter_rows() if self._may_come(parts, server, file, ts, now)
            )
        return waiting

    def _parts_by_name(self) -> dict[str, _Part]:
        """The parts followed, by the file name rows carry (`display_name`): the rows read before a part
        was compressed name its plain file (`_moved`), those read since its copy. A row whose part is not
        found is judged by the wall clock (`_may_come`), which a capture's times need not be near (one
        replayed, or recorded where the clock is off): its probe decided too early, or held too long."""
        return {**self._moved, **{display_name(p.path): p for p in self._parts.values()}}

    def _may_come(self, parts: dict[str, _Part], server: str, file: str, ts: float | None, now: float) -> bool:
        """Whether the answer to what `file` holds at `ts` can still come: the timeout has not passed in
        the capture's time (`_Part.now`). If so, `server` is analyzed again once it will have passed.
        A request without a time (`ts` missing or null: an edited capture) has no timeout to wait for
        (`analyzer.probes`: its answer is never late): what has been read decides it now, and an answer
        read later changes that as it changes `analyze`'s outcome."""
        if ts is None:
            return False
        part = parts.get(file)
        left = ts + self.probe_timeout - (part.now(now) if part is not None else now)
        if left > 0:
            self._wake[server] = max(self._wake.get(server, 0.0), now + left + 0.01)
        return left > 0

    def _awaiting_answers(self, analysis: Analysis, now: float) -> set[tuple[str, str | None, str | None]]:
        """The (rule, server, client) of stale-era findings whose evidence holds a modern request not
        answered yet and not yet past the probe timeout in its capture's time: a modern request the
        server answers with a result does not count for stale-era (case (c)), so until its answer can
        have come the finding is as undecided as an unanswered probe. Each such server is analyzed
        again when the timeout will have passed; an answer later still is counted then, as `analyze`
        counts it (the finding withdrawn)."""
        stale = [f for f in analysis.findings if f.rule == STALE_ERA]
        if not stale or analysis.rule_context is None:
            return set()
        lines = {(e.file, e.line) for f in stale for e in f.evidence}
        wanted = pl.DataFrame(
            {"file": [f for f, _ in lines], "line": [n for _, n in lines]},
            schema={"file": pl.String(), "line": pl.Int64()},
        )
        ctx = analysis.rule_context
        modern = (
            ctx.requests.lazy()
            .select(
                pl.col("file").cast(pl.String),
                pl.col("line").cast(pl.Int64),
                pl.col("capture").cast(pl.String),
                "seq",
                "ts",
                "server",
                modern=request_style() == "modern",  # as stale-era reads it
            )
            .join(wanted.lazy(), on=["file", "line"], how="semi")
            .filter("modern")
            .collect()
        )
        if modern.is_empty():
            return set()
        answered = (
            ctx.responses.lazy()
            .select(pl.col("capture").cast(pl.String), "seq")
            .join(modern.lazy().select("capture", "seq"), on=["capture", "seq"], how="semi")
            .collect()
        )
        parts = self._parts_by_name()
        unanswered = modern.join(answered, on=["capture", "seq"], how="anti").select("file", "line", "ts", "server")
        pending = {
            (file, line)
            for file, line, ts, server in unanswered.iter_rows()
            if self._may_come(parts, server, file, ts, now)
        }
        return {(f.rule, f.server, f.client) for f in stale if any((e.file, e.line) in pending for e in f.evidence)}

    def _new_events(
        self,
        findings: list[Finding],
        servers: list[Any],
        touched: set[str],
        undecided: set[str],
        held: Collection[tuple[str, str | None, str | None]] = (),
    ) -> list[WatchEvent]:
        events: list[WatchEvent] = []
        timelines = {v.server: v.timeline for v in servers}
        for server in sorted(touched - undecided, key=str):
            reported = self._eras.setdefault(server, {})
            timeline: set[tuple[str, tuple[str, int], str | None]] = set()
            previous = None
            for t in timelines.get(server, ()):
                key = (t.era, _same_data(t.evidence), previous)
                timeline.add(key)
                if key not in reported:
                    reported[key] = WatchEvent(ERA, server, t.ts, (t.evidence,), era=t.era, previous=previous)
                    events.append(reported[key])
                previous = t.era
            # a file read later moved the change (a capture copied in late holds it earlier), put
            # another era before it, or took the server's traffic away (a capture emptied): what was
            # reported is no longer analyze's
            for key in [k for k in reported if k not in timeline]:
                events.append(replace(reported.pop(key), kind=WITHDRAWN))
        # a finding held (`_awaiting_answers`) is neither reported nor withdrawn this round
        shown = [
            f
            for f in findings
            if f.server in touched and f.server not in undecided and (f.rule, f.server, f.client) not in held
        ]
        current = {(f.rule, f.server, f.client, _first_line(f)) for f in shown}
        parts = None  # `_parts_by_name`, once a finding is reported
        for f in shown:
            reported = self._findings.setdefault((f.rule, f.server, f.client), {})
            first, evidence = _first_line(f), tuple(_same_data(e) for e in f.evidence)
            before = reported.get(first)
            if before is not None and before.evidence == evidence:
                continue
            if parts is None:
                parts = self._parts_by_name()
            # by file and line as before (a file written over at the same lines), and as lines of the
            # capture part, which another copy holds too
            lines = frozenset(evidence).union(self._part_line(parts, e) for e in f.evidence)
            replaces = None
            if before is None:
                gone = {k: r for k, r in reported.items() if (f.rule, f.server, f.client, k) not in current}
                replaces = _moved(gone, lines, reported)
            kind = FINDING_UPDATE if before is not None or replaces is not None else FINDING
            reported[first] = _Reported(evidence, f, lines)
            events.append(
                WatchEvent(
                    kind,
                    f.server,
                    f.ts,
                    f.evidence,
                    rule=f.rule,
                    severity=f.severity.value,
                    message=f.message,
                    client=f.client,
                    replaces=replaces,
                )
            )
        # a server analyzed whole this round without a finding reported before (not one whose first
        # line moved, taken above): more traffic undid it (probe-storm's ratios fall as real requests come)
        for (rule, server, client), reported in self._findings.items():
            if server not in touched or server in undecided or (rule, server, client) in held:
                continue
            for first in [k for k in reported if (rule, server, client, k) not in current]:
                was = reported.pop(first).finding
                events.append(
                    WatchEvent(
                        WITHDRAWN,
                        server,
                        was.ts,
                        was.evidence,
                        rule=rule,
                        severity=was.severity.value,
                        message=was.message,
                        client=client,
                    )
                )
        events.sort(key=lambda e: (e.ts if e.ts is not None else float("inf"), e.kind, e.server))
        return [self._named_now(e) for e in events] if self._moved else events

    @staticmethod
    def _part_line(parts: dict[str, _Part], e: Evidence) -> _Line:
        """The line `e` names as a line of its capture part: the part's key (its header's run, as
        `analyzer.load.run_key`, the key its copies share) and the line's number in it. A copy of
        the part in another file (another name, a file of joined captures, the copy under the
        recorder's name `analyze` keeps) holds that line too, at its own number: a finding read
        from there is the one reported from here (`_moved`). A line of a file not followed is its
        file and number, as `_same_data`."""
        part = parts.get(e.file)
        if part is None or not part.heads:
            return _same_data(e)
        at = bisect.bisect_right(part.heads, e.line, key=lambda h: h[0]) - 1
        if at < 0:
            return _same_data(e)
        line, key = part.heads[at]
        return (key if key is not None else (strip_compression(e.file), line)), e.line - line

    def _named_now(self, event: WatchEvent) -> WatchEvent:
        """`event` with each evidence line named by the file its part is in now: lines read from a
        plain part that has since been compressed (the plain file removed) are in the copy, at the same
        line numbers, and `analyze` names them there. Only events printed anyway are renamed: the move
        alone is no event (it would be one per finding per rotation, with nothing new to act on)."""

        def now(e: Evidence) -> Evidence:
            part = self._moved.get(e.file)
            return e if part is None else replace(e, file=display_name(part.path))

        return replace(
            event,
            evidence=tuple(now(e) for e in event.evidence),
            replaces=None if event.replaces is None else now(event.replaces),
        )

    def run(self, interval: float, stop: threading.Event) -> Iterator[list[WatchEvent]]:
        """Poll every `interval` seconds until `stop` is set; yields each round's events."""
        while not stop.is_set():
            started = time.monotonic()
            yield self.poll()
            stop.wait(max(0.0, interval - (time.monotonic() - started)))


def _merged(pieces: list[FileFacts]) -> FileFacts:
    """One part's consecutive pieces as one, paired across them as `combine` pairs rotated parts
    (and as `extract_file` pairs the chunks of one file)."""
    copies = [replace(p) for p in pieces]
    combine(copies)  # pairs the copies' rows across pieces, in place
    frames = [c.messages for c in copies if c.messages.height]
    first = copies[0]
    return replace(
        first,
        messages=pl.concat(frames, how="vertical", rechunk=True) if frames else first.messages,
        traffic=merge([c.traffic for c in copies]),
        records=sum(c.records for c in copies),
        malformed=[b for c in copies for b in c.malformed],
        counts=dict(sum((Counter(c.counts) for c in copies), Counter())),
    )


def _never_followed(path: str) -> str | None:
    """Why watch will never follow the regular file `path`, whose first line is not an erascope
    header (a HAR file, a dump, a log, anything else: `analyze`'s words); None while it may still
    become a capture: a recorder creates a part, then writes its header, so a file empty or with its
    first line not complete yet is looked at again. Raises `InputError`, `OSError`."""
    first = first_line(path)
    if cut_header(first):
        return None  # empty, or a header being written
    kind = foreign_kind(path)
    if kind is not None:
        return f"{FOREIGN[kind]}: {ANALYZE_THEM}"
    if not first.endswith(b"\n"):
        return None  # what its first line is cannot be told before it ends
    return not_a_capture(path, first)


def _same_name(path: str, other: str) -> bool:
    """Whether two files are copies under one name (a part and its compressed copy, or copies under
    the recorder's name elsewhere, which `analyze` ranks by their lines: `analyzer.load.fullest_first`)."""
    return os.path.basename(strip_compression(path)) == os.path.basename(strip_compression(other))


def _kept_before(path: str, other: str) -> bool:
    """Whether `analyze` keeps the copy of a capture part in the file at `path` rather than the one in
    `other`, read so far: the first in input order (`analyzer.load.repeats`, in sorted order as `_files`
    lists them). Copies under one name are not ranked here (`_same_name`, `Watcher._part_for`): a part
    and its compressed copy are one part; in two directories, under a recorder's name by their lines
    (`Watcher._take_fuller_copies`), under another by input order. One whose file is gone stays,
    keeping what it contributed (`Watcher._follow`)."""
    return not _same_name(path, other) and path < other and os.path.exists(other)


def _is_compressed(path: str) -> bool:
    return strip_compression(path) != path


def at_or_above(event: WatchEvent, threshold: Severity | None) -> bool:
    """The event is a finding at or above `threshold` (never, without one; a withdrawn one is not)."""
    return (
        threshold is not None
        and event.kind in (FINDING, FINDING_UPDATE)
        and event.severity is not None
        and Severity(event.severity).rank >= threshold.rank
    )
