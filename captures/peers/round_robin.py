"""A mitmproxy script: a round-robin load balancer that picks the upstream node per flow.

Load it next to the erascope recorder in reverse mode, so the recorder sees the node that really
answered each flow (its `peer` field):

    mitmdump --mode reverse:http://127.0.0.1:9001 -s addon/http_recorder.py \\
        -s captures/peers/round_robin.py --set rr_upstreams=127.0.0.1:9001,127.0.0.1:9002

`rr_by=flow` (default) moves on with every request, like a plain L7 balancer that knows nothing
about MCP sessions: a legacy session started on one node lands its next request on another.
`rr_by=connection` pins each client connection to one node, like an L4 balancer: each client sees
one era, and consecutive clients see different ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from mitmproxy import ctx, exceptions, http
from mitmproxy.addonmanager import Loader


class RoundRobin:
    """Rewrites each request's destination to the next upstream in the list."""

    def __init__(self) -> None:
        self._nodes: list[tuple[str, int]] = []
        self._cycle: Iterator[tuple[str, int]] = iter(())
        self._by_conn: dict[str, tuple[str, int]] = {}

    def load(self, loader: Loader) -> None:
        loader.add_option("rr_upstreams", str, "", "Comma-separated host:port upstream nodes, used in turn.")
        loader.add_option("rr_by", str, "flow", "What gets the next node: every `flow`, or every client `connection`.")

    def configure(self, updated: set[str]) -> None:
        if ctx.options.rr_by not in ("flow", "connection"):
            raise exceptions.OptionsError(f"rr_by must be flow or connection, not {ctx.options.rr_by!r}")
        if "rr_upstreams" not in updated:
            return
        nodes = []
        for item in filter(None, (p.strip() for p in ctx.options.rr_upstreams.split(","))):
            host, sep, port = item.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise exceptions.OptionsError(f"rr_upstreams: {item!r} is not host:port")
            nodes.append((host, int(port)))
        self._nodes = nodes
        self._cycle = itertools.cycle(nodes)

    def request(self, flow: http.HTTPFlow) -> None:
        if not self._nodes:
            return
        if ctx.options.rr_by == "connection":
            conn = flow.client_conn.id
            if conn not in self._by_conn:
                self._by_conn[conn] = next(self._cycle)
            host, port = self._by_conn[conn]
        else:
            host, port = next(self._cycle)
        flow.request.host = host
        flow.request.port = port


addons = [RoundRobin()]
