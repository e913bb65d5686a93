"""`analyze(paths, options) -> Analysis`: the whole offline pipeline, without any output.

find inputs → `extract_file` per file → `combine` (pairing) → probe and initialize outcomes →
per-server era verdicts → findings (`analyzer.rules.run_rules`) → client table (when available).
The rules and the client table share one `RuleContext` (`Analysis.rule_context`). The rows that
grow with the input and are read only near the end (the requests condensing moves out, the rules'
request view) wait in the analysis' temporary files (`analyzer.spill`, `Analysis.spill`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Final

import polars as pl

from addon import format as fmt
from addon.errors import ErascopeError
from addon.memory import release_freed
from analyzer.clients import client_table
from analyzer.condense import Traffic
from analyzer.eras import DEFAULT_WINDOW, ServerVerdict, server_verdicts
from analyzer.findings import Finding
from analyzer.identity import connection_identities
from analyzer.load import (
    BadLine,
    FileFacts,
    LoadOptions,
    combine,
    display_name,
    extract_files,
    find_inputs,
    fullest_first,
    listed,
)
from analyzer.probes import DEFAULT_PROBE_TIMEOUT, classify_inits, classify_probes, mark_cross_era
from analyzer.rules import RuleContext, RuleOptions, run_rules, stages_together
from analyzer.selection import Selection
from analyzer.sources import location
from analyzer.spill import Spill

ProgressCallback = Callable[[int, int, str], None]
"""Called after each file with (files done, files total, file just read)."""


@dataclass
class AnalyzeOptions:
    """Options of one analysis run (CLI flags map onto these)."""

    probe_timeout: float = DEFAULT_PROBE_TIMEOUT
    """Seconds after which an unanswered probe counts as `no-answer`."""
    inconsistency_window: float = DEFAULT_WINDOW
    """Seconds within which a verdict flipping back counts as `inconsistent`."""
    rule_options: dict[str, Any] = field(default_factory=dict)
    """Thresholds for the rules (`analyzer.rules.RuleOptions` field names)."""
    load: LoadOptions = field(default_factory=LoadOptions)
    progress: ProgressCallback | None = None
    jobs: int | None = None
    """Files read in parallel (threads); None: one per core. Reports do not depend on it."""
    spill_dir: str | None = None
    """Where the temporary files of the analysis go (`analyzer.spill`); None: the system's (`TMPDIR`)."""
    strict: bool = False
    """Stop with an error when any input file could not be read or was refused (an input error or a
    skipped file), instead of analyzing the others and noting it."""
    since: datetime | None = None
    """Analyze only records at or after this moment (`analyzer.selection`; a time without a zone is UTC)."""
    until: datetime | None = None
    """Analyze only records before this moment (exclusive; a time without a zone is UTC)."""
    servers: tuple[str, ...] | None = None
    """Analyze only the traffic of these server keys; None: every server."""
    verify: bool = False
    """Also check the hash chains of the captures read, as `erascope verify` does (`Inputs.verification`)."""
    chain_key: bytes | None = None
    """With `verify`: the key the recorders were given (`addon.chain.load_key`), as `verify --key`."""

    @property
    def selection(self) -> Selection:
        """`since`, `until` and `servers` as the loader applies them."""
        return Selection(self.since, self.until, self.servers)


@dataclass
class Inputs:
    """What was read: the accounting the report shows under "inputs"."""

    files: list[str]
    """Capture files read (paths as given/found), sorted."""
    records: int
    """Well-formed records read (hash chains' `part-end` records left out: `load._records`)."""
    malformed: list[BadLine]
    torn: list[BadLine]
    skipped: list[tuple[str, str]]
    """(file, reason) for files that are not erascope captures or not regular files (FIFOs, dangling links),
    and for the lines of a file read that a header naming no erascope format starts (`FileFacts.refused`)."""
    lost: int = 0
    """Records the recorders reported lost (capture-error records)."""
    errors: list[tuple[str, str]] = field(default_factory=list)
    """(file, error) for files that could not be read (gone, unreadable, an unknown format), and for the
    captures joined in a file read whose format major is unknown (`FileFacts.refused`): input errors."""
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    """(file, file it repeats) for files left out because the same capture part was read from another file."""
    repeated: list[tuple[str, int, int, str]] = field(default_factory=list)
    """(file, first line, last line, file read for them): a capture part joined into a file and left
    out of it, read from another file (`analyzer.load.repeats`)."""
    undecodable: list[tuple[str, int, int]] = field(default_factory=list)
    """(file, first line, count) of HTTP bodies kept as they came: they do not decode with their
    `Content-Encoding`, so what they say is not classified."""
    chained: int = 0
    """Files that end with a hash chain's closing record (`part-end`): `erascope verify` checks them;
    the analysis reads them like any other and does not."""
    units: dict[str, str] = field(default_factory=dict)
    """File → what its locations count, for files not located by line: `entry` (HAR), `flow` (mitmproxy
    dumps). Evidence and notes in them read `file#entry=N`, `file#flow=N` (`analyzer.sources.location`)."""
    lines_from: dict[str, str] = field(default_factory=dict)
    """File → the path its lines were read from, for the captures this analysis read line by line
    itself: the only files a report may open again (an archive's entries name files it never read)."""
    rows_from: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """File → (its rows' `file`, the archive parts holding them), for archived captures: a report
    reads their messages back from the archive, the input this analysis read."""
    verification: ChainCheck | None = None
    """With `AnalyzeOptions.verify`: what checking the inputs' hash chains found; None: not asked."""
    foreign_from: dict[str, tuple[str, str]] = field(default_factory=dict)
    """File → (the path it was read from, `FileFacts.digest` in hex: the accounting stays JSON), for the
    HAR files and dumps this analysis read itself: a report converts them again for the records it
    cites, and only while the file still holds what was read (its entry and flow numbers are those of
    that content)."""


@dataclass(frozen=True)
class ChainFile:
    """A capture file `--verify` did not find verified: what `erascope verify` says of it."""

    file: str
    status: str
    """An `analyzer.verify.Status` value other than `verified`."""
    detail: str
    findings: int = 0
    """Breaks found in its chain (`verify`'s findings); the first is `first`."""
    first: tuple[int | None, str, str] | None = None
    """(line, kind, message) of its first break."""


@dataclass
class ChainCheck:
    """The hash chains of the captures an analysis read, checked as `erascope verify` checks them
    (`analyzer.verify`): the report says which inputs were proven unaltered."""

    keyed: bool
    """Checked with a key (`--key`): unkeyed chains and files without one failed."""
    counts: dict[str, int]
    """Files per `analyzer.verify.Status` value, only those any file has."""
    files: list[ChainFile]
    """Every file checked and not `verified`, in the order of the inputs."""
    not_checked: list[tuple[str, str]]
    """(file, why) for the inputs read that carry no chain to check: HAR files, mitmproxy dumps, archives."""
    notes: list[str]
    """What `verify` says of the inputs that is no break (parts absent before the first one present, …)."""
    broken: bool = False
    """A chain is broken or a compressed part was cut: what `erascope verify` exits 1 for."""
    unchecked: bool = False
    """A capture could not be checked (keyed with a key not given, unreadable): `verify`'s exit 2."""


@dataclass
class Analysis:
    """The result of `analyze`: frames per `analyzer.schema`, verdicts, findings."""

    inputs: Inputs
    messages: pl.DataFrame
    probes: pl.DataFrame
    inits: pl.DataFrame
    servers: list[ServerVerdict]
    findings: list[Finding] = field(default_factory=list)
    clients: pl.DataFrame | None = None
    traffic: Traffic | None = field(default=None, repr=False, compare=False)
    """What condensing dropped from `messages` (`analyzer.condense`); None when nothing was."""
    rule_context: Any = field(default=None, repr=False, compare=False)
    """The rules' `RuleContext` of this analysis, shared with the client table (derived frames computed once)."""
    selection: Selection | None = None
    """The slice of the traffic analyzed (`--since`, `--until`, `--server`); None: all of it."""
    spill: Spill | None = field(default=None, repr=False, compare=False)
    """The temporary files the rule context's request view is read from (`analyzer.spill`): removed by
    `close`, or when the analysis is garbage-collected or the interpreter exits."""

    def close(self) -> None:
        """Remove the analysis' temporary files. Its frames, verdicts and findings stay; running the
        rules again on its `rule_context` does not work afterwards."""
        if self.spill is not None:
            self.spill.close()

    @property
    def message_count(self) -> int:
        """Message rows read, the condensed ones included."""
        return self.traffic.rows if self.traffic is not None else self.messages.height


def _inputs(facts: list[FileFacts]) -> Inputs:
    """The input accounting, every file named as the frames name it (`display_name`), so that the
    files of the inputs and those of the evidence are one list."""
    read = [f for f in facts if f.was_read]
    name = display_name

    def bad(b: BadLine) -> BadLine:
        return replace(b, file=name(b.file), reason=name(b.reason))

    return Inputs(
        files=sorted(name(f.file) for f in read),
        records=sum(f.records for f in read),
        malformed=sorted(bad(b) for f in read for b in f.malformed),
        torn=sorted(bad(f.torn) for f in read if f.torn is not None),
        skipped=_by_line(
            [(name(f.file), 0, name(f.skipped)) for f in facts if f.skipped is not None]
            # the lines a joined header naming no erascope format starts are no capture, as such a file is none
            + [(name(f.file), r.first, name(r.note(f.file))) for f in read for r in f.refused if not r.error]
        ),
        lost=sum(f.lost for f in read),
        errors=_by_line(
            [(name(f.file), 0, name(f.error)) for f in facts if f.error is not None]
            # a capture joined whose major this erascope does not know is refused, as such a file is
            + [(name(f.file), r.first, name(r.note(f.file))) for f in read for r in f.refused if r.error]
        ),
        duplicates=sorted((name(f.file), name(f.duplicate_of)) for f in facts if f.duplicate_of is not None),
        repeated=sorted((name(f.file), r.first, r.last, name(r.file)) for f in read for r in f.repeated),
        undecodable=sorted((name(f.file), f.undecodable_line or 0, f.undecodable) for f in read if f.undecodable),
        units={name(f.file): f.unit for f in read if f.unit != "line"},
        lines_from={name(f.file): f.file for f in read if f.unit == "line" and not f.archived},
        rows_from={name(f.file): (f.file, f.parts) for f in read if f.archived},
        foreign_from={name(f.file): (f.file, f.digest.hex()) for f in read if f.unit != "line" and not f.archived},
        chained=sum(1 for f in read if f.counts.get(fmt.PART_END)),
    )


def _by_line(notes: list[tuple[str, int, str]]) -> list[tuple[str, str]]:
    """(file, note) pairs in the order of their files, then of the lines they name (0: the whole file):
    sorted as text, a capture refused on line 139 came before one on line 29."""
    return [(file, note) for file, _, note in sorted(notes)]


def _errors(inputs: Inputs) -> list[str]:
    """The files that could not be read, each with why (an error names its file already)."""
    return [error for _, error in inputs.errors]


def _skipped(inputs: Inputs) -> list[str]:
    """The files skipped, each with why."""
    return [f"{f}: {why}" for f, why in inputs.skipped]


def analyze(paths: Iterable[str | Path], options: AnalyzeOptions | None = None) -> Analysis:
    """Analyze capture files, directories and globs.

    Raises `ErascopeError` for missing/unreadable paths, unknown format versions, when no capture
    record at all was found, and when the temporary files cannot be written (`analyzer.spill`).
    """
    opts = options or AnalyzeOptions()
    path_list = [str(p) for p in paths]
    files = fullest_first(find_inputs(path_list))
    if not files:
        where = ", ".join(path_list) if path_list else "(no paths)"
        raise ErascopeError(
            f"no *.jsonl files under {where} (nor *.jsonl.gz, *.jsonl.zst;"
            " HAR files and mitmproxy dumps are read when named, not searched for)"
        )
    # The rows condensing moves out wait on disk until the rules' first frames read them, and the
    # request view the rules read lives there too (`Spill`): files that go with the analysis.
    spill = Spill(opts.spill_dir)
    try:
        analysis = _analyze(files, path_list, opts, spill)
    except BaseException:
        spill.close()
        raise
    analysis.spill = spill
    analysis.selection = None if opts.selection.everything else opts.selection
    weakref.finalize(analysis, spill.close)
    return analysis


def _analyze(files: list[str], path_list: list[str], opts: AnalyzeOptions, spill: Spill) -> Analysis:
    load = opts.load if opts.selection.everything else replace(opts.load, selection=opts.selection)
    facts: list[FileFacts] = extract_files(files, load, jobs=opts.jobs, progress=opts.progress, spill=spill)
    # before `analyze_facts` takes the facts over; the chains cover whole files, whatever was selected
    checked = check_chains(facts, path_list, opts.chain_key) if opts.verify else None
    analysis = analyze_facts(facts, path_list, opts, spill)
    analysis.inputs.verification = checked
    return analysis


_NO_CHAIN: Final = {
    "entry": "a HAR file: it carries no hash chain",
    "flow": "a mitmproxy dump: it carries no hash chain",
}
"""Why an input read that is no capture is not checked, by `FileFacts.unit`."""


def check_chains(facts: list[FileFacts], path_list: list[str], key: bytes | None) -> ChainCheck:
    """The hash chains of the captures `facts` read or left out as copies of them, checked by
    `analyzer.verify` (their links between rotated parts too); the inputs read that carry none are
    named as not checked."""
    # imported here: the recorders' chain and retention modules stay out of an analysis not asked to verify
    from analyzer.archive import is_archive
    from analyzer.verify import Status, describe, verify

    read = [f for f in facts if f.was_read]
    # a copy left out as the same capture as a file read is checked too: it was handed in, and an
    # edited copy beside an intact one is what an auditor is asked to find
    given = [f for f in facts if f.was_read or f.duplicate_of is not None]
    captures = [f.file for f in given if f.unit == "line" and not f.archived]
    not_checked = [(display_name(f.file), _NO_CHAIN.get(f.unit, "no capture")) for f in read if f.unit != "line"]
    if any(f.archived for f in read):
        why = "an archive keeps no hash chains: check its captures with `erascope verify` before `compact`"
        not_checked.extend((display_name(p), why) for p in path_list if is_archive(p))
    if not captures:
        return ChainCheck(keyed=key is not None, counts={}, files=[], not_checked=not_checked, notes=[])
    result = verify(captures, key=key)
    files = []
    for r in result.files:
        if r.status is Status.VERIFIED:
            continue
        findings = [f for c in r.units for f in c.findings]
        first = (findings[0].line, findings[0].kind.value, display_name(findings[0].message)) if findings else None
        files.append(ChainFile(display_name(r.file), r.status.value, display_name(describe(r)), len(findings), first))
    return ChainCheck(
        keyed=key is not None,
        counts={status: n for status, n in result.counts().items() if n},
        files=files,
        not_checked=not_checked,
        notes=[display_name(note) for note in result.notes],
        broken=result.tampered or bool(result.cut),
        unchecked=bool(result.errors),
    )


def analyze_facts(
    facts: list[FileFacts],
    path_list: list[str],
    opts: AnalyzeOptions,
    spill: Spill | None,
    *,
    clients: bool = True,
    identities: Callable[[pl.LazyFrame, Traffic, Any], pl.DataFrame] | None = None,
    lexsort_view: bool = False,
) -> Analysis:
    """The pipeline after reading: `facts` (per file, as `extract_files` returns them, in input order)
    to the analysis. `analyzer.watch` calls it with facts it read a piece at a time.

    Takes `facts` over: the list is emptied, so the rows it holds go as soon as the rules read them.
    `spill` None keeps the rules' request view in memory; `clients=False` leaves out the client table
    (`Analysis.clients` stays None), which `watch` does not show. `identities`, when given, computes
    the connections' client identities in place of `connection_identities` (`RuleContext.identities`);
    `lexsort_view` sorts the rules' request view with numpy (`RuleContext.lexsort_view`).
    """
    inputs = _inputs(facts)
    if opts.strict and (inputs.errors or inputs.skipped):
        not_read = listed(_errors(inputs) + _skipped(inputs))
        raise ErascopeError(f"inputs not read, in whole or in part (--strict): {not_read}")
    headers = sum(f.counts.get("header", 0) for f in facts if f.was_read)
    if inputs.records - headers <= 0:  # headers alone hold no traffic
        where = ", ".join(path_list) if path_list else "(no paths)"
        notes = []
        # what was wrong with the lines, else "no records" hides that each of them was refused
        def at(b: BadLine) -> str:
            return location(b.file, b.line, inputs.units.get(b.file, "line"))

        if inputs.malformed:
            bad = [f"{at(b)}: {b.reason}" for b in inputs.malformed]
            notes.append(f"{len(bad)} malformed line(s), skipped: {listed(bad)}")
        notes.extend(f"torn last line: {at(b)}: {b.reason}" for b in inputs.torn)
        if inputs.errors:
            notes.append(f"{len(inputs.errors)} file(s) could not be read: {listed(_errors(inputs))}")
        if inputs.skipped:
            notes.append(f"{len(inputs.skipped)} file(s) skipped: {listed(_skipped(inputs))}")
        raise ErascopeError(f"no capture records found in {where}" + "".join(f" ({n})" for n in notes))
    loaded = combine(facts)
    messages, traffic = loaded.messages, loaded.traffic
    # The per-file facts are accounted for (`inputs`) and their rows combined: let them go before
    # the later stages, and hand what they and the reading freed back to the system (`release_freed`).
    facts.clear()
    del facts, loaded
    release_freed()
    together = stages_together(traffic.requests)
    with ThreadPoolExecutor(max_workers=2 if together else 1) as pool:
        # the connections' client identities (`RuleContext.conn_clients`), read from the same frames
        # the context reads them from, beside the probes' and initializes' outcomes
        identified = pool.submit(identities or connection_identities, messages.lazy(), traffic, traffic.requests)
        probed = pool.submit(classify_probes, messages, opts.probe_timeout, traffic.requests)
        initialized = pool.submit(classify_inits, messages, traffic.requests)
        conn_clients, probes, inits = identified.result(), probed.result(), initialized.result()
    probes = mark_cross_era(probes, inits)
    analysis = Analysis(inputs=inputs, messages=messages, probes=probes, inits=inits, servers=[], traffic=traffic)
    # one context for the verdicts, the rules and the client table: its derived frames (the
    # connections' client identities first) are computed once
    analysis.rule_context = context = RuleContext.from_analysis(analysis, RuleOptions(), spill)
    if identities is not None:
        context.identities = identities
    context.lexsort_view = lexsort_view
    context.conn_clients = conn_clients  # the cached property's value, computed above
    # The verdicts read the connections and servers of `traffic`, never the rows condensing moved
    # out: given a copy without them, they do not keep those rows from going in `release_moved`.
    facts_only = replace(traffic, requests=None, answers=Traffic().answers)
    verdicts = partial(
        server_verdicts, messages, probes, inits, opts.inconsistency_window, facts_only, identities=conn_clients
    )
    # The rows condensing moved out are read only by the context's first frames: held only through
    # the context, each goes as soon as it is read. After this, the spilled files read are the
    # request view's.
    del traffic
    analysis.traffic = None
    if together:
        with ThreadPoolExecutor(max_workers=1) as beside:
            # the context's answers, then the verdicts, beside its request view and probe rows, which
            # `release_moved` then finds built
            answered = beside.submit(getattr, context, "responses")
            decided = beside.submit(verdicts)
            _ = context.requests, context.probe_rows
            answered.result()
            analysis.traffic = context.release_moved()
            analysis.servers = decided.result()
    else:
        analysis.servers = verdicts()
        analysis.traffic = context.release_moved()
    analysis.findings = run_rules(analysis, opts.rule_options)
    if clients:
        analysis.clients = client_table(analysis)
    return analysis
