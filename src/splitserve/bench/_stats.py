"""Figures from records: per-request metrics and per-cell summaries (pure)."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ._records import RequestRecord


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation; ``None`` for no values."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(values: Iterable[float | None]) -> float | None:
    return percentile([v for v in values if v is not None], 50)


def inter_token_ms(rec: RequestRecord) -> list[float]:
    t = rec.token_times_ms
    return [b - a for a, b in itertools.pairwise(t)]


def tpot_ms(rec: RequestRecord) -> float | None:
    """Time per output token after the first (vLLM's TPOT): (end - first token) / (tokens - 1),
    with the token count from the server's usage."""
    if not rec.completion_tokens or rec.completion_tokens < 2 or rec.ttf_token_ms is None or rec.e2e_ms is None:
        return None
    return (rec.e2e_ms - rec.ttf_token_ms) / (rec.completion_tokens - 1)


def request_metrics(rec: RequestRecord) -> dict[str, float | None]:
    """Speeds of one request, from the server's timings and from the client's clock."""
    out: dict[str, float | None] = {
        "prefill_tps_server": None,
        "decode_tps_server": None,
        "prefill_tps_client": None,
        "decode_tps_client": None,
    }
    tm = rec.timings or {}
    if tm.get("prompt_ms") and tm.get("prompt_n") is not None and tm["prompt_ms"] > 0:
        out["prefill_tps_server"] = tm["prompt_n"] / tm["prompt_ms"] * 1000.0
    # one generated token has no decode time of its own (llama.cpp reports ~0 ms for it)
    if tm.get("predicted_ms") and (tm.get("predicted_n") or 0) > 1 and tm["predicted_ms"] > 0:
        out["decode_tps_server"] = tm["predicted_n"] / tm["predicted_ms"] * 1000.0
    if rec.prompt_tokens is not None and rec.ttf_token_ms:
        uncached = rec.prompt_tokens - (rec.cached_tokens or 0)
        out["prefill_tps_client"] = uncached / rec.ttf_token_ms * 1000.0
    if rec.completion_tokens and rec.completion_tokens > 1 and len(rec.token_times_ms) > 1:
        span = rec.token_times_ms[-1] - rec.token_times_ms[0]
        if span > 0:
            out["decode_tps_client"] = (rec.completion_tokens - 1) / span * 1000.0
    return out


def cell_key(rec: RequestRecord, keys: Sequence[str]) -> tuple[Any, ...]:
    return tuple(rec.cell.get(k) for k in keys)


def group_records(
    records: Iterable[RequestRecord], keys: Sequence[str], kind: str | None = None
) -> dict[tuple[Any, ...], list[RequestRecord]]:
    groups: dict[tuple[Any, ...], list[RequestRecord]] = defaultdict(list)
    for rec in records:
        if kind is not None and rec.kind != kind:
            continue
        groups[cell_key(rec, keys)].append(rec)
    return dict(sorted(groups.items(), key=lambda kv: tuple(_sortable(v) for v in kv[0])))


def _sortable(v: Any) -> tuple[int, Any]:
    if isinstance(v, (int, float)):
        return (0, v)
    return (1, str(v))


def batch_throughput(records: Sequence[RequestRecord]) -> list[float]:
    """Generated tokens per second of wall time, for each batch of requests in flight together."""
    batches: dict[int, list[RequestRecord]] = defaultdict(list)
    for rec in records:
        batches[rec.batch].append(rec)
    out = []
    for recs in batches.values():
        done = [r for r in recs if r.ok and r.completion_tokens and r.e2e_ms is not None]
        if not done:
            continue
        start = min(r.started_at for r in recs)
        end = max(r.started_at + (r.e2e_ms or 0) / 1000.0 for r in done)
        tokens = sum(r.completion_tokens or 0 for r in done)
        if end > start:
            out.append(tokens / (end - start))
    return out


def summarize(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """One cell's figures: medians of the speeds, latency percentiles, counts."""
    ok = [r for r in records if r.ok]
    metrics = [request_metrics(r) for r in ok]
    itl = [d for r in ok for d in inter_token_ms(r)]
    tpot = [t for t in (tpot_ms(r) for r in ok) if t is not None]
    through = batch_throughput(records)

    def med(key: str) -> float | None:
        return median(m[key] for m in metrics)

    return {
        "n": len(records),
        "errors": len(records) - len(ok),
        "cache_hits": sum(1 for r in records if r.cache_hit),
        "prompt_tokens": median(r.prompt_tokens for r in ok if r.prompt_tokens is not None),
        "completion_tokens": median(r.completion_tokens for r in ok if r.completion_tokens is not None),
        "prefill_tps_server": med("prefill_tps_server"),
        "prefill_tps_client": med("prefill_tps_client"),
        "decode_tps_server": med("decode_tps_server"),
        "decode_tps_client": med("decode_tps_client"),
        "ttf_chunk_ms_p50": median(r.ttf_chunk_ms for r in ok),
        "ttf_token_ms_p50": median(r.ttf_token_ms for r in ok),
        "ttf_content_ms_p50": median(r.ttf_content_ms for r in ok),
        "ttf_reasoning_ms_p50": median(r.ttf_reasoning_ms for r in ok),
        "ttf_token_ms_p90": percentile([r.ttf_token_ms for r in ok if r.ttf_token_ms is not None], 90),
        "itl_ms_p50": percentile(itl, 50),
        "itl_ms_p90": percentile(itl, 90),
        "itl_ms_p99": percentile(itl, 99),
        "ttf_token_ms_p99": percentile([r.ttf_token_ms for r in ok if r.ttf_token_ms is not None], 99),
        "tpot_ms_p50": percentile(tpot, 50),
        "tpot_ms_p90": percentile(tpot, 90),
        "tpot_ms_p99": percentile(tpot, 99),
        "e2e_ms_p50": median(r.e2e_ms for r in ok),
        "e2e_ms_p90": percentile([r.e2e_ms for r in ok if r.e2e_ms is not None], 90),
        "e2e_ms_p99": percentile([r.e2e_ms for r in ok if r.e2e_ms is not None], 99),
        "throughput_tps": median(through),
    }
