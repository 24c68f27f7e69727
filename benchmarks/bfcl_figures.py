"""BFCL figures for the closing note of issue 30.

- items per BFCL category (from the installed bfcl-eval package),
- the planning MDE (α .05, power .8; eval/_stats.py planning_mde) at trials 1 and 3 for BFCL
  (non-live + live + multi_turn_base, the `bfcl` suite) against the built-in suite, and the
  scenarios needed to resolve 2, 4 and 8 points,
- the oracle and null scores per category: BFCL's ground truth as the model's answer, and a
  text answer with no call, each graded through splitserve's integration (grade_bfcl, which
  calls bfcl-eval's ast_checker / multi_turn_checker).

    .venv/bin/python benchmarks/bfcl_figures.py -o benchmarks/results/bfcl.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from splitserve.eval import load_suite
from splitserve.eval._bfcl import CATEGORIES, CONTRADICTORY, DEFAULT, UNPASSABLE, bfcl_item, counts
from splitserve.eval._bfcl_api import api
from splitserve.eval._bfcl_grade import BfclTrace, grade_bfcl
from splitserve.eval._scenario import Scenario
from splitserve.eval._stats import planning_mde, scenarios_needed


def _fc(calls: list[Any]) -> list[dict[str, str]]:
    return [{c.name: json.dumps(c.arguments)} for c in calls]


def oracle_trace(scenario: Scenario) -> BfclTrace:
    """What play_bfcl records when the endpoint replays the scenario's oracle."""
    item = bfcl_item(scenario)
    assert item is not None
    trace = BfclTrace()
    if CATEGORIES[item["category"]].kind != "multi_turn":
        first = scenario.oracle[0]
        trace.model_result = _fc(first.tool_calls) if first.tool_calls else (first.content or "")
        return trace
    result: list[list[Any]] = []
    turns = iter(scenario.oracle)
    for turn in turns:
        result.append([_fc(turn.tool_calls), next(turns).content] if turn.tool_calls else [turn.content])
    trace.model_result = result
    return trace


def null_trace(scenario: Scenario) -> BfclTrace:
    item = bfcl_item(scenario)
    assert item is not None
    trace = BfclTrace(response="I don't know.")
    multi = CATEGORIES[item["category"]].kind == "multi_turn"
    trace.model_result = [["I don't know."] for _ in item["entry"]["question"]] if multi else "I don't know."
    return trace


def figures() -> dict[str, Any]:
    started = time.monotonic()
    items = counts()
    suite_n = sum(items[c] for c in DEFAULT)
    builtin_n = len(load_suite("builtin").scenarios)
    scores: dict[str, dict[str, Any]] = {}
    for name, make in (("oracle", oracle_trace), ("null", null_trace)):
        passed: Counter[str] = Counter()
        for scenario in load_suite("bfcl:" + ",".join(CATEGORIES)).scenarios:
            passed[scenario.category] += grade_bfcl(scenario, make(scenario)).verdict == "pass"
        per = {c: {"passed": passed[c], "items": items[c], "pct": round(100 * passed[c] / items[c], 2)} for c in items}
        in_suite = sum(passed[c] for c in DEFAULT)
        scores[name] = {"per_category": per, "bfcl_suite_pct": round(100 * in_suite / suite_n, 2)}
    mde = {
        name: {f"trials_{t}": round(planning_mde(n, t), 2) for t in (1, 3)}
        for name, n in (("bfcl", suite_n), ("builtin", builtin_n))
    }
    return {
        "bfcl_eval_version": api().version,
        "items_per_category": items,
        "groups": {c: CATEGORIES[c].group for c in items},
        "bfcl_suite": {"categories": list(DEFAULT), "items": suite_n},
        "builtin_suite": {"scenarios": builtin_n},
        "planning_mde_pp": mde,
        "mde_model": "planning_mde: 15% discordant scenarios, within-scenario flip variance 0.20 / trials",
        "scenarios_needed": {f"trials_{t}": {f"{d}pp": scenarios_needed(d, t) for d in (2, 4, 8)} for t in (1, 3, 5)},
        "scores": scores,
        "unpassable": UNPASSABLE,
        "contradictory_pairs": [list(p) for p in CONTRADICTORY],
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-o", "--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    data = figures()
    print(f"{'category':24} {'items':>6} {'oracle %':>9} {'null %':>7}")
    for c, n in data["items_per_category"].items():
        o, z = data["scores"]["oracle"]["per_category"][c], data["scores"]["null"]["per_category"][c]
        print(f"{c:24} {n:6} {o['pct']:9.2f} {z['pct']:7.2f}")
    print(json.dumps({k: v for k, v in data.items() if k not in ("items_per_category", "scores", "groups")}, indent=2))
    if args.out:
        args.out.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
