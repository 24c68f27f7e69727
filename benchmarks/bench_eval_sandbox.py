"""The coding grader's fidelity and the real sandbox's cost, against the old emulation.

For the built-in coding bugs (every bug kind, found by seeding ``builtin._world.repo``), each
fix is applied to a fresh workspace and graded by the scenario's fix checks
(``state_tests_pass`` and ``state_file_unchanged`` of the test files): the oracle fix, three
other correct fixes written differently (must pass), three wrong ones (one with ``or True``,
one in a comment, one of wrong behaviour) and an edit of the test file (must fail).

    # today's grader (real files, git and pytest in an inspect sandbox):
    .venv/bin/python benchmarks/bench_eval_sandbox.py --out benchmarks/results/eval-sandbox.json
    # the old emulation, from a copy of an earlier commit's tree:
    mkdir -p /tmp/old && git archive 5d6d81f src/splitserve | tar -x -C /tmp/old \
        && mv /tmp/old/src/splitserve /tmp/old/splitserve_old
    .venv/bin/python benchmarks/bench_eval_sandbox.py --emulation /tmp/old \
        --out benchmarks/results/eval-sandbox-emulation.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from random import Random
from typing import Any

from splitserve.eval.builtin._world import BUG_KINDS, Bug, repo

PER_KIND = 2  # bug instances per kind (different function names and constants)


def instances() -> list[tuple[int, int, str, Bug]]:
    """(seed, kind, source path, bug) for PER_KIND seeds per bug kind."""
    seen: dict[int, int] = {}
    out = []
    for seed in range(400):
        ((path, bug),) = repo(Random(seed), 1, 1).bugs
        if seen.get(bug.kind, 0) < PER_KIND:
            seen[bug.kind] = seen.get(bug.kind, 0) + 1
            out.append((seed, bug.kind, path, bug))
        if len(seen) == BUG_KINDS and all(v >= PER_KIND for v in seen.values()):
            break
    return out


def variants(bug: Bug) -> list[tuple[str, bool, tuple[str, str] | None]]:
    """(label, should pass, source edit or None for the test-file edit)."""
    out: list[tuple[str, bool, tuple[str, str] | None]] = [("oracle", True, (bug.find, bug.replace))]
    out += [(f"right{i}", True, e) for i, e in enumerate(bug.right, 1)]
    out += [(f"wrong{i}", False, e) for i, e in enumerate(bug.wrong, 1)]
    out.append(("test_edit", False, None))
    return out


GUTTED = "def test_ok():\n    assert True\n"


def grade_emulation(old: Path) -> tuple[list[dict[str, Any]], dict[str, float]]:
    sys.path.insert(0, str(old))
    world = importlib.import_module("splitserve_old.eval.builtin._world")
    sandbox = importlib.import_module("splitserve_old.eval._sandbox")
    checks = importlib.import_module("splitserve_old.eval._checks")
    trace_mod = importlib.import_module("splitserve_old.eval._trace")
    rows, setup, test_run = [], [], []
    for seed, kind, path, bug in instances():
        old_repo = world.repo(Random(seed), 1, 1)
        for label, want, edit in variants(bug):
            started = time.perf_counter()
            sb = sandbox.make_sandbox({"files": old_repo.files, "tests": old_repo.tests})
            setup.append(time.perf_counter() - started)
            text = sb.files[path]
            if edit is None:
                sb.call("write_file", {"path": old_repo.test_files[0], "content": GUTTED})
            else:
                sb.call("write_file", {"path": path, "content": text.replace(edit[0], edit[1], 1)})
            started = time.perf_counter()
            sb.call("run_tests", {})
            test_run.append(time.perf_counter() - started)
            trace = trace_mod.Trace(sandbox=sb)
            params = [{"check": "state_tests_pass"}] + [
                {"check": "state_file_unchanged", "path": t} for t in old_repo.test_files
            ]
            passed = all(checks.run_check(trace, p).passed for p in params)
            rows.append({"seed": seed, "kind": kind, "fn": bug.fn, "fix": label, "want": want, "got": passed})
    return rows, {"setup_s": statistics.median(setup), "test_run_s": statistics.median(test_run)}


def grade_sandbox(kind_name: str) -> tuple[list[dict[str, Any]], dict[str, float]]:
    from splitserve.eval._sandbox import Workspace, open_sandbox

    async def go() -> tuple[list[dict[str, Any]], dict[str, float]]:
        rows, setup, test_run, shas = [], [], [], set()
        for seed, kind, path, bug in instances():
            new_repo = repo(Random(seed), 1, 1)
            spec = {"kind": "repo", "files": new_repo.files, "tests": new_repo.tests}
            for label, want, edit in variants(bug):
                async with open_sandbox(kind_name) as env:
                    started = time.perf_counter()
                    ws = await Workspace.create(env, spec)
                    setup.append(time.perf_counter() - started)
                    shas.add((seed, await ws.head()))
                    if edit is None:
                        await ws.call("write_file", {"path": new_repo.test_files[0], "content": GUTTED})
                    else:
                        text = new_repo.files[path]
                        await ws.call("write_file", {"path": path, "content": text.replace(edit[0], edit[1], 1)})
                    started = time.perf_counter()
                    await ws.call("run_tests", {})
                    test_run.append(time.perf_counter() - started)
                    state = await ws.snapshot()
                    passed = state.tests_passed and all(
                        state.files.get(t) == new_repo.files[t] for t in new_repo.test_files
                    )
                    rows.append({"seed": seed, "kind": kind, "fn": bug.fn, "fix": label, "want": want, "got": passed})
        same_sha = len(shas) == len({s for s, _ in shas})
        return rows, {
            "setup_s": statistics.median(setup),
            "test_run_s": statistics.median(test_run),
            "same_sha_every_run": float(same_sha),
        }

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emulation", type=Path, help="a folder holding splitserve_old/ (an earlier tree)")
    ap.add_argument("--sandbox", default="local")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.emulation:
        rows, timing = grade_emulation(args.emulation)
        grader = "emulation (rules over file text)"
    else:
        rows, timing = grade_sandbox(args.sandbox)
        grader = f"sandbox ({args.sandbox}: real files, git, pytest)"
    right = [r for r in rows if r["want"] == r["got"]]
    by_fix: dict[str, list[int]] = {}
    for r in rows:
        key = "oracle" if r["fix"] == "oracle" else r["fix"].rstrip("0123456789")
        by_fix.setdefault(key, [0, 0])
        by_fix[key][0] += r["want"] == r["got"]
        by_fix[key][1] += 1
    result = {
        "grader": grader,
        "bugs": len({(r["seed"], r["fn"]) for r in rows}),
        "bug_kinds": len({r["kind"] for r in rows}),
        "fixes": len(rows),
        "graded_right": len(right),
        "fidelity": round(len(right) / len(rows), 3),
        "graded_right_by_fix": {k: f"{a}/{b}" for k, (a, b) in by_fix.items()},
        "wrong_verdicts": [
            f"{r['fn']} {r['fix']}: want {'pass' if r['want'] else 'fail'}" for r in rows if r["want"] != r["got"]
        ],
        "median_setup_s": round(timing["setup_s"], 5),
        "median_test_run_s": round(timing["test_run_s"], 5),
        **({"same_sha_every_run": bool(timing["same_sha_every_run"])} if "same_sha_every_run" in timing else {}),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
