"""``splitserve tune``'s metrics and measurements: the figure a point is scored by (:class:`Metric`,
:data:`METRICS`), the per-request samples of a run's records (:func:`keyed_samples`), and a point's
:class:`Measurement` (median score, run-to-run spread, merging a point's repeated runs)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._errors import UsageError
from ._records import RequestRecord
from ._stats import batch_throughput, median, request_metrics

# -- metrics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    higher: bool
    """Higher is better (speeds); lower is better (latencies)."""


METRICS = {
    "decode": Metric("decode", "decode t/s (server)", "t/s", True),
    "prefill": Metric("prefill", "prefill t/s (server)", "t/s", True),
    "ttft": Metric("ttft", "time to first token", "ms", False),
    "e2e": Metric("e2e", "end-to-end latency", "ms", False),
    "throughput": Metric("throughput", "aggregate throughput t/s", "t/s", True),
}


def metric_for(name: str) -> Metric:
    m = METRICS.get(name.strip().lower())
    if m is None:
        raise UsageError(f"--metric {name!r}: use one of {', '.join(METRICS)}")
    return m


def record_kind(workload: str) -> str:
    """The record kind of a workload's requests (``chat`` is the speed bench's ``speed``)."""
    return "speed" if workload == "chat" else workload


def keyed_samples(records: Iterable[RequestRecord], metric: Metric, workload: str) -> list[tuple[str, float]]:
    """(request id, figure) per request of ``workload`` (per batch for ``throughput``); failed requests
    and, for prefill figures, prompt-cache hits left out."""
    kind = record_kind(workload)
    recs = [r for r in records if r.kind == kind and r.ok]
    if metric.name in ("prefill", "ttft"):
        recs = [r for r in recs if not r.cache_hit]
    if metric.name == "throughput":
        return [(f"batch-{i}", v) for i, v in enumerate(batch_throughput(recs))]
    out: list[tuple[str, float]] = []
    for r in recs:
        if metric.name == "decode":
            v = request_metrics(r)["decode_tps_server"]
        elif metric.name == "prefill":
            v = request_metrics(r)["prefill_tps_server"]
        elif metric.name == "ttft":
            v = r.ttf_token_ms
        else:
            v = r.e2e_ms
        if v is not None and not math.isnan(v):
            out.append((r.id, float(v)))
    return out


def samples_of(records: Iterable[RequestRecord], metric: Metric, workload: str) -> list[float]:
    return [v for _, v in keyed_samples(records, metric, workload)]


def exchangeable(workload: str, metric: Metric) -> bool:
    """Whether a point's requests are alike (``chat``: random words of one size), so that their spread is
    noise; the fixed workloads send different items (files, turns) whose speeds differ for reasons of
    their own, so only the same request's runs are compared for noise."""
    return workload == "chat" or metric.name == "throughput"


@dataclass
class Measurement:
    """A point's figures: one sample per request; the score is their median.  The spread is max - min
    over the samples, or (``alike=False``) over the runs of the same request (its id)."""

    samples: list[float] = field(default_factory=list)
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    alike: bool = True

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.samples)

    @property
    def score(self) -> float | None:
        return median(self.samples)

    @property
    def spread(self) -> float:
        if self.alike or len(self.ids) != len(self.samples):
            return max(self.samples) - min(self.samples) if len(self.samples) > 1 else 0.0
        groups: dict[str, list[float]] = {}
        for i, v in zip(self.ids, self.samples):
            groups.setdefault(i, []).append(v)
        return max((max(g) - min(g) for g in groups.values()), default=0.0)

    def merge(self, other: Measurement) -> None:
        """Another run's samples join these."""
        if other.ok:
            if len(self.ids) == len(self.samples) and len(other.ids) == len(other.samples):
                self.ids.extend(other.ids)
            else:
                self.ids = []
            self.samples.extend(other.samples)
            if self.samples:
                self.error = None

    def copy(self) -> Measurement:
        return Measurement(list(self.samples), self.error, dict(self.extra), list(self.ids), self.alike)

    @property
    def spread_known(self) -> bool:
        """Whether the spread says anything: alike samples (two or more), or a request run twice."""
        if self.alike or len(self.ids) != len(self.samples):
            return len(self.samples) > 1
        return len(set(self.ids)) < len(self.ids)

    def as_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "spread": self.spread if self.spread_known else None,
            "n": len(self.samples),
            "min": min(self.samples) if self.samples else None,
            "max": max(self.samples) if self.samples else None,
            "samples": [round(s, 4) for s in self.samples],
            "ids": self.ids,
            "alike": self.alike,
            "error": self.error,
            **self.extra,
        }
