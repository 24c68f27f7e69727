"""Agentic tool-use evaluation (``splitserve eval``): scenarios, mock tools, graders, statistics.

Needs the ``eval`` extra (inspect-ai, pyyaml, jsonschema).
"""

from ._scenario import TIERS, Scenario
from ._suite import Problem, Suite, load_suite

__all__ = ["TIERS", "Problem", "Scenario", "Suite", "load_suite"]
