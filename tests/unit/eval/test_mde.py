"""The minimum detectable difference on BFCL-sized runs: what compare says it reached, and the
planning numbers docs/eval.md gives (items and trials to resolve 2, 4 and 8 points)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from splitserve.eval._report import write_compare, write_report
from splitserve.eval._stats import planning_mde, scenarios_needed

N = 3691  # the `bfcl` suite: non-live + live + multi_turn_base (bfcl-eval 2026.3.23)


def write_run(folder: Path, verdicts: list[bool], trials: int = 1) -> Path:
    lines = [
        {
            "type": "run",
            "suite": "bfcl",
            "url": "http://127.0.0.1:8080",
            "model": "m",
            "trials": trials,
            "concurrency": 8,
            "scenarios": [f"s{i}" for i in range(len(verdicts))],
            "decode_tps": 40.0,
            "time_scale": 1.25,
            "started_at": "2026-06-01T10:00:00Z",
            "label": folder.name,
        }
    ]
    for i, ok in enumerate(verdicts):
        for k in range(trials):
            lines.append(
                {
                    "type": "trial",
                    "scenario": f"s{i}",
                    "trial": k,
                    "tier": "easy",
                    "category": "simple_python",
                    "verdict": "pass" if ok else "fail",
                    "cause": None if ok else "bad_arguments",
                    "evidence": None if ok else "BFCL value_error:string",
                    "duration_s": 1.0,
                    "gen_s": 0.5,
                    "completion_tokens": 20,
                    "time_budget_s": 120.0,
                    "started_at": "2026-06-01T10:00:01Z",
                }
            )
    folder.mkdir(parents=True)
    (folder / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def test_compare_of_bfcl_sized_runs_states_the_mde_it_reached(tmp_path: Path) -> None:
    rng = random.Random(4)
    a = [rng.random() < 0.7 for _ in range(N)]
    b = [x if rng.random() > 0.12 else not x for x in a]  # 12% of the items flip
    paths = write_compare(write_run(tmp_path / "a", a), write_run(tmp_path / "b", b), tmp_path / "cmp")
    text = paths[0].read_text()
    reached = re.search(r"differences under ([0-9.]+) pp cannot be reliably detected", text)
    assert reached is not None
    flips = sum(x != y for x, y in zip(a, b, strict=True)) / N
    # paired: MDE = 2.8016 * sd(d) / sqrt(n), d in {-1, 0, 1}
    assert float(reached.group(1)) == pytest.approx(100 * 2.801585 * (flips**0.5) / N**0.5, abs=0.15)
    assert float(reached.group(1)) < 2.0  # BFCL-sized: resolves differences of 2 points at 12% discordance


def test_report_gives_the_scenarios_needed_for_2_4_8_points(tmp_path: Path) -> None:
    paths = write_report(write_run(tmp_path / "run", [True, False] * 50), tmp_path / "rep")
    text = paths[0].read_text()
    needed = " / ".join(str(scenarios_needed(d, 3)) for d in (2, 4, 8))
    assert f"resolving 2 / 4 / 8 pp at trials 3 takes {needed} scenarios" in text


@pytest.mark.parametrize("trials", [1, 3, 5])
def test_scenarios_needed_inverts_planning_mde(trials: int) -> None:
    for target in (2.0, 4.0, 8.0):
        n = scenarios_needed(target, trials)
        assert planning_mde(n, trials) <= target < planning_mde(n - 1, trials)
    assert scenarios_needed(4, 1) > scenarios_needed(4, 3) > scenarios_needed(4, 5)
    assert planning_mde(N, 1) < 2.8 and planning_mde(340, 1) > 8.9  # BFCL vs the built-in suite
