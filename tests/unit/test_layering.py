"""The layers of DESIGN.md, checked on the import graph of src/splitserve (read with ast, nothing run).

(a) the pure layers (model, plan, chat) import no I/O layer; plan and chat no subprocess, socket or
    httpx; model only gguf/numpy, the standard library, itself and splitserve's root modules;
(b) nothing outside cli (and ``splitserve.__main__``) imports cli;
(c) no module imports another top-level package's private module (``splitserve.X._y`` from outside X):
    a package is used through its ``__init__``;
(d) no import cycle between packages, and none between modules.

Imports at any depth count (inside functions, under ``if TYPE_CHECKING:``), relative ones resolved.
The graph code is ``splitserve._imports``, shared with ``benchmarks/arch_figures.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import splitserve
from splitserve._imports import (
    Import,
    ImportGraph,
    cycle_chain,
    import_graph,
    is_private_import,
    module_edges,
    package_edges,
    strongly_connected,
)

SRC = Path(splitserve.__file__).resolve().parent
ROOT = "splitserve"
PURE = ("model", "plan", "chat")
IO_LAYERS = ("engine", "cluster", "gateway", "fetch", "bench", "eval", "cli")
NO_IO_MODULES = ("subprocess", "socket", "httpx")
MODEL_THIRD_PARTY = ("gguf", "numpy")


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return import_graph(SRC)


def checked(graph: ImportGraph) -> list[Import]:
    return list(graph.imports)


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == ROOT else None


def top(name: str) -> str:
    return name.split(".")[0]


def report(what: str, bad: list[Import]) -> str:
    return f"{what}:\n" + "\n".join(f"  {i}" for i in bad)


def test_the_graph_is_read(graph: ImportGraph) -> None:
    # a graph that missed the tree would pass every rule below
    assert {"splitserve.plan._spec", "splitserve.cli._app", "splitserve.eval.builtin._state"} <= set(graph.modules)
    assert "splitserve.bench.data.sources.rate_limiter" not in graph.modules  # data, not a module
    assert any(i.source == "splitserve.cli._inspect" and i.target == "splitserve.plan" for i in graph.imports)
    assert len(graph.imports) > 1000


def test_pure_layers_import_no_io_layer(graph: ImportGraph) -> None:
    bad = [
        i
        for i in checked(graph)
        if layer_of(i.source) in PURE and layer_of(i.target) in IO_LAYERS and top(i.target) == ROOT
    ]
    assert not bad, report("a pure layer (model, plan, chat) imports an I/O layer", bad)


def test_plan_and_chat_use_no_processes_sockets_or_http(graph: ImportGraph) -> None:
    bad = [i for i in checked(graph) if layer_of(i.source) in ("plan", "chat") and top(i.target) in NO_IO_MODULES]
    assert not bad, report("plan or chat imports subprocess, socket or httpx", bad)


def test_model_imports_only_gguf_the_stdlib_and_root_modules(graph: ImportGraph) -> None:
    def allowed(target: str) -> bool:
        if top(target) in sys.stdlib_module_names or top(target) in MODEL_THIRD_PARTY or target == "__future__":
            return True
        parts = target.split(".")
        if parts[0] != ROOT:
            return False
        if len(parts) > 1 and parts[1] == "model":
            return True
        # a root module such as splitserve._errors (not a package, not the root package itself)
        return len(parts) == 2 and target in graph.modules and graph.modules[target].name != "__init__.py"

    bad = [i for i in checked(graph) if layer_of(i.source) == "model" and not allowed(i.target)]
    assert not bad, report("model imports something other than gguf, the stdlib and splitserve's root modules", bad)


def test_only_cli_imports_cli(graph: ImportGraph) -> None:
    bad = [
        i
        for i in checked(graph)
        if layer_of(i.target) == "cli" and layer_of(i.source) not in ("cli", "__main__") and top(i.target) == ROOT
    ]
    assert not bad, report("imports the cli from outside it", bad)


def test_no_private_module_of_another_package_is_imported(graph: ImportGraph) -> None:
    bad = [i for i in checked(graph) if is_private_import(graph, i)]
    assert not bad, report("imports another package's private module (import it through the package)", bad)


def chains(edges: dict[str, set[str]]) -> list[str]:
    return [" -> ".join(cycle_chain(edges, scc)) for scc in strongly_connected(edges)]


def test_no_import_cycle_between_packages(graph: ImportGraph) -> None:
    found = chains(package_edges(graph))
    assert not found, "import cycles between packages:\n" + "\n".join(f"  {c}" for c in found)


def test_no_import_cycle_between_modules(graph: ImportGraph) -> None:
    found = chains(module_edges(graph))
    assert not found, "import cycles between modules:\n" + "\n".join(f"  {c}" for c in found)


# The rules fail on a tree that breaks them: each check run on a small tree written here.


def write_tree(base: Path, files: dict[str, str]) -> ImportGraph:
    for rel, text in files.items():
        path = base / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for d in sorted({p.parent for p in (base / "pkg").rglob("*.py")} | {base / "pkg"}):
        (d / "__init__.py").touch()
    return import_graph(base / "pkg")


def test_relative_imports_resolve_and_lazy_ones_count(tmp_path: Path) -> None:
    g = write_tree(
        tmp_path,
        {
            "a/__init__.py": "from ._x import f\n",
            "a/_x.py": "def f():\n    from ..b import _y\n    from ..b._y import g\n",
            "b/_y.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import _x\n",
            "c/_z.py": "from . import _w\n",
            "c/_w.py": "",
        },
    )
    got = {(i.source, i.target, i.import_time) for i in g.imports}
    assert ("pkg.a", "pkg.a._x", True) in got
    assert ("pkg.a._x", "pkg.b._y", False) in got  # in a function: still an import
    assert ("pkg.b._y", "pkg.a._x", False) in got  # under TYPE_CHECKING: still an import
    assert {("pkg.c._z", "pkg.c", True), ("pkg.c._z", "pkg.c._w", True)} <= got  # reads the package too
    private = {(i.source, i.target) for i in g.imports if is_private_import(g, i)}
    assert private == {("pkg.a._x", "pkg.b._y"), ("pkg.b._y", "pkg.a._x")}
    # b._y reads the package pkg.a (its __init__ imports _x) as well as pkg.a._x: one cycle through all three
    assert chains(module_edges(g)) == ["pkg.a -> pkg.a._x -> pkg.b._y -> pkg.a"]
    assert chains(package_edges(g)) == ["pkg.a -> pkg.b -> pkg.a"]
    assert chains(module_edges(g, exclude=["pkg.b._y"])) == []


def test_a_cycle_is_reported_as_a_chain(tmp_path: Path) -> None:
    g = write_tree(
        tmp_path,
        {"p/_a.py": "from ._b import x\n", "p/_b.py": "from ._c import x\n", "p/_c.py": "from ._a import x\n"},
    )
    assert chains(module_edges(g)) == ["pkg.p._a -> pkg.p._b -> pkg.p._c -> pkg.p._a"]
    assert strongly_connected({"s": {"s"}}) == [["s"]]  # a module importing itself
