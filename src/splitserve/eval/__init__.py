"""Agentic tool-use evaluation (``splitserve eval``): scenarios, mock tools, graders, statistics.

Needs the ``eval`` extra (inspect-ai, pyyaml, jsonschema).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._records import run_file
from ._scenario import TIERS, Scenario
from ._suite import Problem, Suite, load_suite

if TYPE_CHECKING:  # imported on first use (below): running and reporting pull in httpx and matplotlib
    from ._bfcl import bfcl_categories
    from ._report import write_compare, write_report
    from ._run import RunOptions, run
    from ._sandbox import docker_problem

#: name -> the module that defines it, imported on first use
_LAZY = {
    "bfcl_categories": "_bfcl",
    "docker_problem": "_sandbox",
    "RunOptions": "_run",
    "run": "_run",
    "write_compare": "_report",
    "write_report": "_report",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "TIERS",
    "Problem",
    "RunOptions",
    "Scenario",
    "Suite",
    "bfcl_categories",
    "docker_problem",
    "load_suite",
    "run",
    "run_file",
    "write_compare",
    "write_report",
]
