"""The import graph of wheeler2/, agents/, envs/ and tasks/ has no circles and keeps its layers.

Every ``.py`` file under those folders is parsed with ``ast`` (nothing is imported). Which
imports count: every ``import`` and ``from ... import`` statement anywhere in a file, at module
level, inside functions and methods, under ``if TYPE_CHECKING:`` and in ``try`` blocks. A
function-level import is still a dependency (it runs when the function does), and a type-only
one is a dependency of the design (the circle between ``buffer/writer.py`` and
``buffer/replay.py`` ran through one). What an import points at: the module it names
(``from a.b import c`` is ``a.b.c`` when that is a module of ours, else ``a.b``); the packages
Python runs on the way (``a``, ``a.b``) are not counted, or every module would depend on its own
package. Imports of anything outside the four folders are ignored.

A failure names the modules of each circle, or the file, line and import that breaks a layer.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("wheeler2", "agents", "envs", "tasks")
# The folders installed under the wheeler2 name (setup.cfg package_dir): their modules are named
# as they are imported, agents/ddpg.py is wheeler2.agents.ddpg.
INSTALLED = {"agents": "wheeler2.agents", "envs": "wheeler2.envs", "tasks": "wheeler2.tasks"}
ENGINE = "engine"  # wheeler2/ itself: wheeler2.* outside the installed folders

# (importer, imported, why): no module under the first may import one under the second.
FORBIDDEN = [
    ("wheeler2.agents", "wheeler2.buffer", "agents/ uses the engine's interfaces, not its replay"),
    ("wheeler2.agents", "wheeler2.runtime", "agents/ uses the engine's interfaces, not runtime"),
    ("wheeler2.buffer", "wheeler2.runtime", "the buffer sits below the runtime"),
    ("wheeler2.config", "wheeler2.runtime", "config/ only parses; runtime/ builds and checks"),
    (ENGINE, "wheeler2.agents", "the engine finds algorithms by name, through the registry"),
    (ENGINE, "wheeler2.tasks", "the engine finds tasks by name, through the registry"),
    (ENGINE, "wheeler2.envs", "the engine finds env adapters by name, through the registry"),
]
# Leaf modules: what each may import of ours (nothing else), so the circles they cut stay cut.
LEAVES = {
    "wheeler2.errors": set(),
    "wheeler2.process": set(),
    "wheeler2.needs": {"wheeler2.schema"},
    "wheeler2.envs.spaces": set(),
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    file: str
    line: int
    text: str

    def where(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def module_files(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the packages."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            parts[0] = INSTALLED.get(parts[0], parts[0])
            out[".".join(parts)] = path
    return out


def _ours(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest module of ours that ``name`` is or lies in; None outside the packages."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_edges(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Edge]:
    modules = module_files(root, packages)
    edges = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_ours(alias.name, modules) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the package, up level - 1 packages
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    name = f"{source}.{alias.name}"
                    targets.append(name if name in modules else _ours(source, modules))
            for target in dict.fromkeys(targets):
                if target is not None and target != module:
                    edges.append(Edge(module, target, rel, node.lineno, ast.unparse(node)))
    return edges


def circles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _under(module: str, prefix: str) -> bool:
    if prefix == ENGINE:
        return _under(module, "wheeler2") and not any(_under(module, p) for p in INSTALLED.values())
    return module == prefix or module.startswith(prefix + ".")


def layer_breaks(edges: list[Edge]) -> list[str]:
    out = []
    for e in edges:
        for source, target, why in FORBIDDEN:
            if _under(e.source, source) and _under(e.target, target):
                out.append(f"{e.where()}  ({source} must not import {target}: {why})")
        allowed = LEAVES.get(e.source)
        if allowed is not None and e.target not in allowed:
            out.append(f"{e.where()}  ({e.source} is a leaf module: it imports none of ours)")
    return out


def describe(found: list[list[str]], edges: list[Edge]) -> str:
    lines = []
    for component in found:
        members = set(component)
        lines.append("circle: " + " <-> ".join(component))
        lines += [f"  {e.where()}" for e in edges if e.source in members and e.target in members]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return import_edges(ROOT)


def test_the_walk_sees_every_kind_of_import(edges: list[Edge]) -> None:
    """A walker that missed imports would pass everything: check it sees each kind counted."""
    pairs = {(e.source, e.target) for e in edges}
    assert ("wheeler2.runtime.member", "wheeler2.buffer") in pairs  # module level
    assert ("wheeler2.runtime.experiment", "wheeler2.runtime.restore") in pairs  # in a function
    assert ("wheeler2.runtime.seeds", "wheeler2.runtime.plan") in pairs  # under TYPE_CHECKING
    assert ("wheeler2.buffer.replay", "wheeler2.buffer.writer") in pairs  # relative
    assert ("wheeler2.envs.gym", "wheeler2.envs.envpool_vec") in pairs  # in a function, one way
    assert len(module_files(ROOT)) > 100


def test_no_import_circles(edges: list[Edge]) -> None:
    found = circles(edges)
    assert not found, "import circles (cut each one):\n" + describe(found, edges)


def test_layers_hold(edges: list[Edge]) -> None:
    broken = layer_breaks(edges)
    assert not broken, "imports that break a layer:\n" + "\n".join(broken)


def test_a_circle_through_a_function_import_and_a_layer_break_are_named(tmp_path: Path) -> None:
    """The checks themselves, on a small tree: a circle closed by an import inside a function,
    and a buffer module importing the runtime, are both reported with file and line."""
    pkg = tmp_path / "wheeler2"
    (pkg / "buffer").mkdir(parents=True)
    (pkg / "runtime").mkdir()
    for init in (pkg, pkg / "buffer", pkg / "runtime"):
        (init / "__init__.py").write_text("")
    (pkg / "buffer" / "a.py").write_text("from . import b\n")
    (pkg / "buffer" / "b.py").write_text("def f():\n    from wheeler2.buffer.a import x\n")
    (pkg / "buffer" / "c.py").write_text("from wheeler2.runtime import d\n")
    (pkg / "runtime" / "d.py").write_text("")
    found = import_edges(tmp_path, ("wheeler2",))
    assert circles(found) == [["wheeler2.buffer.a", "wheeler2.buffer.b"]]
    assert "wheeler2/buffer/b.py:2: from wheeler2.buffer.a import x" in describe(
        circles(found), found
    )
    (broken,) = layer_breaks(found)
    assert broken.startswith("wheeler2/buffer/c.py:1: from wheeler2.runtime import d")
