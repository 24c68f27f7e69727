"""The import graph of a source tree, read with :mod:`ast` (nothing is imported or run).

Used by ``tests/unit/test_layering.py`` (the layering rules) and ``benchmarks/arch_figures.py``
(the architecture figures), so both read the graph the same way.

    graph = import_graph(Path("src/splitserve"))
    graph.imports                      # every import, at any depth, relative ones resolved
    module_cycles(graph)               # strongly connected components of the module graph
    package_cycles(graph)              # the same over top-level packages
    private_imports(graph)             # `splitserve.X._y` imported from outside package X

Every import counts, at any depth: one inside a function or under ``if TYPE_CHECKING:`` is still
a dependency (a lazy import that closes a cycle hides the cycle, it does not remove it).  Each
:class:`Import` says whether it runs at import time (not in a function body, not under
``TYPE_CHECKING``) for callers that want the import-time graph only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Import:
    """One imported module: ``source`` imports ``target`` (a dotted name, inside the tree or not)."""

    source: str
    target: str
    line: int
    import_time: bool

    def __str__(self) -> str:
        return f"{self.source} imports {self.target} (line {self.line})"


@dataclass
class ImportGraph:
    """The modules of one package tree and what each imports."""

    root: str
    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)

    def internal(self, *, import_time_only: bool = False) -> list[Import]:
        """The imports whose target is a module of the tree."""
        return [i for i in self.imports if i.target in self.modules and (i.import_time or not import_time_only)]

    def package_of(self, module: str) -> str:
        """The top-level package (``splitserve.plan``) or root module (``splitserve._errors``) of ``module``."""
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 else module


def _module_name(path: Path, base: Path, root: str) -> str:
    rel = path.relative_to(base).with_suffix("")
    parts = [root, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package_dir(d: Path, base: Path) -> bool:
    while True:
        if not (d / "__init__.py").is_file():
            return False
        if d == base:
            return True
        d = d.parent


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, import_time: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under ``node`` with whether it runs at import time."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, import_time
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk(child, False)
        elif isinstance(child, ast.If) and _type_checking(child.test):
            for stmt in child.body:
                yield from _walk_stmt(stmt, False)
            for stmt in child.orelse:
                yield from _walk_stmt(stmt, import_time)
        else:
            yield from _walk(child, import_time)


def _walk_stmt(stmt: ast.stmt, import_time: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        yield stmt, import_time
    else:
        yield from _walk(stmt, import_time)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: Iterable[str]) -> list[str]:
    """The modules one import statement names, relative ones resolved against ``module``."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        parts = package.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, node.module] if node.module else parts)
    else:
        base = node.module or ""
    names = set(known)
    # `from pkg import x` reads `x` from pkg's namespace (running pkg/__init__ first), then imports
    # pkg.x when that is a module: both are dependencies
    return [base, *(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in names)]


def import_graph(package_dir: Path, root: str | None = None) -> ImportGraph:
    """Parse every module of the package at ``package_dir`` (sub-folders without ``__init__.py``
    are data, not modules)."""
    package_dir = package_dir.resolve()
    graph = ImportGraph(root or package_dir.name)
    for path in sorted(package_dir.rglob("*.py")):
        if _is_package_dir(path.parent, package_dir):
            graph.modules[_module_name(path, package_dir, graph.root)] = path
    for module, path in graph.modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node, import_time in _walk(tree, True):
            for target in _targets(node, module, is_package, graph.modules):
                graph.imports.append(Import(module, target, node.lineno, import_time))
    return graph


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member (or a self-loop), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    for start in nodes:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    scc: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        scc.append(member)
                        if member == node:
                            break
                    if len(scc) > 1 or node in edges.get(node, ()):
                        found.append(sorted(scc))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def cycle_chain(edges: dict[str, set[str]], members: list[str]) -> list[str]:
    """One cycle through the first member of an SCC, as ``[a, b, ..., a]`` (breadth-first, shortest)."""
    inside = set(members)
    start = members[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for child in sorted(edges.get(node, ())):
                if child not in inside:
                    continue
                if child == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return [*reversed(chain), start]
                if child not in previous:
                    previous[child] = node
                    nxt.append(child)
        frontier = nxt
    return [start]


def _edges(imports: Iterable[Import], key: str = "module", graph: ImportGraph | None = None) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for i in imports:
        if key == "package" and graph is not None:
            a, b = graph.package_of(i.source), graph.package_of(i.target)
            if a != b:
                edges.setdefault(a, set()).add(b)
        else:
            edges.setdefault(i.source, set()).add(i.target)
    return edges


def module_edges(
    graph: ImportGraph, exclude: Iterable[str] = (), *, import_time_only: bool = False
) -> dict[str, set[str]]:
    """Edges between modules of the tree, leaving out imports made by ``exclude``."""
    skip = set(exclude)
    return _edges(i for i in graph.internal(import_time_only=import_time_only) if i.source not in skip)


def package_edges(graph: ImportGraph, exclude: Iterable[str] = ()) -> dict[str, set[str]]:
    """Edges between top-level packages (every import), leaving out imports made by ``exclude``."""
    skip = set(exclude)
    return _edges((i for i in graph.internal() if i.source not in skip), "package", graph)


def module_cycles(
    graph: ImportGraph, exclude: Iterable[str] = (), *, import_time_only: bool = False
) -> list[list[str]]:
    """The import cycles between modules (SCCs of the module graph)."""
    return strongly_connected(module_edges(graph, exclude, import_time_only=import_time_only))


def package_cycles(graph: ImportGraph, exclude: Iterable[str] = ()) -> list[list[str]]:
    """The cycles between top-level packages."""
    return strongly_connected(package_edges(graph, exclude))


def is_private_import(graph: ImportGraph, imp: Import) -> bool:
    """Whether ``imp`` reaches into another top-level package's private module (``splitserve.X._y``,
    or anything below it, from outside ``splitserve.X``)."""
    target = imp.target.split(".")
    if target[0] != graph.root or len(target) < 3 or imp.target not in graph.modules:
        return False
    if graph.package_of(imp.source) == graph.package_of(imp.target):
        return False
    return any(part.startswith("_") and not part.startswith("__") for part in target[2:])


def private_imports(graph: ImportGraph) -> list[Import]:
    """Every cross-package private import, in source order."""
    return [i for i in graph.imports if is_private_import(graph, i)]
