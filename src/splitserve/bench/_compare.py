"""``bench report`` over several runs: the comparison (every figure the runs all measured, side
by side with the ratio ``run / first``; cells matched by their keys) and the serving path's cost
(HTTP decode against llama-bench's in-process figures)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._markdown import FRACTIONS, fmt, headline_label, pct, table
from ._records import BenchRun
from ._tables import agent_turn_rows, engine_rows, headline, prefill_by_length, speed_rows, sweep_rows, workload_rows

Keyed = Callable[[BenchRun], dict[Any, dict[str, Any]]]
"""A run's rows by their cell's key."""
Compared = tuple[str, Keyed, Sequence[tuple[str, str]]]
"""What :func:`_compare` compares: a title, the keyed rows, (figure, label) pairs."""


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return "–"
    return f"{b / a:.2f}×"


def _compare(runs: Sequence[BenchRun], title: str, keyed: Keyed, metrics: Sequence[tuple[str, str]]) -> str:
    tables = [keyed(r) for r in runs]
    keys = [k for k in tables[0] if all(k in t for t in tables[1:])]
    if not keys:
        return f"### {title}\n\n_no cells that every run measured_\n"
    parts = [f"### {title}\n"]
    for metric, label in metrics:
        head = ["cell"] + [r.name for r in runs] + [f"{r.name} / {runs[0].name}" for r in runs[1:]]
        body = []
        for k in keys:
            vals = [t[k].get(metric) for t in tables]
            shown = [pct(v) if metric in FRACTIONS else fmt(v) for v in vals]
            body.append([str(k)] + shown + [_ratio(vals[0], v) for v in vals[1:]])
        parts.append(f"{label}:\n\n" + table(head, body) + "\n")
    return "\n".join(parts)


_TTFT = ("ttf_token_ms_p50", "time to first token, ms (p50)")
_WORKLOADS: Compared = (
    "workloads (workload, concurrency)",
    lambda r: {(x["workload"], x["concurrency"]): x for x in workload_rows(r.records)},
    [
        ("decode_tps_server", "decode t/s (server)"),
        ("acceptance", "draft acceptance"),
        ("agreement", "agreement with the reference"),
        _TTFT,
    ],
)
_AGENT_TURNS: Compared = (
    "agent turns (concurrency, turn)",
    lambda r: {(x["concurrency"], x["turn"]): x for x in agent_turn_rows(r.records)},
    [("cached_fraction", "cached fraction of the prompt"), ("ttft_ms_p50", "time to first token, ms (p50)")],
)
_SPEED_CELLS: Compared = (
    "speed cells (prompt, concurrency)",
    lambda r: {(x["prompt_target"], x["concurrency"]): x for x in speed_rows(r.records)},
    [
        ("prefill_tps_server", "prefill t/s (server)"),
        ("decode_tps_server", "decode t/s (server)"),
        _TTFT,
        ("throughput_tps", "aggregate throughput t/s"),
    ],
)
_CELLS: dict[str, Compared] = {
    "context": (
        "context lengths",
        lambda r: {x["length"]: x for x in prefill_by_length(r.records)},
        [("prefill_tps_server", "prefill t/s (server)"), _TTFT],
    ),
    "engine": (
        "llama-bench tests",
        lambda r: {(x["test"], x["n_ubatch"]): x for x in engine_rows(r)},
        [("avg_ts", "t/s")],
    ),
    "sweep": (
        "sweep points",
        lambda r: {
            (tuple(x["values"].items()), x["prompt_target"], x["concurrency"]): x
            for x in sweep_rows(r)
            if "error" not in x
        },
        [("prefill_tps_server", "prefill t/s (server)"), ("decode_tps_server", "decode t/s (server)")],
    ),
}
"""The cells compared for runs of one kind (speed runs: :func:`_speed_comparisons`)."""


def _headline_comparison(runs: Sequence[BenchRun]) -> str:
    heads = [headline(r) for r in runs]
    names = list(dict.fromkeys(k for h in heads for k in h))
    return (
        table(
            ["headline"] + [r.name for r in runs] + [f"{r.name} / {runs[0].name}" for r in runs[1:]],
            [
                [headline_label(n)]
                + [fmt(h.get(n), 2) for h in heads]
                + [_ratio(heads[0].get(n), h.get(n)) for h in heads[1:]]
                for n in names
            ],
        )
        + "\n"
    )


def _speed_comparisons(runs: Sequence[BenchRun]) -> list[str]:
    """Speed runs: their workloads (and agent turns) and their speed cells, where any run has them."""
    out = []
    if any(workload_rows(r.records) for r in runs):
        out.append(_compare(runs, *_WORKLOADS))
        if any(agent_turn_rows(r.records) for r in runs):
            out.append(_compare(runs, *_AGENT_TURNS))
    if any(speed_rows(r.records) for r in runs):
        out.append(_compare(runs, *_SPEED_CELLS))
    return out


def comparison_section(runs: Sequence[BenchRun]) -> str:
    out = ["## Comparison\n", _headline_comparison(runs)]
    kinds = {r.kind for r in runs}
    if kinds == {"speed"}:
        out += _speed_comparisons(runs)
    elif len(kinds) == 1 and next(iter(kinds)) in _CELLS:
        out.append(_compare(runs, *_CELLS[next(iter(kinds))]))
    return "\n".join(out)


def serving_cost(runs: Sequence[BenchRun]) -> str | None:
    """HTTP decode vs llama-bench's in-process tg: the cost of the serving path."""
    http = [r for r in runs if r.kind == "speed"]
    eng = [r for r in runs if r.kind == "engine"]
    if not http or not eng:
        return None
    h = headline(http[0])
    e = headline(eng[0])
    lines = ["## Serving path cost\n"]
    tg, pp = e.get("tg_tps"), e.get("pp_tps")
    for key, label in (("decode_tps_server", "decode, server timings"), ("decode_tps_client", "decode, client clock")):
        value = h.get(key)
        if value and tg:
            lines.append(f"- HTTP {label} {value:,.1f} t/s vs llama-bench tg {tg:,.1f} t/s: {value / tg:.2f}×")
    prefill = h.get("prefill_tps_server")
    if prefill and pp:
        lines.append(
            f"- HTTP prefill (server timings) {prefill:,.1f} t/s vs llama-bench pp {pp:,.1f} t/s: {prefill / pp:.2f}×"
        )
    return "\n".join(lines) + "\n"
