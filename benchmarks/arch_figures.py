"""Architecture figures of src/splitserve, from its import graph (the one tests/unit/test_layering.py checks).

- lines in src/splitserve/cli (the CLI should stay thin),
- module-level import cycles (strongly connected components of the import-time graph, with members),
- package cycles (between top-level packages, every import counted),
- cross-package private imports (`splitserve.X._y` from outside X): unique (module, target) pairs,
  and how many of them come from outside cli.

    .venv/bin/python benchmarks/arch_figures.py            # a table, then the JSON
    .venv/bin/python benchmarks/arch_figures.py --json     # the JSON only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from splitserve._imports import import_graph, module_cycles, package_cycles, private_imports

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "splitserve"


def figures(src: Path = SRC) -> dict[str, Any]:
    """The figures as one JSON-ready dict."""
    graph = import_graph(src)
    cli_lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in sorted((src / "cli").glob("*.py")))
    mod = module_cycles(graph)
    pkg = package_cycles(graph)
    pairs = sorted({(i.source, i.target) for i in private_imports(graph)})
    outside_cli = [p for p in pairs if graph.package_of(p[0]) != f"{graph.root}.cli"]
    return {
        "cli_lines": cli_lines,
        "module_cycles": {"scc_count": len(mod), "members": mod},
        "package_cycles": {"scc_count": len(pkg), "members": pkg},
        "private_imports": {
            "unique_pairs": len(pairs),
            "outside_cli": len(outside_cli),
            "pairs": [f"{a} -> {b}" for a, b in pairs],
        },
    }


def table(f: dict[str, Any]) -> str:
    rows = [
        ("lines in src/splitserve/cli", str(f["cli_lines"])),
        ("module-level cycles (SCCs)", str(f["module_cycles"]["scc_count"])),
        ("modules in those cycles", str(sum(len(m) for m in f["module_cycles"]["members"]))),
        ("package cycles (SCCs)", str(f["package_cycles"]["scc_count"])),
        ("cross-package private imports (pairs)", str(f["private_imports"]["unique_pairs"])),
        ("  of which outside cli", str(f["private_imports"]["outside_cli"])),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v:>6}" for k, v in rows]
    for scc in f["module_cycles"]["members"]:
        lines.append("module cycle: " + ", ".join(scc))
    for scc in f["package_cycles"]["members"]:
        lines.append("package cycle: " + ", ".join(scc))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the JSON only")
    ap.add_argument("--src", type=Path, default=SRC, help="the package folder (default: src/splitserve)")
    args = ap.parse_args(argv)
    f = figures(args.src)
    if not args.json:
        print(table(f))
    print(json.dumps(f, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
