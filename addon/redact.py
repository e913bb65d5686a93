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
