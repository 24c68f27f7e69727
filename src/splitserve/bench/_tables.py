"""Run files -> rows of figures, one function per table (pure; the report renders them)."""

from __future__ import annotations

from typing import Any

from ._context import CONTROL
from ._records import BenchRun, RequestRecord
from ._stats import group_records, median, request_metrics, summarize

SPEED_KEYS = ("prompt_tokens", "concurrency")
CONTEXT_KEYS = ("length", "depth")


def speed_rows(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """One row per (prompt size, concurrency) cell."""
    rows = []
    for (prompt, conc), recs in group_records(records, SPEED_KEYS, kind="speed").items():
        rows.append({"prompt_target": prompt, "concurrency": conc, **summarize(recs)})
    return rows


def context_rows(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """One row per (length, depth) cell with its verdict."""
    rows = []
    for (length, depth), recs in group_records(records, CONTEXT_KEYS, kind="context").items():
        s = summarize(recs)
        verdicts = [r.extra.get("verdict", "n/a") for r in recs]
        reasons = [r.extra.get("reason", "") for r in recs if r.extra.get("reason")]
        found = sum(1 for v in verdicts if v == "found")
        graded = sum(1 for v in verdicts if v in ("found", "miss"))
        if all(v == "skipped" for v in verdicts):
            verdict = "skipped"
        elif graded == 0:
            verdict = "n/a"
        elif found == graded:
            verdict = "found"
        elif found == 0:
            verdict = "miss"
        else:
            verdict = f"{found}/{graded} found"
        rows.append({"length": length, "depth": depth, "verdict": verdict,
                     "reason": reasons[0] if reasons else "", **s})
    return rows


def prefill_by_length(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """Prefill speed and time to first token per context length, over all depths."""
    rows = []
    for (length,), recs in group_records(records, ("length",), kind="context").items():
        ok = [r for r in recs if r.ok]
        if not ok:
            continue
        m = [request_metrics(r) for r in ok]
        rows.append({"length": length, "n": len(ok),
                     "prompt_tokens": median(r.prompt_tokens for r in ok if r.prompt_tokens),
                     "prefill_tps_server": median(x["prefill_tps_server"] for x in m),
                     "prefill_tps_client": median(x["prefill_tps_client"] for x in m),
                     "decode_tps_server": median(x["decode_tps_server"] for x in m),
                     "ttf_token_ms_p50": median(r.ttf_token_ms for r in ok),
                     "cache_hits": sum(1 for r in recs if r.cache_hit)})
    return rows


def sweep_rows(run: BenchRun) -> list[dict[str, Any]]:
    """One row per (sweep point, prompt size, concurrency)."""
    rows = []
    for point in run.points:
        if point.error:
            rows.append({"values": point.values, "error": point.error})
            continue
        for row in speed_rows(point.records):
            rows.append({"values": point.values, "server": _server_brief(point.server), **row})
    return rows


def _server_brief(server: dict[str, Any]) -> dict[str, Any]:
    cluster = server.get("cluster") or {}
    eff = cluster.get("effective") or {}
    return {"n_ctx": server.get("n_ctx"), "total_slots": server.get("total_slots"),
            "n_ubatch": eff.get("n_ubatch"), "n_batch": eff.get("n_batch"), "flash_attn": eff.get("flash_attn")}


def engine_rows(run: BenchRun) -> list[dict[str, Any]]:
    rows = []
    for r in run.engine_rows:
        rows.append({"test": r.get("test"), "n_ubatch": r.get("n_ubatch"), "n_batch": r.get("n_batch"),
                     "avg_ts": r.get("avg_ts"), "stddev_ts": r.get("stddev_ts"),
                     "model_type": r.get("model_type"), "backends": r.get("backends"),
                     "n_gpu_layers": r.get("n_gpu_layers")})
    return rows


def headline(run: BenchRun) -> dict[str, float | None]:
    """The few numbers a comparison leads with, for any run kind."""
    if run.kind == "speed":
        rows = speed_rows(run.records)
        ones = [r for r in rows if r["concurrency"] == min(x["concurrency"] for x in rows)] if rows else []
        return {
            "prefill_tps_server": median(r["prefill_tps_server"] for r in ones),
            "decode_tps_server": median(r["decode_tps_server"] for r in ones),
            "decode_tps_client": median(r["decode_tps_client"] for r in ones),
            "ttf_token_ms_p50": median(r["ttf_token_ms_p50"] for r in ones),
            "max_throughput_tps": max((r["throughput_tps"] or 0 for r in rows), default=None) or None,
        }
    if run.kind == "context":
        rows = prefill_by_length(run.records)
        cells = context_rows(run.records)
        graded = [c for c in cells if c["verdict"] not in ("skipped", "n/a") and c["depth"] != CONTROL]
        return {
            "prefill_tps_server_longest": rows[-1]["prefill_tps_server"] if rows else None,
            "retrieval_found_fraction": (sum(1 for c in graded if c["verdict"] == "found") / len(graded))
            if graded else None,
        }
    if run.kind == "engine":
        pp = [r["avg_ts"] for r in run.engine_rows if int(r.get("n_prompt", 0)) and not int(r.get("n_gen", 0))]
        tg = [r["avg_ts"] for r in run.engine_rows if int(r.get("n_gen", 0)) and not int(r.get("n_prompt", 0))]
        return {"pp_tps": median(pp), "tg_tps": median(tg)}
    if run.kind == "sweep":
        rows = [r for r in sweep_rows(run) if "error" not in r]
        return {"best_prefill_tps_server": max((r["prefill_tps_server"] or 0 for r in rows), default=None) or None,
                "best_decode_tps_server": max((r["decode_tps_server"] or 0 for r in rows), default=None) or None}
    return {}
