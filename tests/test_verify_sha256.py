"""Captures chained with SHA-256 or HMAC-SHA256 (what the recorders wrote before BLAKE3 became their
default) verify as before, and an edit in them is found at its file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from addon import chain
from addon import format as fmt
from addon.writer import CaptureWriter
from analyzer.verify import Kind, Status, verify

KEY = b"0123456789abcdef-sha256-chains"


@pytest.mark.parametrize(("algorithm", "key"), [(chain.SHA256, None), (chain.HMAC_SHA256, KEY)])
def test_a_sha256_chain_verifies_and_an_edit_in_it_is_found(tmp_path: Path, algorithm: str, key: bytes | None) -> None:
    with CaptureWriter(tmp_path, transport=fmt.STDIO, server="srv", chain_key=key, chain_alg=algorithm) as w:
        for i in range(6):
            data = b'{"jsonrpc":"2.0","id":%d}' % i if i != 3 else b"x" * 100_000  # one sealed from its pieces
            w.write({fmt.F_TYPE: fmt.FRAME, fmt.F_CONN: "c", fmt.F_DIR: fmt.C2S, **fmt.payload_fields(data)})
    (path,) = w.paths
    result = verify([path], key=key)
    (file,) = result.files
    assert (file.status, file.algorithm, result.findings) == (Status.VERIFIED, algorithm, [])
    text = path.read_bytes().splitlines(keepends=True)
    assert b'\\"id\\":1}' in text[2]
    text[2] = text[2].replace(b'\\"id\\":1}', b'\\"id\\":7}')
    path.write_bytes(b"".join(text))
    result = verify([path], key=key)
    assert [(f.file, f.kind, f.line) for f in result.findings][:1] == [(str(path), Kind.CHANGED, 3)]
