"""Prometheus metrics of one gateway (its own registry, so several can live in one process).

Request metrics follow vLLM's set and Prometheus naming (seconds, ``_total``), prefixed
``splitserve_`` and labelled ``model_name``: ``e2e_request_latency_seconds``,
``request_queue_time_seconds``, ``time_to_first_token_seconds`` (every generation, streamed
or not), ``request_prefill_time_seconds``, ``request_decode_time_seconds``,
``request_time_per_output_token_seconds``, ``request_prompt_tokens`` /
``request_generation_tokens`` histograms, ``prompt_tokens_total``,
``prompt_tokens_cached_total``, ``generation_tokens_total`` and ``request_success_total``
by ``finished_reason``. ``tokens_total{kind}`` splits the same tokens three ways that do
not overlap (``prompt`` = prompt tokens the engine computed, ``cached`` = prompt tokens it
reused, ``completion``), so its sum is every token once. The engine's own metrics
(llama-server's ``llamacpp:*``) are appended to ``/metrics`` by the gateway when the engine
serves them (``splitserve_engine_metrics_up``).

Behind replicas (a :class:`~splitserve.gateway.ReplicaBackend`) the same counts are kept per
replica, labelled ``replica``: ``replica_requests_total{replica,endpoint,status}`` (every request
that reached one), ``replica_tokens_total{replica,kind}`` (the kinds of ``tokens_total``),
``replica_errors_total{replica,kind}`` (``down``: refused the connection, ``loading``: answered 503,
``error``: any other engine error, ``5xx``: a request there that ended in a server error), and each
engine's own metrics carry ``replica`` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from ._access import RequestRecord

_FAST = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_TTFT = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TPS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
_E2E = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_QUEUE = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TPOT = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
_TOKENS = (1, 8, 32, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


class _Maker:
    """Makes a registry's metrics, each named ``splitserve_`` and its name."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(f"splitserve_{name}", doc, labels, registry=self.registry)

    def gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(f"splitserve_{name}", doc, registry=self.registry)

    def histogram(self, name: str, doc: str, buckets: Sequence[float], labels: Sequence[str] = ()) -> Histogram:
        return Histogram(f"splitserve_{name}", doc, labels, buckets=buckets, registry=self.registry)


class Metrics:
    """The gateway's counters, gauges and histograms."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        make = _Maker(self.registry)
        self.requests = make.counter("requests", "HTTP requests by endpoint and status", ["endpoint", "status"])
        self._request_metrics(make, ["model_name"])
        self._gateway_metrics(make)
        self._replica_metrics(make, ["replica"])
        self._drafted = 0
        self._accepted = 0

    def _request_metrics(self, make: _Maker, m: list[str]) -> None:
        """vLLM's set, by model: latencies, token counts, finish reasons."""
        self.ttft = make.histogram(
            "time_to_first_token_seconds",
            "request arrival to the first generated token (sent, when streamed; from the engine, for a whole answer)",
            _TTFT,
            m,
        )
        self.e2e = make.histogram("e2e_request_latency_seconds", "request arrival to its last byte sent", _E2E, m)
        self.queue_time = make.histogram(
            "request_queue_time_seconds", "time waiting for a place in the key's limit", _QUEUE, m
        )
        self.prefill = make.histogram(
            "request_prefill_time_seconds", "the engine's prompt processing time (timings.prompt_ms)", _E2E, m
        )
        self.decode = make.histogram(
            "request_decode_time_seconds", "the engine's generation time (timings.predicted_ms)", _E2E, m
        )
        self.tpot = make.histogram(
            "request_time_per_output_token_seconds", "decode time / (completion tokens - 1), per request", _TPOT, m
        )
        self.prompt_hist = make.histogram("request_prompt_tokens", "prompt tokens per request", _TOKENS, m)
        self.gen_hist = make.histogram("request_generation_tokens", "completion tokens per request", _TOKENS, m)
        self.prompt_total = make.counter("prompt_tokens", "prompt tokens (cached included)", m)
        self.cached_total = make.counter("prompt_tokens_cached", "prompt tokens the engine reused from its cache", m)
        self.gen_total = make.counter("generation_tokens", "completion tokens", m)
        self.success = make.counter(
            "request_success", "generations that ended, by finish reason", m + ["finished_reason"]
        )

    def _gateway_metrics(self, make: _Maker) -> None:
        """The gateway's own: its added latency, queue, tokens by kind, warnings, drafts."""
        self.engine_up = make.gauge(
            "engine_metrics_up", "1 when the engine's own metrics were appended to the last scrape"
        )
        self.added = make.histogram(
            "gateway_added_seconds",
            "time the gateway itself adds before the first token: request "
            "handling before the engine call plus first-chunk relay",
            _FAST,
        )
        self.tps = make.histogram(
            "decode_tokens_per_second", "completion tokens per second of decode, per request", _TPS
        )
        self.tokens = make.counter(
            "tokens",
            "tokens by kind, not overlapping: prompt (computed), cached (prompt tokens reused), completion",
            ["kind"],
        )
        self.queue = make.gauge("queue_depth", "requests waiting for a per-key slot")
        self.running = make.gauge("requests_running", "requests holding a slot")
        self.warnings = make.counter("parse_warnings", "parser and policy warnings")
        self.disconnects = make.counter("client_disconnects", "generations cancelled because the client went away")
        self.drafted = make.counter(
            "draft_tokens", "tokens drafted by the engine's speculative decoding (timings.draft_n)"
        )
        self.accepted = make.counter(
            "draft_accepted_tokens", "drafted tokens the model accepted (timings.draft_n_accepted)"
        )
        self.acceptance = make.gauge(
            "draft_acceptance_ratio", "accepted / drafted tokens since the gateway started (0 before a draft)"
        )

    def _replica_metrics(self, make: _Maker, rep: list[str]) -> None:
        """Per replica, behind a ReplicaBackend: requests, tokens, errors."""
        self.replica_requests = make.counter(
            "replica_requests", "requests that reached a replica, by endpoint and status", rep + ["endpoint", "status"]
        )
        self.replica_tokens = make.counter(
            "replica_tokens",
            "tokens by replica and kind (prompt computed, cached, completion), as tokens_total",
            rep + ["kind"],
        )
        self.replica_errors = make.counter(
            "replica_errors",
            "engine errors by replica: down, loading, error (other engine errors), 5xx (requests answered so)",
            rep + ["kind"],
        )

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

    def on_replica_error(self, replica: str, kind: str) -> None:
        """Count an engine error of a replica (see :attr:`ReplicaBackend.on_error`)."""
        self.replica_errors.labels(replica, kind).inc()

    def _on_replica(self, rec: RequestRecord, replica: str) -> None:
        self.replica_requests.labels(replica, rec.endpoint, str(rec.status)).inc()
        if rec.status >= 500:
            self.replica_errors.labels(replica, "5xx").inc()
        if not rec.generation:
            return
        prompt, cached, completion = rec.prompt_tokens, rec.cached_tokens or 0, rec.completion_tokens
        if prompt is not None:
            cached = min(cached, prompt)
            self.replica_tokens.labels(replica, "prompt").inc(prompt - cached)
            self.replica_tokens.labels(replica, "cached").inc(cached)
        if completion is not None:
            self.replica_tokens.labels(replica, "completion").inc(completion)

    def on_request(self, rec: RequestRecord) -> None:
        """Observe one finished request (only generations that reached the engine; any request
        a replica served in the per-replica counts)."""
        if rec.replica not in (None, "-"):
            self._on_replica(rec, rec.replica)
        if not rec.generation:
            return
        model = rec.model or "-"
        if rec.duration_s is not None:
            self.e2e.labels(model).observe(rec.duration_s)
        for hist, value in (
            (self.queue_time, rec.queue_s),
            (self.ttft, rec.ttft_s),
            (self.prefill, rec.prefill_s),
            (self.decode, rec.decode_s),
        ):
            if value is not None:
                hist.labels(model).observe(max(0.0, value))
        prompt, cached, completion = rec.prompt_tokens, rec.cached_tokens or 0, rec.completion_tokens
        if prompt is not None:
            cached = min(cached, prompt)
            self.prompt_hist.labels(model).observe(prompt)
            self.prompt_total.labels(model).inc(prompt)
            self.cached_total.labels(model).inc(cached)
            self.tokens.labels("prompt").inc(prompt - cached)
            self.tokens.labels("cached").inc(cached)
        if completion is not None:
            self.gen_hist.labels(model).observe(completion)
            self.gen_total.labels(model).inc(completion)
            self.tokens.labels("completion").inc(completion)
            if rec.decode_s and completion > 1:
                self.tpot.labels(model).observe(rec.decode_s / (completion - 1))
        if rec.finish_reason and not rec.disconnected:
            self.success.labels(model, rec.finish_reason).inc()

    def on_limits(self, running: int, queued: int) -> None:
        self.running.set(running)
        self.queue.set(queued)

    def render(self, engine: bytes | None = None) -> tuple[bytes, str]:
        """The exposition text, with the engine's own metrics appended when given."""
        self.engine_up.set(1 if engine is not None else 0)
        data = generate_latest(self.registry)
        if engine:
            data += engine if engine.endswith(b"\n") else engine + b"\n"
        return data, CONTENT_TYPE_LATEST


__all__ = ["Metrics"]
