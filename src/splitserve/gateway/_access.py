"""One record per request: what the access log line and the request metrics are made of.

The route wrapper opens a :class:`RequestRecord` (``request.state.record``); the handler and
the stream fill it as they learn things (key, model, queue wait, first token, usage, finish
reason); when the answer is over (a whole body sent, or a stream's last byte or its client
gone) the record is closed once: one log line on the ``splitserve.access`` logger at INFO
and one observation of each request metric.
"""

from __future__ import annotations

import logging
import secrets
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

ACCESS_LOG = logging.getLogger("splitserve.access")


@dataclass
class RequestRecord:
    """What one request did; times are ``time.perf_counter`` seconds."""

    endpoint: str
    method: str
    path: str
    arrived: float
    id: str = ""
    key: str = "-"
    model: str = ""
    status: int = 0
    queue_s: float | None = None
    ttft_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    generation: bool = False
    """A generation that reached the engine (the request metrics count only these)."""
    disconnected: bool = False
    duration_s: float | None = None
    replica: str | None = None
    """The replica that served it, behind a :class:`~splitserve.gateway.ReplicaBackend` (``-``
    before one was chosen; None: the gateway fronts one engine and the log line has no field)."""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = "req-" + secrets.token_hex(6)

    def usage(self, usage: dict[str, Any], finish_reason: str | None) -> None:
        """Take an OpenAI ``usage`` object and a finish reason."""
        self.generation = True
        self.prompt_tokens = _int(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        self.cached_tokens = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
        self.completion_tokens = _int(usage.get("completion_tokens"))
        self.finish_reason = finish_reason

    def timings(self, timings: dict[str, Any] | None) -> None:
        """Take llama.cpp's ``timings`` (``prompt_ms``, ``predicted_ms``)."""
        if not timings:
            return
        prompt_ms, predicted_ms = timings.get("prompt_ms"), timings.get("predicted_ms")
        if isinstance(prompt_ms, (int, float)) and _number(prompt_ms):
            self.prefill_s = float(prompt_ms) / 1000
        if isinstance(predicted_ms, (int, float)) and _number(predicted_ms):
            self.decode_s = float(predicted_ms) / 1000

    def close(self) -> float:
        """Mark the end; returns the duration."""
        self.duration_s = time.perf_counter() - self.arrived
        return self.duration_s

    def line(self) -> str:
        """The access log line: id, key name, request, status, tokens, TTFT, duration."""

        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value * 1000:.1f}ms"

        def n(value: int | None) -> str:
            return "-" if value is None else str(value)

        status = f"{self.status}" + (" client-gone" if self.disconnected else "")
        return (
            f"{self.id} key={self.key} {self.method} {self.path} {status} "
            f"model={self.model or '-'} prompt={n(self.prompt_tokens)} "
            f"cached={n(self.cached_tokens)} completion={n(self.completion_tokens)} "
            f"finish={self.finish_reason or '-'} queue={ms(self.queue_s)} "
            f"ttft={ms(self.ttft_s)} duration={ms(self.duration_s)}"
            + ("" if self.replica is None else f" replica={self.replica}")
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _int(value: Any) -> int | None:
    return int(value) if _number(value) else None


CURRENT: ContextVar[RequestRecord | None] = ContextVar("splitserve_request_record", default=None)
"""The record of the request being handled (set by the app's route wrapper), so that a backend
deep below the handler can note what it did (:func:`note_replica`)."""


def note_replica(name: str) -> None:
    """Put the replica that serves the current request on its record (nothing outside a request)."""
    rec = CURRENT.get()
    if rec is not None:
        rec.replica = name


__all__ = ["ACCESS_LOG", "CURRENT", "RequestRecord", "note_replica"]


def request_record(request: Any) -> RequestRecord:
    """The request's :class:`RequestRecord` (one is made for a request the app's wrapper did not
    see); ``request`` is a Starlette request."""
    rec = getattr(request.state, "record", None)
    if rec is None:
        rec = request.state.record = RequestRecord("-", request.method, request.url.path, time.perf_counter())
    return rec
