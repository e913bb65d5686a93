"""The two readers of captures (JSONL: `analyzer.load`, Parquet archives: `analyzer.archive`) meet in
`analyzer.facts` and import nothing of each other's reading: no import circle among the analyzer's
modules, and none hidden inside a function either."""

from __future__ import annotations

import ast
from pathlib import Path

ANALYZER = Path(__file__).resolve().parent.parent / "analyzer"


def _imports(path: Path) -> set[str]:
    """Every `analyzer.*` module `path` imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("analyzer"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("analyzer"))
    return found


def _graph() -> dict[str, set[str]]:
    modules = {
        ".".join(("analyzer", *p.relative_to(ANALYZER).with_suffix("").parts)).removesuffix(".__init__"): p
        for p in ANALYZER.rglob("*.py")
    }
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def test_no_import_circle_among_the_analyzer_modules() -> None:
    graph = _graph()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import circle: " + " -> ".join([*path[path.index(name) :], name]))
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_readers_share_only_the_facts_module() -> None:
    graph = _graph()
    assert "analyzer.load" not in graph["analyzer.archive"] and "analyzer.compact" not in graph["analyzer.archive"]
    assert "analyzer.compact" not in graph["analyzer.load"]
    assert "analyzer.facts" in graph["analyzer.archive"] and "analyzer.facts" in graph["analyzer.load"]
    assert not {"analyzer.load", "analyzer.archive", "analyzer.compact"} & graph["analyzer.facts"]
