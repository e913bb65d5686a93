"""Every module of the packages compiles on every Python the project supports (`requires-python`).

Python 3.13's compiler dedents docstrings itself, through UTF-8: a docstring holding a lone
surrogate (a `\\udcff` escape written in a non-raw docstring) made `import analyzer.cli` fail there
with a UnicodeEncodeError, so the installed `erascope` did not start at all. The suite runs on 3.12,
where the same source compiles, so the check is twofold: the docstrings themselves, on any Python,
and a real 3.13 compiling every file when one is installed (pyenv's, as on the project's machines).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for package in ("addon", "analyzer", "bench", "tests") for p in (ROOT / package).rglob("*.py"))
_NOT_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")
"""What a docstring only holds when an escape meant as text was read as one (`\\x1b`, `\\udcff`)."""


def _docstrings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_bytes(), str(path))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    found = []
    for node in nodes:
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            found.append((first.lineno, first.value.value))
    return found


def test_no_docstring_holds_a_control_character_or_a_lone_surrogate() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {_NOT_TEXT.search(text)[0]!r}"  # type: ignore[index]
        for path in SOURCES
        for line, text in _docstrings(path)
        if _NOT_TEXT.search(text)
    ]
    assert not bad, 'write these docstrings raw (r"""…"""):\n' + "\n".join(bad)


def _python_313() -> str | None:
    """A Python 3.13 interpreter: pyenv's (its shims only run versions pyenv was told to), else PATH's."""
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    if shutil.which("pyenv"):
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=False).stdout.strip() or root
    candidates = sorted(Path(root).glob("versions/3.13*/bin/python3.13"))
    if candidates:
        return str(candidates[-1])
    found = shutil.which("python3.13")
    return found if found and "shims" not in Path(found).parts else None


def test_every_module_compiles_on_python_3_13() -> None:
    python = _python_313()
    if python is None:
        pytest.skip("no Python 3.13 here (PATH or pyenv)")
    script = (
        "import sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        compile(open(path, 'rb').read(), path, 'exec')\n"
        "    except Exception as exc:\n"
        "        print(f'{path}: {type(exc).__name__}: {exc}')\n"
    )
    packages = [str(p) for p in SOURCES if p.parts[len(ROOT.parts)] in ("addon", "analyzer")]
    result = subprocess.run([python, "-c", script, *packages], capture_output=True, text=True, check=True)
    assert len(packages) > 40
    assert result.stdout == "", result.stdout
