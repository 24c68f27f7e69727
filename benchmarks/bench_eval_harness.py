"""How fast the eval harness itself is: the built-in suite against the scripted oracle.

The oracle answers instantly, so what is measured is splitserve + inspect_ai: scenarios per
second and peak memory, which must leave the harness far from the bottleneck next to a
10 t/s model. Also prints the planning minimum detectable difference of the suite.

    .venv/bin/python benchmarks/bench_eval_harness.py --concurrency 8 --out benchmarks/results/eval-harness.json
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from helpers import serve_app  # noqa: E402
from splitserve.eval import load_suite  # noqa: E402
from splitserve.eval._agents import agent_app  # noqa: E402
from splitserve.eval._records import read_records  # noqa: E402
from splitserve.eval._run import RunOptions, run  # noqa: E402
from splitserve.eval._stats import planning_mde  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="builtin")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    t0 = time.monotonic()
    scenarios = load_suite(args.suite).scenarios
    load_s = time.monotonic() - t0
    with tempfile.TemporaryDirectory() as tmp, serve_app(agent_app(scenarios, "oracle")) as url:
        started = time.monotonic()
        run(RunOptions(suite=args.suite, url=url, out=Path(tmp) / "run", trials=args.trials,
                       concurrency=args.concurrency), scenarios)
        wall = time.monotonic() - started
        trials = [r for r in read_records(Path(tmp) / "run") if r["type"] == "trial"]
        size = (Path(tmp) / "run" / "run.jsonl").stat().st_size
    passed = sum(t["verdict"] == "pass" for t in trials)
    result = {
        "suite": args.suite, "scenarios": len(scenarios), "trials": len(trials), "passed": passed,
        "concurrency": args.concurrency, "load_s": round(load_s, 3), "wall_s": round(wall, 2),
        "scenarios_per_s": round(len(trials) / wall, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "run_file_mb": round(size / 2**20, 2),
        "mde_pp": {f"trials_{k}": round(planning_mde(len(scenarios), k), 1) for k in (1, 3, 5)},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
