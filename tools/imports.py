"""The package's structure from its own imports: who uses whom, in floors, and any circle.

Python: every module under ``python/resourceslice`` and the modules it imports from the
package (imports under ``if TYPE_CHECKING:`` left out: they never run). Rust: every module of
``rust/src`` and the crate modules it names (``use crate::…``, ``crate::…`` paths, ``super::``).
A module's floor is one above the highest floor it uses (floor 0 uses nothing of ours), so a
graph without a circle reads bottom to top. ``--rooms`` joins each package's modules into one
room (``resourceslice.kubeletplugin``, ``validate``), the granularity at which structure is
usually discussed.

    python tools/imports.py            # both languages, module by module
    python tools/imports.py --rooms    # rooms only
    python tools/imports.py --check    # exit 1 if there is a circle
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / "python"
PACKAGE = "resourceslice"
RUST = ROOT / "rust" / "src"
# Generated code (protobuf/gRPC): not ours to structure.
SKIPPED = ("resourceslice.kubeletplugin._pb",)

Graph = dict[str, set[str]]


def _python_module(path: Path) -> str:
    parts = list(path.relative_to(PYTHON).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.Module, module: str, is_package: bool) -> Iterable[str]:
    """The dotted names ``tree`` imports at run time (``from a import b`` gives ``a.b``,
    which resolves to ``a`` when ``b`` is not a module)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def python_graph() -> Graph:
    files = {
        _python_module(p): p
        for p in (PYTHON / PACKAGE).rglob("*.py")
        if not _python_module(p).startswith(SKIPPED)
    }
    # The Rust extension, known by its stub: it imports nothing of ours.
    extension = f"{PACKAGE}._core"
    graph: Graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        uses = set()
        for name in _imported(tree, module, path.name == "__init__.py"):
            # The longest prefix that is one of our modules.
            if name.startswith(SKIPPED):
                continue
            parts = name.split(".")
            while parts and ".".join(parts) not in files and ".".join(parts) != extension:
                parts.pop()
            target = ".".join(parts)
            if target and target != module:
                uses.add(target)
        graph[module] = uses
    graph[extension] = set()
    return graph


def _rust_module(path: Path) -> str:
    parts = list(path.relative_to(RUST).with_suffix("").parts)
    if parts[-1] in ("lib", "mod"):
        parts.pop()
    return "::".join(["crate", *parts])


_CRATE_PATH = re.compile(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)+)")
_USE_GROUP = re.compile(r"\buse\s+(crate|super)::\{([^}]*)\}")
_MOD = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)


def rust_graph() -> Graph:
    files = {_rust_module(p): p for p in RUST.rglob("*.rs")}
    graph: Graph = {}
    for module, path in files.items():
        text = re.sub(r"//[^\n]*", "", path.read_text())
        # Test modules inside a file use their parent (`super::*`): not a dependency.
        text = text.split("#[cfg(test)]")[0]
        is_dir_module = path.name in ("lib.rs", "mod.rs")
        parent = module if is_dir_module else module.rpartition("::")[0]
        paths = [(m.group(1), m.group(2)) for m in _CRATE_PATH.finditer(text)]
        for m in _USE_GROUP.finditer(text):
            paths += [(m.group(1), "::" + item.strip()) for item in m.group(2).split(",")]
        # A parent names its own child modules, and theirs, without `crate::`
        # (`decode::Record`, `plan::pool::plan_pool`).
        if is_dir_module:
            for child in _MOD.findall(text):
                for rest in re.findall(rf"\b(?<!::){child}((?:::[a-z_][a-z0-9_]*)*)::", text):
                    paths.append(("self", f"::{child}{rest}"))
        uses = set()
        for root, rest in paths:
            base = {"crate": "crate", "self": module}.get(root, parent)
            parts = [base, *[p for p in rest.split("::") if p]]
            while len(parts) > 1 and "::".join(parts) not in files:
                parts.pop()
            target = "::".join(parts)
            if target in files and target not in (module, "crate"):
                uses.add(target)
        graph[module] = uses
    return graph


def rooms(graph: Graph, sep: str, depth: int) -> Graph:
    """Modules joined by their first ``depth`` name parts."""

    def room(module: str) -> str:
        return sep.join(module.split(sep)[:depth])

    out: Graph = {}
    for module, uses in graph.items():
        out.setdefault(room(module), set()).update(room(u) for u in uses)
    for r, uses in out.items():
        uses.discard(r)
    return out


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def floors(graph: Graph) -> dict[str, int]:
    """Each module's floor; the modules of a circle share the floor of the circle."""
    component_of = {m: tuple(c) for c in circles(graph) for m in c}
    floor: dict[str, int] = {}

    def of(module: str, seen: frozenset[str]) -> int:
        if module in floor:
            return floor[module]
        group = component_of.get(module, (module,))
        uses = {u for m in group for u in graph.get(m, ()) if u not in group}
        level = 1 + max((of(u, seen | set(group)) for u in uses if u not in seen), default=-1)
        for m in group:
            floor[m] = level
        return level

    for module in graph:
        of(module, frozenset())
    return floor


def report(title: str, graph: Graph) -> list[list[str]]:
    found = circles(graph)
    floor = floors(graph)
    edges = sum(len(u) for u in graph.values())
    top = max(floor.values(), default=-1) + 1
    print(f"{title}: {len(graph)} modules on {top} floors, {edges} arrows")
    for module in sorted(graph, key=lambda m: (-floor[m], m)):
        uses = ", ".join(sorted(graph[module])) or "-"
        print(f"  [{floor[module]}] {module} -> {uses}")
    print(f"  circles: {found or 'none'}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rooms", action="store_true", help="join each package's modules")
    parser.add_argument("--check", action="store_true", help="exit 1 if there is a circle")
    args = parser.parse_args(argv)
    python, rust = python_graph(), rust_graph()
    if args.rooms:
        python, rust = rooms(python, ".", 2), rooms(rust, "::", 2)
    found = report("Python", python) + report("Rust", rust)
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
