"""Architecture figures of src/splitserve, read from the files (nothing is imported or run):

- lines in src/splitserve (every .py file) and in src/splitserve/cli (the CLI should stay thin),
- modules over 600 lines (the project's norm, ../shared/STYLE.md), with their lengths,
- functions and methods over 80 lines (``def`` to its last line), with their lengths,
- names each package exports (its ``__init__``'s ``__all__``),
- cross-package private imports (``splitserve.X._y`` imported from outside X, any depth), from
  grimp's graph, the one ``lint-imports`` checks (scripts/lint.sh),
- with ``--duplicates``: the pairs the ``duplicates`` tool lists in src/ (six shared lines or more).

``--rev REV`` measures a commit instead of the working tree (its src/ taken with ``git archive``),
so before and after come from one script:

    .venv/bin/python benchmarks/arch_figures.py                        # the working tree: a table, then the JSON
    .venv/bin/python benchmarks/arch_figures.py --rev 5d6d81f --json   # a commit, the JSON only
    .venv/bin/python benchmarks/arch_figures.py --compare 5d6d81f --to HEAD --duplicates \\
        --out benchmarks/results/arch_figures.json                     # before and after, side by side
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "splitserve"
MODULE_LINES = 600
FUNCTION_LINES = 80


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _is_module(path: Path, pkg: Path) -> bool:
    """A .py file inside the package tree (folders without ``__init__.py`` hold data, not modules)."""
    d = path.parent
    while d != pkg.parent:
        if not (d / "__init__.py").is_file():
            return False
        d = d.parent
    return True


def _exported(init: Path) -> int | None:
    """The length of ``__all__`` in a package's ``__init__`` (None where it has none)."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and isinstance(
                node.value, (ast.List, ast.Tuple)
            ):
                return len(node.value.elts)
    return None


def _private_imports(src: Path) -> list[str]:
    """``importer -> imported`` where ``imported`` is a private module of another top-level package."""
    sys.path.insert(0, str(src))
    try:
        graph = grimp.build_graph(PACKAGE, cache_dir=None)
    finally:
        sys.path.remove(str(src))
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            parts = imported.split(".")
            if len(parts) < 3 or importer.split(".")[:2] == parts[:2]:
                continue
            if any(p.startswith("_") and not p.startswith("__") for p in parts[2:]):
                found.append(f"{importer} -> {imported}")
    return found


def _duplicates(src: Path) -> dict[str, Any]:
    out = subprocess.run(
        ["duplicates", "--repo", str(src / PACKAGE), "--most", "1", "--seconds", "300"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    first = out.splitlines()[0] if out else ""
    m = re.match(r"(\d+) pairs?", first)
    return {"pairs": int(m.group(1)) if m else 0, "line": first}


def figures(src: Path, *, duplicates: bool = False) -> dict[str, Any]:
    """The figures of the package at ``src/splitserve`` as one JSON-ready dict."""
    pkg = src / PACKAGE
    modules = sorted(p for p in pkg.rglob("*.py") if _is_module(p, pkg))
    lengths = {p.relative_to(src).as_posix(): _lines(p) for p in modules}
    long_functions: dict[str, int] = {}
    for p in modules:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                n = node.end_lineno - node.lineno + 1
                if n > FUNCTION_LINES:
                    long_functions[f"{p.relative_to(src).as_posix()}:{node.lineno} {node.name}"] = n
    exported = {
        init.parent.relative_to(src).as_posix().replace("/", "."): _exported(init)
        for init in sorted(pkg.glob("*/__init__.py"))
    }
    private = _private_imports(src)
    f: dict[str, Any] = {
        "src_lines": sum(lengths.values()),
        "src_modules": len(lengths),
        "cli_lines": sum(n for m, n in lengths.items() if m.startswith(f"{PACKAGE}/cli/")),
        "modules_over_600_lines": {
            "count": sum(n > MODULE_LINES for n in lengths.values()),
            "modules": dict(sorted(((m, n) for m, n in lengths.items() if n > MODULE_LINES), key=lambda x: -x[1])),
        },
        "functions_over_80_lines": {
            "count": len(long_functions),
            "functions": dict(sorted(long_functions.items(), key=lambda x: -x[1])),
        },
        "names_exported_per_package": exported,
        "cross_package_private_imports": {"count": len(private), "imports": private},
    }
    if duplicates:
        f["duplicates_in_src"] = _duplicates(src)
    return f


def figures_at(rev: str, *, duplicates: bool = False) -> dict[str, Any]:
    """The figures of ``rev``'s src/ (extracted with ``git archive`` into a temporary folder)."""
    data = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, check=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        f = figures(Path(tmp) / "src", duplicates=duplicates)
    commit = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True)
    return {"rev": commit.stdout.strip(), **f}


def table(f: dict[str, Any]) -> str:
    rows = [
        ("lines in src/splitserve", str(f["src_lines"])),
        ("modules", str(f["src_modules"])),
        ("lines in src/splitserve/cli", str(f["cli_lines"])),
        (f"modules over {MODULE_LINES} lines", str(f["modules_over_600_lines"]["count"])),
        (f"functions over {FUNCTION_LINES} lines", str(f["functions_over_80_lines"]["count"])),
        ("cross-package private imports", str(f["cross_package_private_imports"]["count"])),
    ]
    if "duplicates_in_src" in f:
        rows.append(("duplicates pairs in src", str(f["duplicates_in_src"]["pairs"])))
    rows += [(f"names exported: {p}", str(n)) for p, n in f["names_exported_per_package"].items()]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v:>6}" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the JSON only")
    ap.add_argument("--rev", help="measure this commit's src/ instead of the working tree")
    ap.add_argument("--compare", metavar="REV", help="before (REV) and after (--to, or the working tree), side by side")
    ap.add_argument(
        "--to", metavar="REV", help="with --compare: the commit to measure as after (default: the working tree)"
    )
    ap.add_argument("--duplicates", action="store_true", help="also count the `duplicates` tool's pairs in src/")
    ap.add_argument("--out", type=Path, help="also write the JSON to this file")
    args = ap.parse_args(argv)
    if args.compare:
        result: dict[str, Any] = {
            "before": figures_at(args.compare, duplicates=args.duplicates),
        }
        if args.to:
            result["after"] = figures_at(args.to, duplicates=args.duplicates)
        else:
            head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
            after = figures(ROOT / "src", duplicates=args.duplicates)
            result["after"] = {"rev": f"{head.stdout.strip()} (working tree)", **after}
        if not args.json:
            for side in ("before", "after"):
                print(f"== {side}: {result[side]['rev']}")
                print(table(result[side]))
    else:
        result = (
            figures_at(args.rev, duplicates=args.duplicates)
            if args.rev
            else figures(ROOT / "src", duplicates=args.duplicates)
        )
        if not args.json:
            print(table(result))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
