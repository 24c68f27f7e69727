"""Prometheus metrics of one gateway (its own registry, so several can live in one process)."""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

_FAST = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_TTFT = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TPS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


class Metrics:
    """The gateway's counters, gauges and histograms."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("splitserve_requests", "HTTP requests by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.ttft = Histogram("splitserve_time_to_first_token_seconds",
                              "request arrival to the first generated token sent", buckets=_TTFT,
                              registry=r)
        self.added = Histogram("splitserve_gateway_added_seconds",
                               "time the gateway itself adds before the first token: request "
                               "handling before the engine call plus first-chunk relay",
                               buckets=_FAST, registry=r)
        self.tps = Histogram("splitserve_decode_tokens_per_second",
                             "completion tokens per second of decode, per request", buckets=_TPS,
                             registry=r)
        self.tokens = Counter("splitserve_tokens", "tokens by kind (prompt, cached, completion)",
                              ["kind"], registry=r)
        self.queue = Gauge("splitserve_queue_depth", "requests waiting for a per-key slot",
                           registry=r)
        self.running = Gauge("splitserve_requests_running", "requests holding a slot",
                             registry=r)
        self.warnings = Counter("splitserve_parse_warnings", "parser and policy warnings",
                                registry=r)
        self.disconnects = Counter("splitserve_client_disconnects",
                                   "generations cancelled because the client went away",
                                   registry=r)
        self.drafted = Counter("splitserve_draft_tokens",
                               "tokens drafted by the engine's speculative decoding (timings.draft_n)",
                               registry=r)
        self.accepted = Counter("splitserve_draft_accepted_tokens",
                                "drafted tokens the model accepted (timings.draft_n_accepted)",
                                registry=r)
        self.acceptance = Gauge("splitserve_draft_acceptance_ratio",
                                "accepted / drafted tokens since the gateway started (0 before a draft)",
                                registry=r)
        self._drafted = 0
        self._accepted = 0

    def on_timings(self, timings: dict[str, Any]) -> None:
        """Count one response's speculative-decoding figures (llama-server adds ``draft_n`` and
        ``draft_n_accepted`` to ``timings`` when it drafted)."""
        drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
        if not isinstance(drafted, (int, float)) or isinstance(drafted, bool) or drafted <= 0:
            return
        accepted = accepted if isinstance(accepted, (int, float)) and not isinstance(accepted, bool) else 0
        accepted = max(0, min(int(accepted), int(drafted)))
        self.drafted.inc(int(drafted))
        self.accepted.inc(accepted)
        self._drafted += int(drafted)
        self._accepted += accepted
        self.acceptance.set(self._accepted / self._drafted)

    def on_limits(self, running: int, queued: int) -> None:
        self.running.set(running)
        self.queue.set(queued)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = ["Metrics"]
