"""The run file: ``RUN/run.jsonl``, append-only, one JSON object per line.

Line types (``"type"`` key):

- ``run``: written once when the run starts, and again (``"resumed": true``) each time a
  rerun with the same ``-o`` continues it. Keys: ``suite``, ``url``, ``model``, ``trials``,
  ``concurrency``, ``filters`` ({tier, category, limit}), ``scenarios`` (ids planned),
  ``decode_tps`` (measured at the start), ``time_scale`` (factor applied to every
  scenario's ``timeout_seconds``), ``started_at`` (ISO), ``splitserve`` (version),
  ``label``.
- ``trial``: one finished trial. Keys:
  ``scenario``, ``trial`` (0-based), ``tier``, ``category``,
  ``verdict``: "pass" | "fail" | "timeout" | "error",
  ``score`` (weights of the scenario: pass 1, partial, fail 0),
  ``cause``: null on pass, else one of :data:`CAUSES`,
  ``evidence``: one line (the call, the argument, the missing string),
  ``checks``: [{check, role, passed, detail}],
  ``duration_s``, ``gen_s`` (seconds inside chat requests), ``time_budget_s``,
  ``turns``, ``tool_calls`` (count), ``prompt_tokens``, ``completion_tokens``,
  ``messages`` (the whole chat: system, user, assistant with tool_calls, tool results),
  ``calls`` ([{index, name, args, result, result_kind}]), ``response``, ``error``,
  ``started_at``.
- ``end``: the run finished every planned trial: ``finished_at``, ``duration_s``.

A trial line is written only when the trial is over, so a killed run loses at most the
trials in flight, and a rerun skips every (scenario, trial) that has a line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RUN_FILE = "run.jsonl"

# Quality failures first, then the ones that are not the model's answer.
CAUSES = (
    "wrong_tool",
    "bad_arguments",
    "missing_call",
    "extra_call",
    "hallucinated_tool",
    "loop",
    "no_follow_through",
    "no_retry_after_error",
    "format_violation",
    "unsafe_action",
    "over_refusal",
    "wrong_answer",
    "budget",
    "timeout",
    "parse_error",
    "http_error",
)
NOT_QUALITY = ("timeout", "http_error")  # verdicts reported apart from pass/fail


def run_file(run: Path) -> Path:
    return run / RUN_FILE if run.is_dir() or run.suffix != ".jsonl" else run


def read_records(run: Path) -> Iterator[dict[str, Any]]:
    """Every complete line of a run file (a line cut by a kill is skipped)."""
    path = run_file(run)
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
