"""Run files -> rows of figures, one function per table (pure; the report renders them)."""

from __future__ import annotations

from typing import Any

from ._context import CONTROL
from ._records import BenchRun, RequestRecord
from ._stats import group_records, median, request_metrics, summarize
from ._workloads import baseline_of, is_baseline

SPEED_KEYS = ("prompt_tokens", "concurrency")
CONTEXT_KEYS = ("length", "depth")
WORKLOAD_KINDS = ("speed", "copy", "edit", "json", "agent")
"""Record kinds of the workloads (``speed`` is the ``chat`` workload)."""


def workload_of(rec: RequestRecord) -> str:
    return "chat" if rec.kind == "speed" else rec.kind


def spec_figures(records: list[RequestRecord]) -> dict[str, Any]:
    """Drafted / accepted tokens (summed), the acceptance rate, and agreement with the reference:
    mean agreement, exact matches and how many records had a reference."""
    drafted = [r.draft_n for r in records if r.draft_n is not None]
    accepted = [r.draft_accepted for r in records if r.draft_accepted is not None]
    compared = [r for r in records if r.agreement is not None]
    fid = [r.extra["fidelity"] for r in records if isinstance(r.extra.get("fidelity"), (int, float))]
    n_drafted = sum(drafted) if drafted else None
    n_accepted = sum(accepted) if accepted else None
    return {
        "draft_n": n_drafted,
        "draft_accepted": n_accepted,
        "acceptance": (n_accepted or 0) / n_drafted if n_drafted else None,
        "agreement": sum(r.agreement or 0.0 for r in compared) / len(compared) if compared else None,
        "agreement_min": min(r.agreement or 0.0 for r in compared) if compared else None,
        "exact_matches": sum(1 for r in compared if r.exact_match) if compared else None,
        "compared": len(compared),
        "fidelity": sum(fid) / len(fid) if fid else None,
    }


def workload_rows(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """One row per (workload, concurrency): speed, acceptance and agreement.  ``chat`` appears only
    when the run has another workload beside it."""
    recs = [r for r in records if r.kind in WORKLOAD_KINDS]
    if all(r.kind == "speed" for r in recs):
        return []
    groups: dict[tuple[str, Any], list[RequestRecord]] = {}
    for r in recs:
        groups.setdefault((workload_of(r), r.cell.get("concurrency")), []).append(r)
    order = {w: i for i, w in enumerate(("chat", "copy", "edit", "json", "agent"))}
    rows = []
    for (workload, conc), rs in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][1] or 0)):
        s = summarize(rs)
        cached = [
            r.cached_tokens / r.prompt_tokens for r in rs if r.ok and r.prompt_tokens and r.cached_tokens is not None
        ]
        rows.append(
            {
                "workload": workload,
                "concurrency": conc,
                "items": len({r.cell.get("item") for r in rs}),
                **s,
                "cached_fraction": median(cached),
                **spec_figures(rs),
            }
        )
    return rows


def agent_turn_rows(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """One row per agent turn (and concurrency): prompt and cached tokens, TTFT, decode speed."""
    rows = []
    for (conc, turn), rs in group_records(records, ("concurrency", "turn"), kind="agent").items():
        ok = [r for r in rs if r.ok]
        m = [request_metrics(r) for r in ok]
        prompt = median(r.prompt_tokens for r in ok if r.prompt_tokens is not None)
        cached = median(r.cached_tokens for r in ok if r.cached_tokens is not None)
        fractions = [r.cached_tokens / r.prompt_tokens for r in ok if r.prompt_tokens and r.cached_tokens is not None]
        rows.append(
            {
                "concurrency": conc,
                "turn": turn,
                "n": len(rs),
                "errors": len(rs) - len(ok),
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "cached_fraction": median(fractions),
                "new_tokens": median((r.prompt_tokens or 0) - (r.cached_tokens or 0) for r in ok),
                "completion_tokens": median(r.completion_tokens for r in ok if r.completion_tokens is not None),
                "ttf_token_ms_p50": median(r.ttf_token_ms for r in ok),
                "ttft_ms_p50": median(turn_ttft_ms(r) for r in ok),
                "prompt_ms_server_p50": median((r.timings or {}).get("prompt_ms") for r in ok),
                "prefill_tps_server": median(x["prefill_tps_server"] for x in m),
                "decode_tps_server": median(x["decode_tps_server"] for x in m),
                **spec_figures(rs),
            }
        )
    return rows


def turn_ttft_ms(rec: RequestRecord) -> float | None:
    """Time to the first generated token; for a turn that generated none (the model's end of
    turn came first), the end of the response, which is then when that first token came."""
    return rec.ttf_token_ms if rec.ttf_token_ms is not None else rec.e2e_ms


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
        rows.append(
            {"length": length, "depth": depth, "verdict": verdict, "reason": reasons[0] if reasons else "", **s}
        )
    return rows


def prefill_by_length(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """Prefill speed and time to first token per context length, over all depths."""
    rows = []
    for (length,), recs in group_records(records, ("length",), kind="context").items():
        ok = [r for r in recs if r.ok]
        if not ok:
            continue
        m = [request_metrics(r) for r in ok]
        rows.append(
            {
                "length": length,
                "n": len(ok),
                "prompt_tokens": median(r.prompt_tokens for r in ok if r.prompt_tokens),
                "prefill_tps_server": median(x["prefill_tps_server"] for x in m),
                "prefill_tps_client": median(x["prefill_tps_client"] for x in m),
                "decode_tps_server": median(x["decode_tps_server"] for x in m),
                "ttf_token_ms_p50": median(r.ttf_token_ms for r in ok),
                "cache_hits": sum(1 for r in recs if r.cache_hit),
            }
        )
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


def sweep_workload_rows(run: BenchRun) -> list[dict[str, Any]]:
    """One row per (sweep point, workload, concurrency), with the baseline point's decode speed
    (the ``speculation=none`` point of the same other settings) and the speedup over it."""
    rows = []
    for point in run.points:
        if point.error:
            continue
        base = baseline_of(run, point)
        base_rows = {(r["workload"], r["concurrency"]): r for r in _all_workload_rows(base.records)} if base else {}
        for row in _all_workload_rows(point.records):
            b = base_rows.get((row["workload"], row["concurrency"]))
            base_tps = b["decode_tps_server"] if b else None
            rows.append(
                {
                    "values": point.values,
                    "baseline": base is None and is_baseline(point.values),
                    "baseline_decode_tps_server": base_tps,
                    "speedup": row["decode_tps_server"] / base_tps if base_tps and row["decode_tps_server"] else None,
                    **row,
                }
            )
    return rows


def _all_workload_rows(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """:func:`workload_rows`, chat included even when it is the only workload."""
    rows = workload_rows(records)
    if rows or not any(r.kind == "speed" for r in records):
        return rows
    # chat alone: one row per concurrency over every prompt size
    out = []
    for (conc,), rs in group_records(records, ("concurrency",), kind="speed").items():
        out.append(
            {
                "workload": "chat",
                "concurrency": conc,
                "items": None,
                **summarize(rs),
                "cached_fraction": None,
                **spec_figures(rs),
            }
        )
    return out


def _server_brief(server: dict[str, Any]) -> dict[str, Any]:
    cluster = server.get("cluster") or {}
    eff = cluster.get("effective") or {}
    return {
        "n_ctx": server.get("n_ctx"),
        "total_slots": server.get("total_slots"),
        "n_ubatch": eff.get("n_ubatch"),
        "n_batch": eff.get("n_batch"),
        "flash_attn": eff.get("flash_attn"),
    }


def engine_rows(run: BenchRun) -> list[dict[str, Any]]:
    rows = []
    for r in run.engine_rows:
        rows.append(
            {
                "test": r.get("test"),
                "n_ubatch": r.get("n_ubatch"),
                "n_batch": r.get("n_batch"),
                "avg_ts": r.get("avg_ts"),
                "stddev_ts": r.get("stddev_ts"),
                "model_type": r.get("model_type"),
                "backends": r.get("backends"),
                "n_gpu_layers": r.get("n_gpu_layers"),
            }
        )
    return rows


TTFT_AT = "ttf_token_ms_p50_at_"
"""Headline key prefix of the time to first token at one prompt size (``..._at_512``)."""


def ttft_by_prompt(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Time to first token per prompt size: it grows with the prompt, so cells of different
    sizes are never pooled."""
    return {
        f"{TTFT_AT}{r['prompt_target']}": r["ttf_token_ms_p50"]
        for r in sorted(rows, key=lambda r: r["prompt_target"] or 0)
    }


def headline(run: BenchRun) -> dict[str, float | None]:
    """The few numbers a comparison leads with, for any run kind."""
    if run.kind == "speed":
        rows = speed_rows(run.records)
        ones = [r for r in rows if r["concurrency"] == min(x["concurrency"] for x in rows)] if rows else []
        out: dict[str, float | None] = {}
        if rows or not workload_rows(run.records):
            out = {
                "prefill_tps_server": median(r["prefill_tps_server"] for r in ones),
                "decode_tps_server": median(r["decode_tps_server"] for r in ones),
                "decode_tps_client": median(r["decode_tps_client"] for r in ones),
                **ttft_by_prompt(ones),
                "max_throughput_tps": max((r["throughput_tps"] or 0 for r in rows), default=None) or None,
            }
        wrows = [r for r in workload_rows(run.records) if r["workload"] != "chat"]
        low = min((r["concurrency"] or 1 for r in wrows), default=None)
        for r in wrows:
            if (r["concurrency"] or 1) != low:
                continue
            w = r["workload"]
            out[f"{w}_decode_tps_server"] = r["decode_tps_server"]
            if r["acceptance"] is not None:
                out[f"{w}_acceptance"] = r["acceptance"]
            if r["agreement"] is not None:
                out[f"{w}_agreement"] = r["agreement"]
        turns = agent_turn_rows(run.records)
        later = [t["cached_fraction"] for t in turns if (t["turn"] or 0) >= 2 and t["cached_fraction"] is not None]
        if later:
            out["agent_cached_fraction_turn2plus"] = median(later)
        return out
    if run.kind == "context":
        rows = prefill_by_length(run.records)
        cells = context_rows(run.records)
        graded = [c for c in cells if c["verdict"] not in ("skipped", "n/a") and c["depth"] != CONTROL]
        return {
            "prefill_tps_server_longest": rows[-1]["prefill_tps_server"] if rows else None,
            "retrieval_found_fraction": (sum(1 for c in graded if c["verdict"] == "found") / len(graded))
            if graded
            else None,
        }
    if run.kind == "engine":
        pp = [r["avg_ts"] for r in run.engine_rows if int(r.get("n_prompt", 0)) and not int(r.get("n_gen", 0))]
        tg = [r["avg_ts"] for r in run.engine_rows if int(r.get("n_gen", 0)) and not int(r.get("n_prompt", 0))]
        return {"pp_tps": median(pp), "tg_tps": median(tg)}
    if run.kind == "sweep":
        rows = [r for r in sweep_rows(run) if "error" not in r]
        out = {
            "best_prefill_tps_server": max((r["prefill_tps_server"] or 0 for r in rows), default=None) or None,
            "best_decode_tps_server": max((r["decode_tps_server"] or 0 for r in rows), default=None) or None,
        }
        speedups = [r["speedup"] for r in sweep_workload_rows(run) if r["speedup"]]
        if speedups:
            out["best_speculation_speedup"] = max(speedups)
        return out
    return {}
