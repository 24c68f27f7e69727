"""Check-level agreement between splitserve's graders and Toolery's own scorer.

For every response check of every scenario in a Toolery checkout (``response_contains``,
``response_not_contains``, ``response_satisfies``, ``response_matches_regex``), answers are
built from the check's own patterns, written the ways models write them: plain, in bold,
with typographic quotes, a whole number given as a decimal ("245" as "$245.30"), a number
inside a longer one ("2450"), missing one pattern, or none at all. Both scorers grade each
answer; the figure is how often they agree, with every disagreement listed.

    .venv/bin/python benchmarks/toolery_agreement.py --toolery ~/toolery -o benchmarks/results/toolery-agreement.json

Toolery's scorer is imported from the checkout (``toolery/core/scorer.py``; it needs only
pydantic, PyYAML and jsonschema).
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from splitserve.eval import load_suite
from splitserve.eval._checks import run_check
from splitserve.eval._trace import Trace

CHECKS = ("response_contains", "response_not_contains", "response_satisfies", "response_matches_regex")


def _patterns(params: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("patterns", "all_of", "none_of"):
        out += [str(p) for p in params.get(key) or []]
    for group in params.get("any_of") or []:
        out += [str(p) for p in (group if isinstance(group, list) else [group])][:1]
    return out


def answers(params: dict[str, Any]) -> list[str]:
    pats = _patterns(params)
    if not pats:
        return []
    plain = "The result: " + "; ".join(pats) + "."
    bold = "The result: " + "; ".join(f"**{p}**" for p in pats) + "."
    curly = plain.replace("'", "\u2019").replace('"', "\u201c")
    decimals = re.sub(r"(?<![\w.])(\d+)(?![\w.])", r"\1.30", plain)
    longer = re.sub(r"(?<![\w.])(\d+)(?![\w.])", r"\g<1>0", plain)
    missing = "The result: " + "; ".join(pats[1:]) + "." if len(pats) > 1 else "No idea."
    return [plain, bold, curly, decimals, longer, missing, "I don't know."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toolery", type=Path, required=True, help="a Toolery checkout (scenarios/ and toolery/)")
    parser.add_argument("-o", "--out", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(args.toolery))
    scorer = importlib.import_module("toolery.core.scorer")
    models = importlib.import_module("toolery.core.models")
    suite = load_suite(str(args.toolery / "scenarios"))
    agree = Counter[str]()
    total = Counter[str]()
    differ: list[dict[str, Any]] = []
    for scenario in suite.scenarios:
        for role, checks in (("required", scenario.scoring.required), ("forbidden", scenario.scoring.forbidden)):
            for check in checks:
                if check.check not in CHECKS:
                    continue
                params = check.params()
                theirs_check = models.ScoringCheck.model_validate(params)
                for answer in answers(params):
                    ours = run_check(Trace(response=answer, raw_response=answer), params, role).passed
                    theirs = scorer.REGISTRY[check.check]([], theirs_check, answer).result == "pass"
                    total[check.check] += 1
                    if ours == theirs:
                        agree[check.check] += 1
                    else:
                        differ.append(
                            {
                                "scenario": scenario.id,
                                "check": params,
                                "answer": answer,
                                "ours": ours,
                                "toolery": theirs,
                            }
                        )
    data = {
        "scenarios": len(suite.scenarios),
        "problems": len(suite.problems),
        "warnings": [w.reason for w in suite.warnings],
        "answers_graded": sum(total.values()),
        "agree": sum(agree.values()),
        "agreement_pct": round(100 * sum(agree.values()) / max(1, sum(total.values())), 2),
        "per_check": {c: {"graded": total[c], "agree": agree[c]} for c in total},
        "disagreements": differ,
    }
    print(json.dumps({k: v for k, v in data.items() if k != "disagreements"}, indent=2))
    for d in differ[:20]:
        print(f"{d['scenario']}: {d['check']['check']} ours={d['ours']} toolery={d['toolery']}: {d['answer'][:100]!r}")
    if args.out:
        args.out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
