"""The import rules of docs/architecture.md: import-linter's contracts in pyproject.toml, run by
``lint-imports`` (scripts/lint.sh), kept by the tree and broken by a tree that breaks them.

Plus two rules import-linter cannot say, checked here on grimp's graph (the graph import-linter
reads):

- ``model`` imports only ``gguf``, ``numpy``, the standard library and splitserve's own modules.
  import-linter's ``forbidden`` contract is a deny-list; this is an allow-list, so a new
  dependency (``rich``, ``pydantic``) cannot slip into the pure model layer unnamed.
- no module imports a package that contains it while that package's ``__init__`` imports the
  module back: a cycle through the ``__init__``, which ``acyclic_siblings`` does not see (it
  compares siblings, and a package is no sibling of its own modules).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
MODEL_THIRD_PARTY = {"gguf", "numpy"}


def contract_names() -> list[str]:
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    return [c["name"] for c in config["contracts"]]


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` as scripts/lint.sh runs it; it puts ``cwd`` first on sys.path, so a
    ``splitserve`` folder there is the tree it reads."""
    env = {**os.environ, "COLUMNS": "400"}  # one contract per line, not wrapped at 80 columns
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(PYPROJECT)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    names = contract_names()
    assert len(names) == 4
    result = lint_imports(tmp_path)  # no splitserve in tmp_path: the installed (editable) src/splitserve
    assert result.returncode == 0, result.stdout + result.stderr
    for name in names:
        assert f"{name} KEPT" in result.stdout
    assert f"Contracts: {len(names)} kept, 0 broken." in result.stdout


BAD_IMPORTS = {
    # eval and bench are independent layers: neither may import the other
    "eval/_bad_layer.py": "from splitserve import bench\n",
    # a pure layer starting a process
    "chat/_bad_io.py": "import subprocess\n",
    # gateway may use cluster, but through its __init__ (the private module: PRIVATE below)
    "gateway/_bad_private.py": "import splitserve.cluster.{private}\n",
    # a cycle between two modules of one package (no cycle between packages)
    "fetch/_bad_a.py": "from . import _bad_b\n",
    "fetch/_bad_b.py": "def f() -> None:\n    from . import _bad_a\n",  # in a function: still an import
}


def test_each_contract_fails_on_a_tree_that_breaks_it(tmp_path: Path) -> None:
    shutil.copytree(REPO / "src" / "splitserve", tmp_path / "splitserve", ignore=shutil.ignore_patterns("__pycache__"))
    private = min(p.stem for p in (tmp_path / "splitserve" / "cluster").glob("_[a-z]*.py"))
    for rel, text in BAD_IMPORTS.items():
        (tmp_path / "splitserve" / rel).write_text(text.format(private=private), encoding="utf-8")
    result = lint_imports(tmp_path)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    names = contract_names()
    for name in names:
        assert f"{name} BROKEN" in out
    assert f"Contracts: 0 kept, {len(names)} broken." in out
    # each violation is named with its module
    broken = out.split("Broken contracts", 1)[1]
    for module in ("splitserve.eval._bad_layer", "splitserve.chat._bad_io", "splitserve.gateway._bad_private"):
        assert module in broken
    assert f"splitserve.cluster.{private}" in broken
    assert "splitserve.fetch" in broken and "._bad_b -> ._bad_a" in broken


def model_imports_outside_allowlist(graph: grimp.ImportGraph, root: str = "splitserve") -> list[str]:
    """``importer -> imported`` for each import of the model layer other than gguf, numpy, the
    standard library and splitserve's own modules (the layers contract places those)."""
    layer = f"{root}.model"
    bad = []
    for importer in sorted({layer} | graph.find_descendants(layer)):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            top = imported.split(".")[0]
            if top in (root, "__future__") or top in sys.stdlib_module_names or top in MODEL_THIRD_PARTY:
                continue
            bad.append(f"{importer} -> {imported}")
    return bad


def test_model_imports_only_gguf_numpy_the_stdlib_and_splitserve() -> None:
    graph = grimp.build_graph("splitserve", include_external_packages=True, cache_dir=None)
    assert "splitserve.model._gguf" in graph.modules and "gguf" in graph.modules  # the graph was read
    assert model_imports_outside_allowlist(graph) == []


@pytest.mark.parametrize(("imported", "bad"), [("rich", True), ("pydantic", True), ("gguf", False), ("json", False)])
def test_the_model_rule_names_a_third_party_import(imported: str, bad: bool) -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.model", "pkg.model._read", "pkg._errors"):
        graph.add_module(module)
    graph.add_module(imported, is_squashed=True)
    graph.add_import(importer="pkg.model._read", imported="pkg._errors")
    graph.add_import(importer="pkg.model._read", imported=imported)
    expected = [f"pkg.model._read -> {imported}"] if bad else []
    assert model_imports_outside_allowlist(graph, root="pkg") == expected


def cycles_through_own_package(graph: grimp.ImportGraph) -> list[str]:
    """``module -> package -> ... -> module`` for each module that imports a package containing it
    while that package imports it back (directly or not)."""
    found = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if module.startswith(imported + "."):
                chain = graph.find_shortest_chain(importer=imported, imported=module)
                if chain is not None:
                    found.append(" -> ".join((module, *chain)))
    return found


def test_no_module_imports_its_own_package_back() -> None:
    graph = grimp.build_graph("splitserve", cache_dir=None)
    assert "splitserve.cli._app" in graph.modules
    assert cycles_through_own_package(graph) == []


def test_a_cycle_through_a_package_init_is_named() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.a._x", "pkg.a._y"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.a._x")  # __init__ re-exports _x
    graph.add_import(importer="pkg.a._x", imported="pkg.a._y")
    graph.add_import(importer="pkg.a._y", imported="pkg")  # the root imports nothing back: fine
    assert cycles_through_own_package(graph) == []
    graph.add_import(importer="pkg.a._y", imported="pkg.a")  # reads the package it is part of
    assert cycles_through_own_package(graph) == ["pkg.a._y -> pkg.a -> pkg.a._x -> pkg.a._y"]
