"""The bench report's cells and tables: number formats (:func:`fmt`, :func:`pct`, :func:`exact`),
Markdown tables, tables declared as columns (a header and how to show a row's cell, see
:func:`column_table`), and the words and formats of the headline figures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._records import BenchRun
from ._tables import TTFT_AT, headline


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


FRACTIONS = {"acceptance", "agreement", "cached_fraction", "fidelity"}
"""Figures that are fractions (shown as percentages)."""


def pct(value: float | None) -> str:
    if value is None:
        return "–"
    text = f"{value:.1%}"
    return text.replace(".0%", "%")


def exact(row: dict[str, Any]) -> str:
    return "–" if not row.get("compared") else f"{row['exact_matches']}/{row['compared']}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return "\n".join(out)


Cell = Callable[[dict[str, Any]], Any]
Column = tuple[str, Cell]
"""A table's column: its header and how to show a row's cell."""


def raw(key: str) -> Cell:
    """The row's value as it is."""
    return lambda r: r[key]


def num(key: str, digits: int = 1) -> Cell:
    """The row's number, :func:`fmt` at ``digits`` decimals."""
    return lambda r: fmt(r[key], digits)


def frac(key: str) -> Cell:
    """The row's fraction as a percentage (:func:`pct`)."""
    return lambda r: pct(r[key])


def column_table(columns: Sequence[Column], rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of ``rows``, a column each of ``columns``."""
    return table([head for head, _ in columns], [[cell(r) for _, cell in columns] for r in rows])


HEADLINE_LABELS = {
    "prefill_tps_server": "prefill t/s (server, lowest concurrency)",
    "decode_tps_server": "decode t/s (server, lowest concurrency)",
    "decode_tps_client": "decode t/s (client, lowest concurrency)",
    "max_throughput_tps": "best aggregate throughput t/s",
    "prefill_tps_server_longest": "prefill t/s at the longest length (server)",
    "retrieval_found_fraction": "needles found (fraction of graded cells)",
    "pp_tps": "llama-bench pp t/s",
    "tg_tps": "llama-bench tg t/s",
    "best_prefill_tps_server": "best prefill t/s (server)",
    "best_decode_tps_server": "best decode t/s (server)",
    "best_speculation_speedup": "best decode speedup over no speculation",
    "agent_cached_fraction_turn2plus": "agent: cached fraction of the prompt from turn 2 on (median)",
    **{f"{w}_decode_tps_server": f"{w}: decode t/s (server)" for w in ("copy", "edit", "json", "agent")},
    **{f"{w}_acceptance": f"{w}: draft acceptance" for w in ("copy", "edit", "json", "agent")},
    **{f"{w}_agreement": f"{w}: agreement with the reference" for w in ("copy", "edit", "json", "agent")},
}


def headline_label(key: str) -> str:
    """The words for a headline key; the time to first token names its prompt size."""
    if key.startswith(TTFT_AT):
        return f"time to first token ms (p50, {key.removeprefix(TTFT_AT)}-token prompt, lowest concurrency)"
    return HEADLINE_LABELS.get(key, key)


def headline_value(key: str, value: float | None) -> str:
    if value is not None and key.endswith(("_acceptance", "_agreement", "_fraction", "_turn2plus")):
        return pct(value)
    return fmt(value, 2 if value is not None and value < 10 else 1)


def headline_items(run: BenchRun) -> list[tuple[str, str]]:
    """(label, value) of the run's headline figures it measured, in the headline's order."""
    return [(headline_label(k), headline_value(k, v)) for k, v in headline(run).items() if v is not None]
