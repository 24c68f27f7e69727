"""BFCL through `eval run` against the scripted agents: the ground truth, replayed as tool
calls by the oracle endpoint, passes under bfcl-eval's checkers in every category; the
null agent passes exactly the irrelevance items; records carry BFCL's error types.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from helpers import serve_app
from splitserve.eval import load_suite
from splitserve.eval._agents import agent_app
from splitserve.eval._bfcl import CATEGORIES
from splitserve.eval._records import read_records
from splitserve.eval._report import write_report
from splitserve.eval._run import RunOptions, run

pytest.importorskip("bfcl_eval")

PER_CATEGORY = 6
SUITE = "bfcl:" + ",".join(CATEGORIES)


@pytest.fixture(scope="module")
def sliced():
    chosen, seen = [], Counter[str]()
    for s in load_suite(SUITE).scenarios:
        if seen[s.category] < PER_CATEGORY:
            seen[s.category] += 1
            chosen.append(s)
    return chosen


def run_agent(out: Path, scenarios, policy: str) -> list[dict]:
    with serve_app(agent_app(scenarios, policy)) as url:
        run(RunOptions(suite=SUITE, url=url, out=out, concurrency=4), scenarios)
    return [r for r in read_records(out / "run.jsonl") if r["type"] == "trial"]


def test_oracle_passes_every_category_through_the_runner(tmp_path: Path, sliced) -> None:
    got = run_agent(tmp_path / "run", sliced, "oracle")
    assert len(got) == len(sliced)
    assert {t["category"] for t in got} == set(CATEGORIES)
    assert [(t["scenario"], t["evidence"]) for t in got if t["verdict"] != "pass"] == []
    turns = next(t for t in got if t["scenario"] == "multi_turn_base_0")
    assert turns["tool_calls"] > 3 and not any(c["result_kind"] == "error" for c in turns["calls"])
    assert sum(m["role"] == "user" for m in turns["messages"]) > 1  # every user turn was sent
    # inspect's own log holds each executed call of a multi-turn item as a tool event
    from inspect_ai.event import ToolEvent
    from inspect_ai.log import read_eval_log

    (log_file,) = (tmp_path / "run" / "inspect").glob("*.eval")
    sample = next(s for s in read_eval_log(str(log_file)).samples or [] if s.id == "multi_turn_base_0#0")
    events = [e for e in sample.events if isinstance(e, ToolEvent)]
    assert len(events) == sum(e.event == "tool" for e in sample.events)
    assert [e.function for e in events] == [c["name"] for c in turns["calls"]]
    assert [str(e.result) for e in events] == [str(c["result"]) for c in turns["calls"]]


def test_null_agent_passes_only_irrelevance(tmp_path: Path, sliced) -> None:
    got = run_agent(tmp_path / "run", sliced, "null")
    passed = {t["category"] for t in got if t["verdict"] == "pass"}
    assert passed == {"irrelevance", "live_irrelevance"}
    failed = [t for t in got if t["verdict"] == "fail"]
    assert {t["cause"] for t in failed} == {"missing_call"}
    assert all(t["evidence"].startswith("BFCL ") for t in failed)
    text = write_report(tmp_path / "run", tmp_path / "report")[0].read_text()
    assert "| irrelevance |" in text and "| missing_call |" in text
