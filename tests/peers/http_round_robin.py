"""A mitmproxy addon that spreads requests over several upstreams, round robin, per request.

It plays the load balancer of a half-rolled fleet: load it before the recorder, in reverse mode,

    mitmdump --mode reverse:http://127.0.0.1:PORT_A -s tests/peers/http_round_robin.py \\
        -s addon/http_recorder.py --set rr_upstreams=127.0.0.1:PORT_A,127.0.0.1:PORT_B

and each `http.response` record's `peer` names the upstream that answered. Like a plain L7
balancer without session affinity it ignores `mcp-session-id` (legacy sessions break behind it,
as they do in production). `rr_upstreams` is a comma-separated list of HOST:PORT.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from mitmproxy import ctx, exceptions, http


class RoundRobin:
    """Rewrites each request's destination to the next upstream in turn."""

    def __init__(self) -> None:
        self.upstreams: list[tuple[str, int]] = []
        self._next: Iterator[tuple[str, int]] | None = None

    def load(self, loader: Any) -> None:
        loader.add_option("rr_upstreams", str, "", "Comma-separated HOST:PORT upstreams to alternate between.")

    def configure(self, updated: set[str]) -> None:
        if "rr_upstreams" not in updated:
            return
        upstreams: list[tuple[str, int]] = []
        for item in filter(None, (p.strip() for p in ctx.options.rr_upstreams.split(","))):
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit():
                raise exceptions.OptionsError(f"rr_upstreams: expected HOST:PORT, got {item!r}")
            upstreams.append((host, int(port)))
        self.upstreams = upstreams
        self._next = itertools.cycle(upstreams) if upstreams else None

    def request(self, flow: http.HTTPFlow) -> None:
        if self._next is not None:
            flow.request.host, flow.request.port = next(self._next)


addons = [RoundRobin()]
