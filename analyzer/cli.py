"""The `erascope` command: a thin typer layer over the library.

Library code raises `ErascopeError` and never prints; this module formats output, maps errors to
exit statuses (0 ok, 1 findings at or above `--fail-on`, 2 usage or input errors) and owns the
terminal. Every command's help carries an example.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from addon.errors import ErascopeError
from analyzer.cli_values import PlainArgument, plain_values
from analyzer.terminal import json_visible, visible


class _ArgumentByName(PlainArgument):
    """An argument whose help shows its metavar only, never the Python type typer derives."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _plain_help(params: list[Any]) -> list[Any]:
    # typer's help has a type column (`<bool>`, `<list[str]>`); every valued option here names its
    # value with a metavar, flags take no value, and arguments show their metavar in the name column
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
        elif type(param) is TyperArgument:
            param.__class__ = _ArgumentByName
    return params


def _flowing(help_text: str | None) -> str | None:
    """A command's docstring with each prose paragraph on one line, for the terminal to wrap.

    typer keeps the source's line breaks after the first paragraph: at 80 columns every other line
    stopped half way. An indented paragraph (an example command) keeps its lines."""
    if not help_text:
        return help_text
    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    return "\n\n".join(p if p.startswith(" ") else " ".join(p.split("\n")) for p in paragraphs)


class _Command(TyperCommand):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = _flowing(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return plain_values(_plain_help(super().get_params(ctx)))  # plain values: no pydantic (issue 20)


class _Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return plain_values(_plain_help(super().get_params(ctx)))


app = typer.Typer(
    name="erascope",
    help="Record real MCP traffic and audit how clients probe server eras.",
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
record_app = typer.Typer(help="Record MCP traffic into erascope captures.", cls=_Group, no_args_is_help=True)
app.add_typer(record_app, name="record")


class ReportFormat(StrEnum):
    """`analyze --format` (any case); the renderers are `analyzer.report.FORMATS`, and `analyzer.html_report`."""

    TEXT = "text"
    JSON = "json"
    MARKDOWN = "markdown"
    HTML = "html"


class FailOn(StrEnum):
    """`analyze --fail-on` (any case): a severity, or never."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    NEVER = "never"


class Bodies(StrEnum):
    """`record http --bodies` (any case); the policies are `addon.redact.BODY_POLICIES`."""

    FULL = "full"
    METADATA = "metadata"


CaptureDirOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        metavar="DIR",
        help="Capture directory; default: $ERASCOPE_CAPTURE_DIR, else erascope/captures in $XDG_STATE_HOME"
        " (default ~/.local/state).",
    ),
]
"""`--out` of every `record` command."""

# Rotation and retention, shared by both `record` commands (addon/retention.py).
RotateSizeOption = Annotated[
    str, typer.Option("--rotate-size", metavar="SIZE", help="Start a new capture part past this size (e.g. 256m).")
]
RotateAgeOption = Annotated[
    str | None,
    typer.Option("--rotate-age", metavar="DURATION", help="Also start a new part when it is this old (e.g. 1h, 1d)."),
]
CompressOption = Annotated[
    bool, typer.Option("--compress", help="Compress closed parts to *.jsonl.zst (analyze reads them as they are).")
]
KeepBytesOption = Annotated[
    str | None,
    typer.Option(
        "--keep-bytes",
        metavar="SIZE",
        help="Remove the oldest closed parts while the capture directory holds more (e.g. 10g); open parts stay.",
    ),
]
KeepDaysOption = Annotated[
    float | None,
    typer.Option("--keep-days", metavar="DAYS", help="Remove closed parts whose last record is older than DAYS."),
]
ProbeTimeoutLiveOption = Annotated[
    float,
    typer.Option(
        "--probe-timeout",
        metavar="SECONDS",
        help="Seconds a client waits for a probe's answer, for the live probe outcomes (as `analyze"
        " --probe-timeout`).",
    ),
]
WaitForWorkersOption = Annotated[
    float,
    typer.Option(
        "--wait-for-workers",
        metavar="SECONDS",
        help="With --scheduler: how long to wait for the scheduler to have a worker, at the start and whenever"
        " it has none left (or for a silent scheduler to answer, at any step; at least 10), before giving up with"
        " an error.",
    ),
]
WAIT_FOR_WORKERS_S = 60.0  # analyzer.cluster.WAIT_FOR_WORKERS_S, not imported: it brings polars and Dask along
ChainKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--key",
        metavar="FILE",
        help="Key the capture's hash chain (keyed BLAKE3) with this file's bytes (>= 16), for `erascope verify --key`.",
    ),
]
"""`--key` of every `record` command."""


def _show_version(value: bool) -> None:
    if value:
        from addon.version import tool_version  # not addon.writer: the recorder's imports

        typer.echo(f"erascope {tool_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_show_version, help="Print erascope's version and exit."),
    ] = False,
) -> None:
    """Record real MCP traffic and audit how clients probe server eras."""


def _fail(exc: ErascopeError) -> typer.Exit:
    # errors quote file names and paths, which whoever writes into a capture directory chooses
    typer.echo(f"erascope: error: {visible(str(exc))}", err=True)
    return typer.Exit(code=exc.exit_code)


@contextlib.contextmanager
def _to_stdout() -> Iterator[None]:
    """A command's output to standard output: a write that fails (a full disk behind `> report`) is an
    error named as such, exit 2 as for `--output`. A reader gone (`| head`) stays click's: exit 1."""
    if sys.stdout is None:  # fd 1 closed at start (`>&-`): click's echo would drop the report and exit 0
        raise _fail(ErascopeError("cannot write to standard output: it is closed"))
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        # what is still buffered would fail again, with a traceback, in the interpreter's last flush
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), sys.stdout.fileno())
        raise _fail(ErascopeError(f"cannot write to standard output: {exc.strerror or exc}")) from None


def _standard_fds_held() -> None:
    """Put /dev/null on whichever of fds 0-2 the host left closed (`2>&-`).

    A closed fd 2 is the lowest free number: the server's pipes or a capture part would be opened
    on it, and anything meant for stderr would then go into them. Held by /dev/null, what is written
    there goes nowhere, as it would for `cat` started so.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd` itself
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


@record_app.command(
    "stdio",
    cls=_Command,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def record_stdio(
    cmd: Annotated[
        list[str], typer.Argument(metavar="COMMAND", help="The server command and its arguments, after `--`.")
    ],
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            metavar="NAME",
            help="Server key; default: the command's basename plus what it runs (e.g. `python -m weather`).",
        ),
    ] = None,
    out: CaptureDirOption = None,
    linger: Annotated[
        float,
        typer.Option(
            "--linger", metavar="SECONDS", help="Seconds to keep recording client bytes after the server exits."
        ),
    ] = 2.0,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            metavar="SECONDS",
            help="Seconds a server may run on after the client closed stdin (or a signal) before SIGTERM,"
            " then SIGKILL.",
        ),
    ] = 5.0,
    rotate_size: RotateSizeOption = "256m",
    rotate_age: RotateAgeOption = None,
    compress: CompressOption = False,
    keep_bytes: KeepBytesOption = None,
    keep_days: KeepDaysOption = None,
    key: ChainKeyOption = None,
    probe_timeout: ProbeTimeoutLiveOption = 10.0,  # addon.metrics.PROBE_TIMEOUT, the analyzer's default
) -> None:
    """Run an MCP stdio server behind a byte-exact recording tee.

    Put it in an MCP host's config in place of the server command: the host and the server see the
    same bytes as without it, and each spawn becomes one capture. The server's stderr passes
    through. Exits with the server's status (128+N when signal N killed it; 127 or 126 when the
    command cannot start). Example:

        erascope record stdio --server weather -- python -m weather_server
    """
    from addon.chain import load_key
    from addon.retention import Retention, parse_duration, parse_size
    from addon.stdio_tee import run_tee

    _standard_fds_held()
    # Python leaves `sys.stderr` None when fd 2 was closed at its start; fd 2 is /dev/null by now.
    stderr = sys.stderr.buffer if sys.stderr is not None else os.fdopen(2, "wb", buffering=0, closefd=False)
    try:
        retention = Retention(
            compress=compress,
            keep_bytes=parse_size(keep_bytes, "--keep-bytes") if keep_bytes is not None else None,
            keep_days=keep_days,
        )
        retention.check()
        chain_key = load_key(key) if key is not None else None
        status = run_tee(
            cmd,
            server=server,
            out_dir=out,
            linger=linger,
            grace=grace,
            stderr=stderr,
            rotate_bytes=parse_size(rotate_size, "--rotate-size"),
            rotate_age=parse_duration(rotate_age, "--rotate-age") if rotate_age is not None else None,
            retention=retention,
            chain_key=chain_key,
            probe_timeout=probe_timeout,
            restore_signals=False,  # a signal as we exit must not replace the server's status
        )
    except ErascopeError as exc:
        raise _fail(exc) from None
    raise typer.Exit(code=status)


@record_app.command("http", cls=_Command)
def record_http(
    upstream: Annotated[
        str, typer.Option("--upstream", metavar="URL", help="The MCP server's URL, e.g. http://host:8000/mcp.")
    ],
    listen: Annotated[
        str,
        typer.Option("--listen", metavar="HOST:PORT", help="Where to accept clients (port 0 picks a free one)."),
    ] = "127.0.0.1:8080",
    server: Annotated[
        str | None,
        typer.Option("--server", metavar="NAME", help="Server key; default: the upstream URL (origin + path)."),
    ] = None,
    out: CaptureDirOption = None,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact/--no-redact",
            help="Hash credentials, secret query values and mcp-session-id; --no-redact records all as is.",
        ),
    ] = True,
    bodies: Annotated[
        Bodies,
        typer.Option(
            "--bodies",
            case_sensitive=False,
            help="full: exact bodies; metadata: JSON-RPC envelope only (arguments and contents hashed).",
        ),
    ] = Bodies.FULL,
    redact_header: Annotated[
        list[str] | None,
        typer.Option("--redact-header", metavar="NAME", help="Another header whose value is hashed (repeatable)."),
    ] = None,
    keep_host: Annotated[
        bool, typer.Option("--keep-host", help="Forward the client's Host header instead of the upstream's.")
    ] = False,
    idle_timeout: Annotated[
        int,
        typer.Option(
            "--idle-timeout", metavar="SECONDS", help="Seconds a silent connection (e.g. an SSE stream) stays open."
        ),
    ] = 3600,
    max_body: Annotated[
        str,
        typer.Option(
            "--max-body",
            metavar="SIZE",
            help="Record at most this much of each body, decoded (e.g. 16m, 512k); the rest is relayed.",
        ),
    ] = "16m",
    metrics: Annotated[
        str | None,
        typer.Option(
            "--metrics",
            metavar="HOST:PORT",
            help="Serve Prometheus metrics on HOST:PORT at /metrics (recorder health, probe outcomes, eras).",
        ),
    ] = None,
    rotate_size: RotateSizeOption = "256m",
    rotate_age: RotateAgeOption = None,
    compress: CompressOption = False,
    keep_bytes: KeepBytesOption = None,
    keep_days: KeepDaysOption = None,
    key: ChainKeyOption = None,
    probe_timeout: ProbeTimeoutLiveOption = 10.0,  # addon.metrics.PROBE_TIMEOUT, the analyzer's default
) -> None:
    """Run a recording reverse proxy (mitmproxy) in front of an MCP Streamable HTTP server.

    Point clients at the listen address with the upstream's path; Ctrl-C stops it and flushes the
    capture. Example:

        erascope record http --upstream http://127.0.0.1:8000/mcp \\
            --listen 127.0.0.1:8080
    """
    import logging
    from urllib.parse import urlsplit

    from addon.http_proxy import ReverseProxyConfig, parse_upstream, run_reverse_proxy
    from addon.retention import current_name
    from addon.writer import default_capture_dir

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s", stream=sys.stderr)
    config = ReverseProxyConfig(
        upstream=upstream,
        listen=listen,
        server=server,
        out_dir=out,
        redact=redact,
        bodies=bodies.value,
        redact_headers=list(redact_header or []),
        keep_host_header=keep_host,
        idle_timeout=idle_timeout,
        max_body=max_body,
        metrics=metrics,
        rotate_size=rotate_size,
        rotate_age=rotate_age,
        compress=compress,
        keep_bytes=keep_bytes,
        keep_days=keep_days,
        chain_key=key,
        probe_timeout=probe_timeout,
    )
    where = out or default_capture_dir()
    removals = logging.getLogger("erascope.retention")  # what retention removed, shown as it is
    removals.setLevel(logging.INFO)
    removals.propagate = False
    shown = logging.StreamHandler(sys.stderr)
    shown.setFormatter(logging.Formatter("%(message)s"))
    removals.addHandler(shown)

    def ready(addrs: list[tuple[str, int]]) -> None:
        from addon.redact import mask_urls

        path = urlsplit(upstream).path
        for host, port in addrs:
            shown = f"[{host}]" if ":" in host else host
            # the upstream's userinfo, query and path may hold credentials (the path here too)
            line = mask_urls(f"http://{shown}:{port}{path} -> {upstream}")
            typer.echo(f"erascope: listening on {line}", err=True)
        typer.echo(f"erascope: writing captures to {where} (Ctrl-C to stop)", err=True)

    def metrics_ready(url: str) -> None:
        typer.echo(f"erascope: serving metrics on {url}", err=True)

    try:
        parse_upstream(upstream)
        run = run_reverse_proxy(config, on_ready=ready, on_metrics=metrics_ready)
    except ErascopeError as exc:
        raise _fail(exc) from None
    for path in run.files:
        # as it is named now: a keeper, this recorder's or another's, may have compressed it since
        now = current_name(path)
        if now is not None:  # else retention removed it since (and said so)
            typer.echo(f"erascope: wrote {now}", err=True)
    if run.lost:
        typer.echo(f"erascope: {run.lost} record(s) could not be written", err=True)
        raise typer.Exit(code=1)


def _stop_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C (exit 143), so the analysis removes its temporary directory
    (`analyzer.spill`): the default action ends the process on the spot and leaves it behind."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


@app.command("analyze", cls=_Command)
def analyze_cmd(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH",
            help="Captures (also .jsonl.gz, .jsonl.zst), HAR files, mitmproxy dumps, directories (searched for"
            " *.jsonl, *.jsonl.gz, *.jsonl.zst), globs or archives; also at object-storage URLs (s3://bucket/captures/,"
            " credentials from the store's environment; pip install 'erascope\\[cloud]').",
        ),
    ],
    report_format: Annotated[
        ReportFormat, typer.Option("--format", "-f", case_sensitive=False, help="Report format.")
    ] = ReportFormat.TEXT,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write the report here, not stdout (never over a capture; - is stdout).",
        ),
    ] = None,
    fail_on_choice: Annotated[
        FailOn,
        typer.Option("--fail-on", case_sensitive=False, help="Exit 1 when a finding at or above this severity exists."),
    ] = FailOn.NEVER,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no input notes on stderr.")] = False,
    probe_timeout: Annotated[
        float,
        typer.Option(
            "--probe-timeout",
            metavar="SECONDS",
            help="Seconds after which an unanswered probe counts as no-answer (unless the client still waited).",
        ),
    ] = 10.0,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            metavar="FILE",
            help="JSON file of accepted findings (rule + server): exit 1 only for new findings (at or above "
            "--fail-on, when given) and for baselined findings that no longer occur.",
        ),
    ] = None,
    write_baseline: Annotated[
        Path | None,
        typer.Option(
            "--write-baseline",
            metavar="FILE",
            help="Write a baseline accepting every finding of this run, then exit 0.",
        ),
    ] = None,
    rule_option: Annotated[
        list[str] | None,
        typer.Option(
            "--rule-option",
            metavar="NAME=VALUE",
            help="A rule threshold, NAME=VALUE (repeatable), e.g. storm_min_probes=3; `erascope rules --brief` "
            "lists them.",
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            metavar="N",
            help="Files read in parallel; default: one per core (same report). Not with --scheduler.",
        ),
    ] = None,
    temp_dir: Annotated[
        Path | None,
        typer.Option(
            "--temp-dir",
            metavar="DIR",
            help="Where the analysis keeps rows it reads again later (about a tenth of the input's size); "
            "default: $TMPDIR. Removed when it ends.",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Exit 2 when any input file cannot be read or is skipped, instead of noting it."
        ),
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="TIME",
            help="Analyze only records at or after TIME (ISO-8601, UTC unless it names an offset), e.g. 2026-11-28;"
            " or a duration before now (90m, 6h, 7d, 2w).",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", metavar="TIME", help="Analyze only records before TIME (exclusive; as --since)."),
    ] = None,
    server: Annotated[
        list[str] | None,
        typer.Option(
            "--server",
            metavar="KEY",
            help="Analyze only the traffic of this server key (repeatable); on an archive only its partitions"
            " are read.",
        ),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            metavar="ADDRESS",
            help="Analyze the archive on this Dask scheduler (tcp://host:port or a scheduler file), one task per"
            " shard of servers; the archive must be on a path the workers share or at a URL they can read"
            " (pip install 'erascope\\[dask]').",
        ),
    ] = None,
    wait_for_workers: WaitForWorkersOption = WAIT_FOR_WORKERS_S,
    verify_chains: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Also check the captures' hash chains as erascope verify does; the report says which inputs"
            " were verified.",
        ),
    ] = False,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            metavar="FILE",
            help="With --verify: the key the recorders were given (keyed chains; unkeyed ones fail).",
        ),
    ] = None,
) -> None:
    """Analyze captures: each server's era, probe outcomes and client mistakes.

    Exit status: 0, 1 when a finding at or above --fail-on exists (with --baseline: a finding not in
    the baseline, or a baselined finding that no longer occurs), 2 for usage or input errors. With
    --verify, also 1 when a capture's hash chain is broken, and 2 when one cannot be checked.
    Example:

        erascope analyze captures/ --format markdown --output postmortem.md \\
            --fail-on error
    """
    from analyzer.pipeline import AnalyzeOptions, analyze
    from analyzer.report import render

    _stop_on_sigterm()
    fmt, fail_on = report_format.value, fail_on_choice.value
    if probe_timeout <= 0:
        raise _fail(ErascopeError("--probe-timeout must be a positive number of seconds"))
    options = AnalyzeOptions(
        probe_timeout=probe_timeout, jobs=jobs, spill_dir=str(temp_dir) if temp_dir else None, strict=strict
    )
    try:
        options.since, options.until, options.servers = _selection(since, until, server)
        options.verify, options.chain_key = verify_chains, _chain_key(verify_chains, key, scheduler)
    except ErascopeError as exc:
        raise _fail(exc) from None
    if output == Path("-"):
        output = None
    targets = {name: p for name, p in (("--output", output), ("--write-baseline", write_baseline)) if p is not None}
    if targets:
        from analyzer.output import check_targets

        try:
            check_targets(paths, targets)  # before the (long) analysis: a capture is never overwritten
        except ErascopeError as exc:
            raise _fail(exc) from None
    if baseline is not None and write_baseline is None:
        from analyzer.baseline import load_baseline

        try:
            load_baseline(baseline)  # a broken baseline fails before the (long) analysis, not after it
        except ErascopeError as exc:
            raise _fail(exc) from None
    if rule_option:
        from analyzer.rules.options import parse_assignments

        try:
            options.rule_options = parse_assignments(rule_option)
        except ErascopeError as exc:
            raise _fail(exc) from None
    progress = None
    if not quiet and sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import Progress

        progress = Progress(console=Console(stderr=True), transient=True)
        task = progress.add_task("reading captures", total=None)
        options.progress = lambda done, total, _path: progress.update(task, completed=done, total=total)
        progress.start()
    try:
        if scheduler is not None:
            _no_jobs(jobs)
            from analyzer.cluster import analyze_on_cluster

            analysis = analyze_on_cluster(
                scheduler, paths, options, marks=fmt == "html", wait_for_workers=_positive_wait(wait_for_workers)
            )
        else:
            analysis = analyze(paths, options)
    except ErascopeError as exc:
        raise _fail(exc) from None
    finally:
        if progress is not None:
            progress.stop()
    selection = options.selection
    found = {verdict.server for verdict in analysis.servers}
    if not found and not selection.everything:
        # a misspelled key or a window beside the traffic: "no findings" would pass a CI gate
        analysis.close()
        raise _fail(ErascopeError(f"the selection holds no traffic of the inputs ({selection.describe()})"))
    for key in selection.unmatched(found):
        typer.echo(f"erascope: --server {visible(key)}: no traffic of this server in the inputs", err=True)
    color = output is None and fmt == "text" and sys.stdout is not None and sys.stdout.isatty()
    if fmt == "html":  # one self-contained page (analyzer/html_report.py); Bokeh is imported only for it
        from analyzer.html_report import render_html

        text = render_html(analysis)
    else:
        text = render(analysis, fmt, color=color)
    analysis.close()  # everything the report reads is in it: the temporary files go now
    if output is not None:
        from analyzer.output import write_atomic

        try:
            write_atomic(output, text.encode("utf-8"))
        except ErascopeError as exc:
            raise _fail(exc) from None
        typer.echo(f"erascope: wrote the report to {output}", err=True)
    else:
        with _to_stdout():
            typer.echo(text, nl=False)
    inp = analysis.inputs
    notes = sum(map(len, (inp.malformed, inp.torn, inp.skipped, inp.errors, inp.duplicates, inp.repeated)))
    if notes and not quiet and fmt != "text":
        typer.echo(
            f"erascope: {notes} input note(s) (malformed/torn lines, skipped, unreadable or duplicate files):"
            " see the report",
            err=True,
        )
    # said whatever --quiet: it decides the exit status, as a finding above --fail-on does
    chains = 0
    if (check := inp.verification) is not None and (check.broken or check.unchecked):
        chains = 1 if check.broken else 2
        failed = {s: n for s, n in check.counts.items() if s in ("tampered", "cut", "error")}
        said = ", ".join(f"{n} {'cannot be checked' if s == 'error' else s}" for s, n in failed.items())
        typer.echo(f"erascope: hash chains of the inputs: {said}: see the report", err=True)
    if write_baseline is not None:
        from analyzer.baseline import write_baseline as write_baseline_file

        try:
            count = write_baseline_file(analysis.findings, write_baseline)
        except ErascopeError as exc:
            raise _fail(exc) from None
        typer.echo(f"erascope: wrote baseline {write_baseline} ({count} accepted rule/server pair(s))", err=True)
        raise typer.Exit(code=chains)
    if baseline is not None:
        from analyzer.baseline import compare

        try:
            # A selection analyzed only some of the traffic: entries of servers it left out are not
            # stale, and under a time window none is (a finding outside the window still occurs).
            windowed = selection.since is not None or selection.until is not None
            scope = None if selection.everything else set() if windowed else found
            result = compare(analysis.findings, baseline, None if fail_on == "never" else fail_on, scope)
        except ErascopeError as exc:
            raise _fail(exc) from None
        for line in result.messages():
            typer.echo(f"erascope: {line}", err=True)
        raise typer.Exit(code=1 if result.failed else chains)
    if fail_on != "never":
        from analyzer.findings import Severity

        threshold = Severity(fail_on).rank
        if any(f.severity.rank >= threshold for f in analysis.findings):
            raise typer.Exit(code=1)
    raise typer.Exit(code=chains)


def _chain_key(verify_chains: bool, key: Path | None, scheduler: str | None) -> bytes | None:
    """`analyze --key`'s bytes; `--key` and `--scheduler` are refused where `--verify` cannot use them."""
    if verify_chains and scheduler is not None:
        # the cluster analyzes an archive, which keeps no chains: its captures are checked before compact
        raise ErascopeError(
            "--verify checks captures' hash chains, which an archive does not keep: not with --scheduler"
            " (check the captures with erascope verify before compact)"
        )
    if key is None:
        return None
    if not verify_chains:
        raise ErascopeError("--key is the key of the chains --verify checks: give --verify too")
    from addon.chain import load_key

    return load_key(key)


@app.command("compact", cls=_Command)
def compact_cmd(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH",
            help="Capture files, directories (searched for *.jsonl, *.jsonl.gz, *.jsonl.zst) or globs; also at"
            " object-storage URLs (s3://bucket/captures/; pip install 'erascope\\[cloud]').",
        ),
    ],
    out: Annotated[
        str,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Archive directory (created; must not be inside an input), or a URL (s3://bucket/archive): each"
            " file's entry is uploaded after its parts.",
        ),
    ],
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            metavar="N",
            help="Files converted in parallel; default: one per core. Not with --scheduler.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Convert again inputs that look unchanged.")] = False,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            metavar="ADDRESS",
            help="Convert on this Dask scheduler (tcp://host:port or a scheduler file), one task per file; inputs and"
            " --out must be on paths the workers share or at URLs they can read and write"
            " (pip install 'erascope\\[dask]').",
        ),
    ] = None,
    wait_for_workers: WaitForWorkersOption = WAIT_FOR_WORKERS_S,
    temp_dir: Annotated[
        Path | None,
        typer.Option(
            "--temp-dir",
            metavar="DIR",
            help="With --out URL: stage each file's objects under DIR before uploading them (default: the system's"
            " temporary directory).",
        ),
    ] = None,
) -> None:
    """Convert captures to a Parquet archive once: partitioned by day and server, fields extracted.

    `erascope analyze DIR` reads the archive with the same report as the JSONL files; re-running
    replaces what an input produced before (no duplicates) and skips unchanged inputs. Example:

        erascope compact ~/.local/state/erascope/captures --out archive/
    """
    from analyzer.compact import compact

    try:
        if scheduler is not None:
            _no_jobs(jobs)
            from analyzer.cluster import compact_on_cluster

            result = compact_on_cluster(
                scheduler, paths, out, force=force, temp_dir=temp_dir, wait_for_workers=_positive_wait(wait_for_workers)
            )
        else:
            result = compact(paths, out, jobs=jobs, force=force, temp_dir=temp_dir)
    except ErascopeError as exc:
        raise _fail(exc) from None
    for path, why in result.skipped:  # named with why, as `analyze` notes them; not counted as compacted
        typer.echo(f"erascope: skipped {visible(path)}: {visible(why)}", err=True)
    for _, error in result.errors:  # names its file and line already, as `analyze` names it
        typer.echo(f"erascope: error: {visible(error)}", err=True)
    skipped = f" {len(result.skipped)} skipped," if result.skipped else ""
    typer.echo(
        f"erascope: {len(result.written)} file(s) compacted ({result.rows} rows, {result.parts} Parquet part(s)),"
        f"{skipped} {len(result.unchanged)} unchanged, into {out}",
        err=True,
    )
    if result.errors:
        # after the summary, as `analyze` reports what it read: what a cron job archives is not all it was given
        raise typer.Exit(code=2)


@app.command("rules", cls=_Command)
def rules_cmd(
    ids: Annotated[list[str] | None, typer.Argument(metavar="RULE", help="Rule ids to show; default: all.")] = None,
    brief: Annotated[bool, typer.Option("--brief", help="One line per rule, then the thresholds.")] = False,
) -> None:
    """List the rules that audit client behaviour, with what each flags, why it matters and an example.

    Example:

        erascope rules probe-storm misread-crash
    """
    from rich.console import Console

    from analyzer.rules.docs import rule_renderables

    try:
        renderables = rule_renderables(ids or None, brief=brief)
    except ErascopeError as exc:
        raise _fail(exc) from None
    console = Console()
    with _to_stdout():
        for item in renderables:
            console.print(item)


class LinesFormat(StrEnum):
    """`--format` of `watch` and `verify` (any case): lines for people, or JSON for programs."""

    TEXT = "text"
    JSON = "json"


@app.command("watch", cls=_Command)
def watch_cmd(
    paths: Annotated[
        list[str],
        typer.Argument(metavar="DIR", help="Capture directories (or files, globs) the recorders write into."),
    ],
    fail_on_choice: Annotated[
        FailOn,
        typer.Option("--fail-on", case_sensitive=False, help="Exit 1 on the first finding at or above this severity."),
    ] = FailOn.NEVER,
    watch_format: Annotated[
        LinesFormat,
        typer.Option("--format", "-f", case_sensitive=False, help="One line per event: text, or JSON lines."),
    ] = LinesFormat.TEXT,
    interval: Annotated[
        float, typer.Option("--interval", metavar="SECONDS", help="Seconds between looks at the files.")
    ] = 1.0,
    probe_timeout: Annotated[
        float,
        typer.Option(
            "--probe-timeout",
            metavar="SECONDS",
            help="Seconds after which an unanswered probe counts as no-answer (unless the client still waited).",
        ),
    ] = 10.0,
) -> None:
    """Follow capture directories while recorders write them; report each new finding and era change.

    Runs until SIGINT or SIGTERM (exit 0), or exits 1 on the first finding at or above --fail-on, so
    a deployment script can stop a rollout on it. Example:

        erascope watch ~/.local/state/erascope/captures \\
            --fail-on warning --format json
    """
    stop = threading.Event()

    def stop_on_signals() -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda _signum, _frame: stop.set())

    # before the imports below (a second of polars): Ctrl-C while they run stops watch as any other
    # time, not with a traceback and exit 1, which --fail-on gives for a finding
    stop_on_signals()
    import orjson

    from analyzer.findings import Severity
    from analyzer.watch import Watcher, at_or_above

    # and again after them: polars puts its own SIGINT handler in front when imported (a later
    # Ctrl-C then came as a KeyboardInterrupt from inside a query, exit 130)
    stop_on_signals()

    if interval <= 0 or probe_timeout <= 0:
        raise _fail(ErascopeError("--interval and --probe-timeout must be positive numbers of seconds"))
    threshold = None if fail_on_choice.value == "never" else Severity(fail_on_choice.value)
    try:
        watcher = Watcher(paths, probe_timeout=probe_timeout)
        for events in watcher.run(interval, stop):
            for note in watcher.notes:
                typer.echo(f"erascope: {visible(note)}", err=True)
            watcher.notes.clear()
            for event in events:
                if watch_format == LinesFormat.JSON:
                    line = json_visible(orjson.dumps(event.as_json()).decode())
                else:
                    line = event.as_text()
                with _to_stdout():
                    typer.echo(line)
                if at_or_above(event, threshold):
                    raise typer.Exit(code=1)
    except ErascopeError as exc:
        raise _fail(exc) from None


@app.command("verify", cls=_Command)
def verify_cmd(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH",
            help="Captures (also .jsonl.gz, .jsonl.zst), directories (searched for *.jsonl, *.jsonl.gz, *.jsonl.zst)"
            " or globs.",
        ),
    ],
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            metavar="FILE",
            help="The key the recorder was given (--key): checks keyed chains, and fails unkeyed or missing ones.",
        ),
    ] = None,
    verify_format: Annotated[
        LinesFormat, typer.Option("--format", "-f", case_sensitive=False, help="Output format.")
    ] = LinesFormat.TEXT,
) -> None:
    """Check the hash chains of captures: what was removed, changed, reordered or inserted, and where.

    Reports with file:line every line removed, changed, reordered or inserted, a rotated part missing,
    and captures that were never closed (a crash, not tampering). A compressed part whose stream is
    cut short or corrupt is cut (written whole, it was cut after: its lines after the cut are lost).
    A file of captures joined (cat a.jsonl b.jsonl) has each checked as in a file of its own. For a
    report that says which of its inputs were verified: erascope analyze --verify.

    Exit status: 0 when nothing was found, 1 when a chain is broken (or a compressed part cut), 2
    when an input cannot be checked (unreadable, not a capture, keyed with a key not given). Example:

        erascope verify ~/.local/state/erascope/captures --key audit.key
    """
    from addon.chain import load_key
    from analyzer.verify import render_json, render_text, verify

    try:
        result = verify(paths, key=load_key(key) if key is not None else None)
    except ErascopeError as exc:
        raise _fail(exc) from None
    with _to_stdout():
        if verify_format is LinesFormat.JSON:
            typer.echo(render_json(result), nl=False)
        else:
            typer.echo(render_text(result), nl=False)
    if result.tampered or result.cut:
        raise typer.Exit(code=1)
    if result.errors:
        raise typer.Exit(code=2)


def main() -> None:
    """The `erascope` script: the command, then the end of the process."""
    # Under a locale that is not UTF-8 (ISO-8859-1, say) the report's rules, arrows and `×`, and any
    # non-ASCII a capture holds, raised UnicodeEncodeError: a traceback and exit status 1, a CI gate's
    # "findings". Reports are UTF-8 documents, as `--output` writes them; messages escape what cannot show.
    if sys.stdout is not None and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")
    if sys.stderr is not None and hasattr(sys.stderr, "reconfigure"):
        sys.stderr.reconfigure(errors="backslashreplace")
    _standard_fds_held()  # a file the command opens must not become its fd 1 or 2
    if sys.stderr is None:  # fd 2 closed at start (`2>&-`): notes go to the /dev/null now on it
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115 (for the life of the process)
    try:
        app()
    finally:
        # What is alive now lives until the process ends, yet the interpreter's exit runs full garbage
        # collections over all of it (0.2 s of CPU after a 1 GB archive's report): frozen, it is skipped
        # by them and freed by reference counting as the modules go. Every command has closed its files
        # and removed its temporary directories by now; atexit handlers, the flush of stdout and stderr
        # and the exit status are as before. Only cyclic garbage left at exit goes uncollected, which
        # Python does not promise to finalize at exit anyway.
        gc.freeze()


def _no_jobs(jobs: int | None) -> None:
    if jobs is not None:  # a worker's threads are its own: each task would run that many more on it
        raise ErascopeError(
            "--jobs does not apply with --scheduler: each worker runs as many tasks at once as its threads"
            " (`dask worker --nthreads N`)"
        )


def _positive_wait(seconds: float) -> float:
    if not seconds > 0:  # NaN too
        raise ErascopeError("--wait-for-workers must be a positive number of seconds")
    return seconds


def _selection(
    since: str | None, until: str | None, servers: list[str] | None
) -> tuple[datetime | None, datetime | None, tuple[str, ...] | None]:
    """`--since`, `--until`, `--server` as `AnalyzeOptions` fields; `ErascopeError` for bad times."""
    from analyzer.selection import parse_time

    try:
        start = parse_time(since) if since is not None else None
        end = parse_time(until) if until is not None else None
    except ValueError as exc:
        raise ErascopeError(f"--since/--until: {exc}") from None
    if start is not None and end is not None and end <= start:
        raise ErascopeError(f"--until {until} is not after --since {since}: the window holds nothing")
    return start, end, tuple(dict.fromkeys(servers)) if servers else None


if __name__ == "__main__":
    main()
