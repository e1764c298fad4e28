"""The house of elfreg: its rooms (each top-level module and each subpackage) import each other without a circle,
so they stack into floors; the deprecated old paths (``elfreg.moved``) name their new homes as strings and add no
arrow. Every import statement counts, the ones inside functions included (what a room may load at some point)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from helpers import REPO

SRC = REPO / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str | None:
    """``elfreg.eval.scoring`` -> ``elfreg.eval``; ``elfreg.flow`` -> itself; the package's own __init__: None."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else None


def _arrows() -> dict[str, dict[str, str]]:
    """room -> {room it imports: one file:line that does}."""
    modules = {_module_name(p) for p in (SRC / "elfreg").rglob("*.py")}
    arrows: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sorted((SRC / "elfreg").rglob("*.py")):
        here = _module_name(path)
        package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module
                names = [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            else:
                continue
            for name in names:
                src, dst = _room(here), _room(name) if name.split(".")[0] == "elfreg" else None
                if src and dst and src != dst:
                    arrows[src].setdefault(dst, f"{path.relative_to(REPO)}:{node.lineno}")
    return arrows


def _circles(arrows: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one room (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in arrows.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    for room in sorted(arrows):
        if room not in index:
            visit(room)
    return found


def test_the_rooms_import_each_other_without_a_circle():
    arrows = _arrows()
    assert len(arrows) > 20  # the walk found the house (a broken walk would find no circle in nothing)
    circles = _circles(arrows)
    detail = [" -> ".join(c) + ": " + "; ".join(f"{a}->{b} ({arrows[a][b]})" for a in c for b in arrows[a] if b in c)
              for c in circles]
    assert not circles, "\n".join(detail)


def test_the_circle_finder_finds_a_circle():
    arrows = {"a": {"b": "x:1"}, "b": {"c": "x:2"}, "c": {"a": "x:3"}, "d": {"a": "x:4"}}
    assert _circles(arrows) == [["a", "b", "c"]]
    assert _circles({"a": {"b": "x:1"}, "b": {}}) == []


def test_the_task_knowledge_is_the_ground_floor():
    arrows = _arrows()
    assert "elfreg.tasks" in {dst for out in arrows.values() for dst in out}  # everyone reads it
    assert set(arrows.get("elfreg.tasks", {})) == set()  # it reads no other room
