"""Redaction: credentials never reach a capture in the clear.

Secrets are replaced by a keyed hash prefix (`hmac:<12 hex>`), so equal values still correlate
across records and captures without being recoverable. The key is `$ERASCOPE_REDACT_KEY` when set
(share it across hosts to correlate fleet-wide), else a random key created once, mode 0600, under
the erascope state directory.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path
from typing import Final
from urllib.parse import unquote_plus

import orjson

HASH_PREFIX: Final = "hmac:"
_ARG_SECRET = re.compile(
    r"(?i)^(--?[\w-]*(token|secret|password|passwd|api[-_]?key|apikey|auth|credential|bearer)[\w-]*)(=)(.+)$"
)
_ARG_SECRET_FLAG = re.compile(
    r"(?i)^--?[\w-]*(token|secret|password|passwd|api[-_]?key|apikey|auth|credential|bearer)[\w-]*$"
)


def _key_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "erascope" / "redact.key"


def load_key() -> bytes:
    """The redaction key: `$ERASCOPE_REDACT_KEY`, else a per-host key file created on first use."""
    env = os.environ.get("ERASCOPE_REDACT_KEY")
    if env:
        return env.encode()
    path = _key_path()
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    except OSError:
        return secrets.token_hex(32).encode()  # unreadable: correlate within this run only
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = secrets.token_hex(32).encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        return key
    except FileExistsError:  # another recorder won the race; use its key
        return path.read_bytes().strip()
    except OSError:
        return secrets.token_hex(32).encode()


class Redactor:
    """Keyed hashing of secret values."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else load_key()

    def hash(self, value: str | bytes) -> str:
        data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        return HASH_PREFIX + hmac.new(self._key, data, hashlib.sha256).hexdigest()[:12]

    def argv(self, argv: list[str]) -> list[str]:
        """A command line with secret-looking option values hashed (`--token=X`, `--api-key X`)."""
        out: list[str] = []
        hide_next = False
        for arg in argv:
            if hide_next:
                out.append(self.hash(arg))
                hide_next = False
                continue
            m = _ARG_SECRET.match(arg)
            if m:
                out.append(f"{m.group(1)}={self.hash(m.group(4))}")
            elif _ARG_SECRET_FLAG.match(arg):
                out.append(arg)
                hide_next = True
            else:
                out.append(arg)
        return out


# --- HTTP ------------------------------------------------------------------------------------------
# Everything below is applied by the HTTP recorder (`addon/http_recorder.py`); header names are
# compared lower-case, values are replaced in place so wire order and duplicates stay visible.

SECRET_HEADERS: Final = (
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "apikey",
    "x-auth-token",
    "x-access-token",
    "x-amz-security-token",
    "x-goog-api-key",
    "ocp-apim-subscription-key",
)
"""Headers whose values are credentials; hashed by default. Extend with `erascope_redact_headers`."""

HASHED_HEADERS: Final = ("mcp-session-id",)
"""Not secrets, but bearer-like handles: hashed so sessions still correlate across records."""

SECRET_QUERY_PARAMS: Final = frozenset(
    {
        "token",
        "key",
        "apikey",
        "api_key",
        "api-key",
        "access_token",
        "refresh_token",
        "id_token",
        "auth",
        "code",
        "sig",
        "signature",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "session",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
    }
)
"""Query parameter names whose values are hashed; names ending in `_token`/`_key`/`_secret` too."""

_QUERY_SECRET_SUFFIXES: Final = ("_token", "-token", "_key", "-key", "_secret", "-secret")
_AUTH_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9._~+/-]*) +(\S.*)$")

BODIES_FULL: Final = "full"
"""Bodies recorded exactly (the default)."""
BODIES_METADATA: Final = "metadata"
"""Bodies reduced to the JSON-RPC envelope: ids, methods, `_meta`, versions and errors stay;
tool arguments, result contents and log data become `{"$redacted": {"len": N, "hash": "hmac:…"}}`."""
BODY_POLICIES: Final = (BODIES_FULL, BODIES_METADATA)

REDACTED_KEY: Final = "$redacted"
_PARAMS_CONTENT: Final = frozenset({"arguments", "data", "messages", "argument", "context"})
_RESULT_CONTENT: Final = frozenset({"content", "structuredContent", "contents", "messages", "completion"})


def is_secret_query_param(name: str) -> bool:
    """Whether a query parameter's value is a credential (by name)."""
    low = name.lower()
    return low in SECRET_QUERY_PARAMS or low.endswith(_QUERY_SECRET_SUFFIXES)


def _redact_query(redactor: Redactor, query: str) -> str:
    parts = query.split("&")
    for i, part in enumerate(parts):
        name, sep, value = part.partition("=")
        if sep and value and is_secret_query_param(_unquote(name)):
            parts[i] = f"{name}={redactor.hash(_unquote(value))}"
    return "&".join(parts)


def _unquote(text: str) -> str:
    return unquote_plus(text)


def _marker(redactor: Redactor, value: object) -> dict[str, object]:
    data = orjson.dumps(value)
    return {REDACTED_KEY: {"len": len(data), "hash": redactor.hash(data)}}


def _metadata_message(redactor: Redactor, msg: object) -> object:
    if not isinstance(msg, dict):
        return _marker(redactor, msg)
    out = dict(msg)
    params = out.get("params")
    if isinstance(params, dict):
        out["params"] = {k: _marker(redactor, v) if k in _PARAMS_CONTENT else v for k, v in params.items()}
    result = out.get("result")
    if isinstance(result, dict):
        out["result"] = {k: _marker(redactor, v) if k in _RESULT_CONTENT else v for k, v in result.items()}
    return out


class HttpRedaction:
    """The HTTP redaction policy of one recorder: which headers, query values and body parts to hide.

    `enabled=False` records everything as it passed (no hashing at all); `bodies` is `full` or
    `metadata` and applies independently of `enabled`.
    """

    def __init__(
        self,
        redactor: Redactor | None = None,
        *,
        enabled: bool = True,
        bodies: str = BODIES_FULL,
        extra_headers: tuple[str, ...] | list[str] = (),
    ) -> None:
        if bodies not in BODY_POLICIES:
            raise ValueError(f"body policy must be one of {', '.join(BODY_POLICIES)}, not {bodies!r}")
        self.redactor = redactor if redactor is not None else Redactor()
        self.enabled = enabled
        self.bodies = bodies
        self.secret_headers = frozenset(h.lower() for h in (*SECRET_HEADERS, *extra_headers))

    def describe(self) -> dict[str, object]:
        """The policy as recorded in the capture header's `redaction` field."""
        return {
            "mode": "hash" if self.enabled else "off",
            "bodies": self.bodies,
            "headers": sorted(self.secret_headers) if self.enabled else [],
            "hashed": list(HASHED_HEADERS) if self.enabled else [],
            "query": "secret-named parameters" if self.enabled else "off",
        }

    def header_value(self, name: str, value: str) -> str:
        """One header value as it may be recorded."""
        if not self.enabled:
            return value
        low = name.lower()
        if low in HASHED_HEADERS:
            return self.redactor.hash(value)
        if low not in self.secret_headers:
            return value
        if low in ("cookie", "set-cookie"):
            return self._cookie(value, low == "set-cookie")
        m = _AUTH_SCHEME.match(value)
        if m and low.endswith("authorization"):
            # the scheme (Bearer, Basic, …) says how a client authenticates; only the credential is secret
            return f"{m.group(1)} {self.redactor.hash(m.group(2))}"
        return self.redactor.hash(value)

    def _cookie(self, value: str, set_cookie: bool) -> str:
        # cookie names and attributes (Path, Expires, HttpOnly) are not secret and help correlate
        pieces = value.split(";")
        end = 1 if set_cookie else len(pieces)
        for i in range(end):
            name, sep, val = pieces[i].partition("=")
            pieces[i] = f"{name}={self.redactor.hash(val)}" if sep else self.redactor.hash(pieces[i])
        return ";".join(pieces)

    def headers(self, fields: list[tuple[str, str]]) -> list[list[str]]:
        """Headers in wire order as `[name, value]` pairs, secrets hashed."""
        return [[name, self.header_value(name, value)] for name, value in fields]

    def url(self, url: str) -> str:
        """The URL with the values of secret-named query parameters hashed (fragment untouched)."""
        if not self.enabled or "?" not in url:
            return url
        head, _, rest = url.partition("?")
        query, hash_sep, fragment = rest.partition("#")
        return f"{head}?{_redact_query(self.redactor, query)}{hash_sep}{fragment}"

    def body(self, data: bytes) -> tuple[bytes, str]:
        """A JSON-RPC body (one message or a batch) under the body policy, and the policy applied.

        In `metadata` mode a body that is not JSON becomes a single `$redacted` marker, so nothing
        unparsed slips through; an empty body stays empty.
        """
        if self.bodies == BODIES_FULL or not data:
            return data, self.bodies

        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            return orjson.dumps({REDACTED_KEY: {"len": len(data), "hash": self.redactor.hash(data)}}), self.bodies
        if isinstance(doc, list):
            reduced: object = [_metadata_message(self.redactor, m) for m in doc]
        else:
            reduced = _metadata_message(self.redactor, doc)
        return orjson.dumps(reduced), self.bodies
