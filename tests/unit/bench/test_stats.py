"""Percentiles, per-request speeds and batch throughput."""

from __future__ import annotations

import pytest

from splitserve.bench._records import RequestRecord
from splitserve.bench._stats import batch_throughput, inter_token_ms, percentile, request_metrics, summarize


def test_percentile_interpolates() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentile([], 50) is None
    assert percentile([10, 0, 20], 100) == 20


def rec(**kw: object) -> RequestRecord:
    base: dict[str, object] = dict(id="r", kind="speed", cell={"prompt_tokens": 8, "concurrency": 1})
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]


def test_request_metrics_server_and_client() -> None:
    r = rec(
        prompt_tokens=110,
        cached_tokens=10,
        completion_tokens=5,
        ttf_token_ms=200.0,
        token_times_ms=[200.0, 300.0, 400.0, 500.0, 600.0],
        timings={"prompt_n": 100, "prompt_ms": 50.0, "predicted_n": 5, "predicted_ms": 250.0},
    )
    m = request_metrics(r)
    assert m["prefill_tps_server"] == pytest.approx(2000.0)
    assert m["decode_tps_server"] == pytest.approx(20.0)
    assert m["prefill_tps_client"] == pytest.approx(500.0)  # 100 uncached tokens in 0.2 s
    assert m["decode_tps_client"] == pytest.approx(10.0)  # 4 tokens after the first in 0.4 s
    assert inter_token_ms(r) == [100.0] * 4


def test_batch_throughput_uses_wall_time_of_the_batch() -> None:
    a = rec(id="a", batch=1, started_at=100.0, e2e_ms=1000.0, completion_tokens=10)
    b = rec(id="b", batch=1, started_at=100.0, e2e_ms=2000.0, completion_tokens=10)
    c = rec(id="c", batch=2, started_at=200.0, e2e_ms=1000.0, completion_tokens=5, error="boom")
    assert batch_throughput([a, b, c]) == [pytest.approx(10.0)]


def test_summarize_counts_errors_and_cache_hits() -> None:
    s = summarize([rec(id="a", cache_hit=True, e2e_ms=5.0), rec(id="b", error="HTTP 500: x")])
    assert (s["n"], s["errors"], s["cache_hits"]) == (2, 1, 1)
    assert s["e2e_ms_p50"] == 5.0


def test_tpot_is_time_after_the_first_token_per_further_token() -> None:
    from splitserve.bench._records import RequestRecord
    from splitserve.bench._stats import summarize, tpot_ms

    def rec(ttft: float, e2e: float, n: int) -> RequestRecord:
        return RequestRecord(
            id=f"r{ttft}", kind="speed", cell={}, ttf_token_ms=ttft, e2e_ms=e2e, completion_tokens=n, status=200
        )

    assert tpot_ms(rec(100.0, 1100.0, 11)) == 100.0
    assert tpot_ms(rec(100.0, 100.0, 1)) is None  # one token: no time per further token
    s = summarize([rec(100.0, 1100.0, 11), rec(100.0, 2100.0, 11)])
    assert s["tpot_ms_p50"] == 150.0 and s["tpot_ms_p99"] > s["tpot_ms_p50"]
    assert s["e2e_ms_p99"] > s["e2e_ms_p90"] > s["e2e_ms_p50"] == 1600.0
