"""`erascope record http`: mitmproxy in reverse mode with the recorder loaded, in this process.

In-process (a `Master` with mitmproxy's default addons plus `HttpRecorder`) rather than exec'ing
`mitmdump`: SIGINT and SIGTERM then go through `Master.shutdown()`, which runs every addon's
`done()`, so the capture writer flushes and closes before the function returns, and the caller
learns the real listen address (port 0 works) and the files written.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from addon.errors import ErascopeError
from addon.http_recorder import HttpRecorder
from addon.metrics import PROBE_TIMEOUT, parse_address
from addon.redact import BODIES_FULL, BODY_POLICIES, mask_urls
from addon.writer import mitmproxy_confdir

DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_IDLE_TIMEOUT = 3600
"""mitmproxy's own default (600 s) cuts quiet legacy GET streams a direct connection would keep."""
UPSTREAM_CHECK_TIMEOUT = 3.0
"""Seconds the start-up check waits for a TCP connection to the upstream."""

logger = logging.getLogger("erascope")


@dataclass(slots=True)
class ReverseProxyConfig:
    """What `record http` runs: one upstream, one listen address, one capture."""

    upstream: str
    """The server's URL, e.g. `http://127.0.0.1:8000/mcp`; its origin is the reverse-proxy target."""
    listen: str = DEFAULT_LISTEN
    """`HOST:PORT` to accept clients on (port 0 picks a free one)."""
    server: str | None = None
    """Server key for the capture; default: the upstream URL without query (origin + path)."""
    out_dir: Path | None = None
    """Capture directory; default: `$ERASCOPE_CAPTURE_DIR` or the state directory."""
    redact: bool = True
    bodies: str = BODIES_FULL
    redact_headers: list[str] = field(default_factory=list)
    keep_host_header: bool = False
    """Forward the client's `Host` header unchanged (for upstreams that route by the name clients use)."""
    idle_timeout: int = DEFAULT_IDLE_TIMEOUT
    """Seconds a connection may stay silent before the proxy closes it (mitmproxy's `tcp_timeout`)."""
    max_body: str = "16m"
    """Bytes recorded at most per body or SSE event (`16m`, `512k`, …); more is relayed, not recorded."""
    metrics: str | None = None
    """`HOST:PORT` to serve Prometheus metrics on (`/metrics`); None: off."""
    rotate_size: str = "256m"
    """Start a new capture part when the open one would pass this size."""
    rotate_age: str | None = None
    """Also start a new part once the open one is this old (`1h`, `30m`, `1d`)."""
    compress: bool = False
    """Compress closed parts to `*.jsonl.zst`."""
    keep_bytes: str | None = None
    """Remove the oldest closed parts while the capture directory holds more than this."""
    keep_days: float | None = None
    """Remove closed parts whose last record is older than this many days."""
    chain_key: Path | None = None
    """A key file: the capture's hash chain is keyed (keyed BLAKE3); default unkeyed BLAKE3."""
    probe_timeout: float = PROBE_TIMEOUT
    """Seconds a client waits for a probe's answer, for the live probe outcomes."""


@dataclass(slots=True)
class ProxyRun:
    """What a finished run did."""

    listen: list[tuple[str, int]]
    files: list[Path]
    records: int
    lost: int


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`, or `:PORT` for 127.0.0.1) as a (host, port) pair."""
    return parse_address(text, "--listen", DEFAULT_LISTEN)


def parse_upstream(url: str) -> tuple[str, str]:
    """The reverse-mode target (`scheme://host:port`) and the server key (origin + path) of an upstream URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ErascopeError(f"--upstream must be an http:// or https:// URL, not {mask_urls(url)!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ErascopeError(f"--upstream has a bad port: {mask_urls(url)!r}") from exc
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    origin = f"{parts.scheme}://{host}" + (f":{port}" if port else "")
    return origin, origin + (parts.path or "")


_SERVER_LOG = "mitmproxy.addons.proxyserver"
"""Logs why a listen address cannot be bound, with advice in mitmproxy's own option syntax."""


async def upstream_problem(origin: str, timeout: float = UPSTREAM_CHECK_TIMEOUT) -> str | None:
    """Why a TCP connection to the host and port of `origin` (`scheme://host[:port]`) fails, or None
    when it opens (it is closed again at once; nothing is sent)."""
    parts = urlsplit(origin)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except TimeoutError:
        return f"no connection within {timeout:g} s"
    except OSError as exc:
        return str(exc) or type(exc).__name__
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


def _authority(origin: str) -> str:
    parts = urlsplit(origin)
    return parts.netloc if parts.port else f"{parts.netloc}:{443 if parts.scheme == 'https' else 80}"


class _Startup:
    """Collects mitmproxy's error log while the servers come up, reports the bound addresses, and
    warns (log level warning, `erascope` logger) when the upstream does not accept a connection.

    Until the proxy listens, the proxy server's log goes only here (not to stderr too): a failure
    to bind is reported once, in erascope's words, by `_listen_error`.
    """

    def __init__(self, on_ready: Callable[[list[tuple[str, int]]], None] | None, origin: str) -> None:
        self.on_ready = on_ready
        self.origin = origin
        self.errors: list[str] = []
        self.listen: list[tuple[str, int]] = []
        self.handler = _ListHandler(self.errors)
        self._check: asyncio.Task[None] | None = None

    def attach(self) -> None:
        logging.getLogger().addHandler(self.handler)
        server_log = logging.getLogger(_SERVER_LOG)
        server_log.addHandler(self.handler)
        server_log.propagate = False

    def detach(self) -> None:
        logging.getLogger().removeHandler(self.handler)
        server_log = logging.getLogger(_SERVER_LOG)
        server_log.removeHandler(self.handler)
        server_log.propagate = True

    def running(self) -> None:
        from mitmproxy import ctx

        ps = ctx.master.addons.get("proxyserver")
        self.listen = [(a[0], a[1]) for a in ps.listen_addrs()] if ps else []
        if not self.listen:
            ctx.master.shutdown()
            return
        self.detach()
        if self.on_ready is not None:
            self.on_ready(self.listen)
        # in the background: the proxy serves at once; a refused or silent upstream is only named
        self._check = asyncio.get_running_loop().create_task(self.check_upstream())

    async def check_upstream(self) -> None:
        """Log a warning when the upstream does not accept a TCP connection: every request would then
        get the proxy's 502, recorded as `http.error` (the analyzer's `upstream-unreachable`)."""
        why = await upstream_problem(self.origin)
        if why is not None:
            # masked as the start line masks the upstream: a credential in the host name must not
            # reach terminals and CI logs
            shown = urlsplit(mask_urls(f"{urlsplit(self.origin).scheme}://{_authority(self.origin)}")).netloc
            logger.warning(
                "upstream %s does not answer (%s): clients will get the proxy's 502 until it does",
                shown,
                mask_urls(why),
            )


def _listen_error(host: str, port: int, errors: list[str]) -> ErascopeError:
    shown = f"[{host}]" if ":" in host else host
    if any(f"[Errno {errno.EADDRINUSE}]" in e or "address already in use" in e.lower() for e in errors):
        reason = f"port {port} is in use; choose another with --listen HOST:PORT"
    else:
        # mitmproxy's first line says why; the rest advises its own options, which erascope does not have
        reason = "; ".join(e.splitlines()[0] for e in errors if e) or "the proxy is not listening"
    return ErascopeError(f"cannot listen on {shown}:{port}: {reason} (port 0 picks a free one)")


class _ListHandler(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


async def _serve(
    config: ReverseProxyConfig,
    on_ready: Callable[[list[tuple[str, int]]], None] | None,
    on_metrics: Callable[[str], None] | None = None,
) -> ProxyRun:
    from mitmproxy import addons, exceptions, master, options

    origin, key = parse_upstream(config.upstream)
    host, port = parse_listen(config.listen)
    if config.idle_timeout <= 0:
        raise ErascopeError(f"--idle-timeout must be a positive number of seconds, not {config.idle_timeout}")
    if config.bodies not in BODY_POLICIES:
        raise ErascopeError(f"--bodies must be one of {', '.join(BODY_POLICIES)}, not {config.bodies!r}")
    confdir = mitmproxy_confdir()
    try:
        confdir.mkdir(parents=True, exist_ok=True, mode=0o700)  # mitmproxy puts its CA's private key here
    except OSError as exc:
        raise ErascopeError(f"cannot create mitmproxy's confdir {confdir}: {exc.strerror or exc}") from exc
    # set before the default addons load: the TLS addon writes its CA into confdir as soon as it is
    # configured, and mitmproxy's default is ~/.mitmproxy
    opts = options.Options(confdir=str(confdir))
    m = master.Master(opts)
    startup = _Startup(on_ready, origin)
    startup.attach()
    recorder = HttpRecorder()
    m.addons.add(*addons.default_addons())
    m.addons.add(recorder, startup)
    try:
        opts.update(
            mode=[f"reverse:{origin}"],
            listen_host=host,
            listen_port=port,
            keep_host_header=config.keep_host_header,
            # connect per request: a dead upstream then fails a flow (502 to the client, an
            # `http.error` in the capture) instead of silently dropping the client connection
            connection_strategy="lazy",
            tcp_timeout=config.idle_timeout,
            erascope_dir=str(config.out_dir) if config.out_dir else "",
            erascope_server=config.server or key,
            erascope_redact=config.redact,
            erascope_bodies=config.bodies,
            erascope_redact_headers=list(config.redact_headers),
            erascope_max_body=config.max_body,
            erascope_rotate_size=config.rotate_size,
            erascope_rotate_age=config.rotate_age or "",
            erascope_compress=config.compress,
            erascope_keep_bytes=config.keep_bytes or "",
            erascope_keep_days="" if config.keep_days is None else repr(float(config.keep_days)),
            erascope_metrics=config.metrics or "",
            erascope_chain_key=str(config.chain_key) if config.chain_key else "",
            erascope_probe_timeout=repr(float(config.probe_timeout)),
        )
    except exceptions.OptionsError as exc:
        recorder.done()  # releases the metrics port, if an earlier option opened it
        raise ErascopeError(_in_flags(str(exc))) from exc
    if recorder.metrics is not None and on_metrics is not None:
        on_metrics(recorder.metrics.url)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, m.shutdown)
    try:
        await m.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        startup.detach()
    if not startup.listen:
        raise _listen_error(host, port, startup.errors)
    return ProxyRun(listen=startup.listen, files=recorder.paths, records=recorder.records, lost=recorder.lost)


_FLAGS: Final = {
    "erascope_dir": "--out", "erascope_server": "--server", "erascope_bodies": "--bodies",
    "erascope_redact_headers": "--redact-header", "erascope_max_body": "--max-body",
    "erascope_rotate_size": "--rotate-size", "erascope_rotate_age": "--rotate-age", "erascope_compress": "--compress",
    "erascope_keep_bytes": "--keep-bytes", "erascope_keep_days": "--keep-days", "erascope_metrics": "--metrics",
    "erascope_chain_key": "--key", "erascope_probe_timeout": "--probe-timeout",
}  # fmt: skip
"""The addon's options (`addon.http_recorder`) by the flags of `erascope record http` that set them."""
_OPTION_NAME = re.compile(r"\berascope_[a-z_]+\b")


def _in_flags(message: str) -> str:
    """An addon's option error in the words of the command line: the flag typed, not the option it set."""
    text = _OPTION_NAME.sub(lambda m: _FLAGS.get(m.group(), m.group()), message)
    for flag in _FLAGS.values():  # "--metrics: --metrics must be …" says it once
        text = text.replace(f"{flag}: {flag} ", f"{flag} ")
    return text


def run_reverse_proxy(
    config: ReverseProxyConfig,
    on_ready: Callable[[list[tuple[str, int]]], None] | None = None,
    on_metrics: Callable[[str], None] | None = None,
) -> ProxyRun:
    """Run the recording reverse proxy until SIGINT/SIGTERM; the capture is flushed when this returns.

    `on_ready` gets the bound addresses once clients can connect; `on_metrics` the metrics URL once
    it serves (with `config.metrics`). Raises `ErascopeError` for bad options or when the listen (or
    metrics) address cannot be bound.
    """
    with asyncio.Runner() as runner:
        # on the loop itself, not inside `_serve`: the connection tasks are cancelled when the runner
        # closes, after `_serve` has returned (and after `Master.run` put this handler back in place)
        runner.get_loop().set_exception_handler(quiet_cancelled_connections)
        return runner.run(_serve(config, on_ready, on_metrics))


_STREAM_DONE_CALLBACK = "StreamReaderProtocol.connection_made.<locals>.callback"
"""`__qualname__` of the done callback asyncio's `start_server` adds to each connection's task."""


def quiet_cancelled_connections(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A loop exception handler that drops one false alarm of Python 3.12 and hands everything else
    to asyncio's default handler.

    mitmproxy does not close its client connections when it stops (`Master.run` just returns), so
    the runner closing the loop cancels the task of each connection still open (idle or not).
    asyncio's `start_server` done callback then calls `task.exception()`, which on a cancelled task
    raises `CancelledError`: logged as "Exception in callback StreamReaderProtocol.connection_made…"
    with a traceback, once per open connection, at every normal stop. Python 3.13's callback checks
    `task.cancelled()` first (and just closes the transport). Only that exact case is dropped: a
    `CancelledError` out of that callback for a task that was cancelled. A connection task that
    failed (`Unhandled exception in client_connected_cb`) and every other error still reach the
    default handler. While `Master.run` runs, mitmproxy's own handler is installed instead of this.
    """
    handle = context.get("handle")
    callback = getattr(handle, "_callback", None)
    args = getattr(handle, "_args", None) or ()
    if (
        isinstance(context.get("exception"), asyncio.CancelledError)
        and getattr(callback, "__qualname__", None) == _STREAM_DONE_CALLBACK
        and len(args) == 1
        and isinstance(args[0], asyncio.Future)
        and args[0].cancelled()
    ):
        return
    loop.default_exception_handler(context)
