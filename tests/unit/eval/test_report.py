"""``eval report`` / ``eval compare`` on small hand-written run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from splitserve._errors import UsageError
from splitserve.eval._report import write_compare, write_report

PNG = b"\x89PNG\r\n\x1a\n"
TIER = {"e": "easy", "m": "medium", "h": "hard", "v": "very_hard"}


def header(**kw: Any) -> dict[str, Any]:
    return {
        "type": "run",
        "suite": "builtin",
        "url": "http://127.0.0.1:8080",
        "model": "qwen",
        "trials": 3,
        "concurrency": 2,
        "filters": {},
        "scenarios": [],
        "decode_tps": 31.5,
        "time_scale": 2.0,
        "started_at": "2026-06-01T10:00:00+00:00",
        "splitserve": "0.1",
        "label": None,
        **kw,
    }


def write_run(folder: Path, plays: dict[str, str], **head: Any) -> Path:
    """A run folder: ``plays`` maps a scenario id (first letter = tier) to one letter per trial:
    p pass, w fail wrong_tool, a fail bad_arguments, t timeout, x error."""
    lines = [header(scenarios=list(plays), **head)]
    second = 0
    for sid, verdicts in plays.items():
        for k, v in enumerate(verdicts):
            verdict, cause = {
                "p": ("pass", None),
                "w": ("fail", "wrong_tool"),
                "a": ("fail", "bad_arguments"),
                "t": ("timeout", "timeout"),
                "x": ("error", "http_error"),
            }[v]
            lines.append(
                {
                    "type": "trial",
                    "scenario": sid,
                    "trial": k,
                    "tier": TIER[sid[0]],
                    "category": "files" if sid[0] in "eh" else "shell",
                    "verdict": verdict,
                    "cause": cause,
                    "evidence": None if v == "p" else f"{cause} in trial {k}",
                    "duration_s": 4.0,
                    "gen_s": 2.0,
                    "completion_tokens": 50,
                    "time_budget_s": 60.0,
                    "started_at": f"2026-06-01T10:00:{second:02d}+00:00",
                }
            )
            second += 2
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"type": "tri')
    return folder


PLAYS_A = {"e1": "ppp", "e2": "ppp", "m1": "www", "m2": "ppw", "h1": "paa", "v1": "ppp"}
PLAYS_B = {"e1": "waa", "e2": "ppp", "m1": "ppp", "m2": "ppw", "h1": "pat"}


def rows(text: str, first: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"| {first} |")]


def test_report_tables_and_plots(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run-a", PLAYS_A, label="base")
    paths = write_report(run, tmp_path / "rep")
    assert [p.name for p in paths] == ["report.md", "summary.json", "tiers.png", "causes.png"]
    for p in paths[2:]:
        assert p.stat().st_size > 1000 and p.read_bytes().startswith(PNG)
    text = paths[0].read_text()
    assert text.startswith("# Eval report: base\n")
    assert "model `qwen`" in text and "decode 31.5 t/s" in text and "time scale 2.00×" in text
    assert "generation 25.0 t/s per request" in text
    easy, medium = rows(text, "easy"), rows(text, "medium")
    assert easy[0].startswith("| easy | 2 | 6 | 100.0 | ") and easy[0].endswith(" | 0 | 0 |")
    assert medium[0].startswith("| medium | 2 | 6 | 33.3 | ")
    assert rows(text, "TOTAL")[0].startswith("| TOTAL | 6 | 18 | 66.7 | ")
    assert rows(text, "files")[0].startswith("| files | 3 | 9 | 77.8 |")
    assert rows(text, "wrong_tool") == ["| wrong_tool | 4 | 2 | m1#0: wrong_tool in trial 0 |"]
    assert rows(text, "bad_arguments") == ["| bad_arguments | 2 | 1 | h1#1: bad_arguments in trial 1 |"]
    failed = text.split("## Failed scenarios (3)")[1]
    assert failed.index("| m1 |") < failed.index("| h1 |") < failed.index("| m2 |")
    assert "| h1 | hard | files | 1/3 | bad_arguments ×2 | bad_arguments in trial 1 |" in failed
    assert "Timeouts and errors" not in text
    summary = json.loads(paths[1].read_text())
    assert summary["label"] == "base" and summary["total"]["rate"]["passes"] == 12
    assert summary["tiers"]["easy"]["rate"]["low"] < 1.0


def test_compare_tables_flips_and_plots(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", PLAYS_A, label="fp16")
    b = write_run(tmp_path / "b", PLAYS_B, model="qwen-q4")
    paths = write_compare(a, b, tmp_path / "cmp")
    assert [p.name for p in paths] == ["compare.md", "compare.json", "compare.png", "flips.png"]
    for p in paths[2:]:
        assert p.stat().st_size > 1000 and p.read_bytes().startswith(PNG)
    text = paths[0].read_text()
    assert "# Eval comparison: A = fp16, B = qwen-q4" in text
    # common scenarios e1 e2 m1 m2 h1: A fractions 1 1 0 2/3 1/3, B 0 1 1 2/3 1/2 (a timeout is not scored)
    assert rows(text, "easy")[0].startswith("| easy | 100.0 | 50.0 | -50.0 | ")
    assert rows(text, "medium")[0].startswith("| medium | 33.3 | 83.3 | +50.0 | ")
    total = rows(text, "TOTAL")[0]
    d = np.array([-1, 0, 1, 0, 1 / 6])
    mde = 100 * 2.801585 * d.std(ddof=1) / np.sqrt(5)
    assert total.startswith("| TOTAL | 60.0 | 63.3 | +3.3 | ") and total.endswith(f" | 1.000 | {mde:.1f} | 5 |")
    assert "1 in A only, 0 in B only" in text
    assert "qwen-q4 is higher than fp16 by 3.3 pp" in text and "Not significant" in text
    assert "1 went from pass to fail and 1 from fail to pass" in text
    assert rows(text, "wrong_tool") == ["| wrong_tool | 4 | 2 |"]
    assert rows(text, "timeout (not scored)") == ["| timeout (not scored) | 0 | 1 |"]
    down = text.split("## Flipped: A pass → B fail (1)")[1].split("## Flipped")[0]
    assert "| e1 | easy | 3/3 | 0/3 | bad_arguments ×2, wrong_tool ×1 | wrong_tool in trial 0 |" in down
    up = text.split("## Flipped: A fail → B pass (1)")[1]
    assert "| m1 | medium | 0/3 | 3/3 | wrong_tool ×3 | wrong_tool in trial 0 |" in up
    data = json.loads(paths[1].read_text())
    assert data["labels"] == {"a": "fp16", "b": "qwen-q4"}
    assert data["total"]["delta_pp"] == pytest.approx(100 / 30)
    assert [f["scenario"] for f in data["total"]["flips_down"]] == ["e1"]
    assert data["only_a"] == ["v1"] and data["runs"]["b"]["apart"]["timeout"]["trials"] == 1


def test_labels_fall_back_to_model_then_folder(tmp_path: Path) -> None:
    a = write_run(tmp_path / "first-run", PLAYS_A, model=None)
    b = write_run(tmp_path / "second-run", PLAYS_B, model=None)
    text = write_compare(a, b, tmp_path / "cmp")[0].read_text()
    assert "# Eval comparison: A = first-run, B = second-run" in text
    twin = write_run(tmp_path / "twin", PLAYS_A, model="qwen", label="first-run")
    assert (
        "# Eval comparison: A = first-run (first-run), B = first-run (twin)"
        in write_compare(a, twin, tmp_path / "twin-cmp")[0].read_text()
    )
    same = write_compare(a, a, tmp_path / "same")[0].read_text()
    assert "# Eval comparison: A = first-run (A), B = first-run (B)" in same
    assert "have the same pass rate" in same and "Flipped: A pass → B fail (0)" in same


def test_a_run_of_only_timeouts_reports_them_apart(tmp_path: Path) -> None:
    run = write_run(tmp_path / "slow", {"e1": "tt", "h1": "tx"})
    paths = write_report(run, tmp_path / "rep")
    assert [p.name for p in paths] == ["report.md", "summary.json", "causes.png"]  # no rate to plot
    assert paths[2].read_bytes().startswith(PNG)
    text = paths[0].read_text()
    assert rows(text, "easy") == ["| easy | 1 | 0 | – | – | 2 | 0 |"]
    assert rows(text, "TOTAL")[0] == "| TOTAL | 2 | 0 | – | – | 3 | 1 |"
    assert "_no scored trial failed_" in text
    assert "3 timeout trials in 2 scenarios, 1 error trials in 1 scenarios." in text
    assert "| e1 | easy | 2 | 0 | 60.0 | timeout in trial 0 |" in text
    other = write_run(tmp_path / "ok", {"e1": "pp"})
    cmp = write_compare(other, run, tmp_path / "cmp")
    assert [p.name for p in cmp] == ["compare.md", "compare.json"]
    assert "nothing to compare" in cmp[0].read_text()


def test_a_missing_run_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"nope/run.jsonl: no such eval run file"):
        write_report(tmp_path / "nope", tmp_path / "rep")
