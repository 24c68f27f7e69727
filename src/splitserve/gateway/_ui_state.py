"""The dashboard's view of a cluster, put together from raw readings: pure, no I/O.

:class:`Snapshot` holds what the gateway read in one pass (the cluster state `up` wrote, which
processes are alive, llama.cpp's memory breakdown and load stage, the supervisor's events, the
engine's ``/slots``, the head's TCP sockets to its workers, the planner's figures, the gateway's
own metric samples, the latest bench and eval runs); :class:`History` keeps the rates over the
last minutes; :func:`assemble` turns both into the JSON that ``/ui/state`` serves and the page
draws. Tests build snapshots by hand (``tests/unit/gateway/test_ui_state.py``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..cluster import LINK_RTT_MEANING, LINK_RTT_WARN_MS, ClusterState, link_rtt_status

Sample = tuple[str, dict[str, str], float]
"""One prometheus sample: its name (``splitserve_requests_total``), labels and value."""

HISTORY_SECONDS = 300.0
"""How far back the throughput chart reaches."""
REPLICA_TPS_SECONDS = 10.0
"""The window of each replica's tokens/s on the page."""

EVENT_KINDS = ("died", "restarting", "restarted", "restart_failed", "start_failed", "gave_up", "stop_failed", "warning")
"""Supervisor log lines shown among the warnings."""


@dataclass
class Snapshot:
    """Everything one refresh of the page read; any part may be missing (None or empty)."""

    now: float
    state: ClusterState | None = None
    alive: dict[str, bool | None] = field(default_factory=dict)
    """Process node name -> alive (None: could not tell, e.g. an unreachable host)."""
    memory: list[dict[str, Any]] = field(default_factory=list)
    """llama.cpp's per-device buffers (:meth:`DeviceMemory.as_dict`)."""
    load_stage: str | None = None
    load_warnings: list[dict[str, str]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    """Supervisor log lines (``time``, ``kind``, ``node``, ``message``)."""
    slots: list[dict[str, Any]] | None = None
    slots_error: str | None = None
    links: dict[str, dict[str, float]] = field(default_factory=dict)
    """Worker ``host:port`` -> ``rtt_ms`` (the link RTT: the kernel's ``minrtt``), ``bytes_sent`` of
    the head's socket to it."""
    transports: dict[str, dict[str, Any]] = field(default_factory=dict)
    """RPC worker node -> its transport (:meth:`TransportReading.as_dict`: ``RDMA (mtu 4096)`` or
    ``TCP`` with the cause, and the RDMA check's warnings)."""
    plan: dict[str, Any] | None = None
    """:meth:`Plan.to_dict` for the cluster's spec."""
    plan_note: str | None = None
    """Why the plan is missing, or what it assumed."""
    samples: list[Sample] = field(default_factory=list)
    runs: dict[str, Any] = field(default_factory=dict)
    gateway_url: str | None = None
    replicas: list[dict[str, Any]] | None = None
    """Behind replicas: :meth:`ReplicaBackend.state` (name, url, status, running, busy_slots,
    sessions, served, errors); None when the gateway fronts one engine."""


# -- rates over time ---------------------------------------------------------------------------


@dataclass
class _SlotMark:
    task: Any
    decoded: int
    processed: int
    at: float


class History:
    """Decode and prefill tokens/s (sums over slots), per-slot decode rate, bytes sent per link."""

    def __init__(self, seconds: float = HISTORY_SECONDS) -> None:
        self.seconds = seconds
        self.series: deque[tuple[float, float, float]] = deque()
        self.slot_tps: dict[Any, float] = {}
        self._slots: dict[Any, _SlotMark] = {}
        self._links: dict[str, tuple[float, float]] = {}
        self.link_rate: dict[str, float] = {}
        self._loaded: dict[str, tuple[float, float]] = {}
        self.load_rate: dict[str, float] = {}
        """Per worker: the rate its weights come into place (``loaded_bytes``: cache hits and RDMA too)."""
        self._replica_tokens: dict[str, deque[tuple[float, float]]] = {}
        self.replica_tps: dict[str, float] = {}

    def update(self, snap: Snapshot) -> None:
        if snap.slots is not None:
            decode, prefill = self._update_slots(snap.slots, snap.now)
            self.series.append((snap.now, decode, prefill))
        while self.series and snap.now - self.series[0][0] > self.seconds:
            self.series.popleft()
        self._update_links(snap.links, snap.now)
        self._update_replicas(snap)

    def _update_replicas(self, snap: Snapshot) -> None:
        """Completion tokens per second of each replica over the last :data:`REPLICA_TPS_SECONDS`,
        from the gateway's own ``splitserve_replica_tokens_total{kind="completion"}`` (counted
        when a request ends)."""
        for r in snap.replicas or []:
            name = str(r.get("name"))
            total = _replica_tokens(snap.samples, name).get("completion", 0.0)
            marks = self._replica_tokens.setdefault(name, deque())
            marks.append((snap.now, total))
            while len(marks) > 2 and snap.now - marks[1][0] >= REPLICA_TPS_SECONDS:
                marks.popleft()
            (t0, v0), (t1, v1) = marks[0], marks[-1]
            self.replica_tps[name] = max(0.0, v1 - v0) / (t1 - t0) if t1 > t0 else 0.0

    def _update_slots(self, slots: list[dict[str, Any]], now: float) -> tuple[float, float]:
        decode = prefill = 0.0
        seen = set()
        for s in slots:
            sid = s.get("id")
            seen.add(sid)
            mark = _SlotMark(s.get("id_task"), _decoded(s), int(s.get("n_prompt_tokens_processed") or 0), now)
            old = self._slots.get(sid)
            self._slots[sid] = mark
            busy = bool(s.get("is_processing"))
            if old is None or old.task != mark.task or now <= old.at or not busy:
                self.slot_tps[sid] = 0.0  # idle, a new task, or no interval yet
                continue
            dt = now - old.at
            d_rate = max(0, mark.decoded - old.decoded) / dt
            p_rate = max(0, mark.processed - old.processed) / dt
            self.slot_tps[sid] = d_rate
            decode += d_rate
            prefill += p_rate
        for sid in list(self._slots):
            if sid not in seen:
                del self._slots[sid]
                self.slot_tps.pop(sid, None)
        return decode, prefill

    def _update_links(self, links: dict[str, dict[str, float]], now: float) -> None:
        for ep, link in links.items():
            sent = float(link.get("bytes_sent") or 0)
            old = self._links.get(ep)
            self._links[ep] = (now, sent)
            if old is not None and now > old[0]:
                # a new connection (restart) starts from zero: no rate for that step
                self.link_rate[ep] = max(0.0, sent - old[1]) / (now - old[0]) if sent >= old[1] else 0.0
            loaded = float(link.get("loaded_bytes") or sent)
            before = self._loaded.get(ep)
            self._loaded[ep] = (now, loaded)
            if before is not None and now > before[0]:
                self.load_rate[ep] = max(0.0, loaded - before[1]) / (now - before[0])


def _decoded(slot: dict[str, Any]) -> int:
    nt = slot.get("next_token")
    if isinstance(nt, list) and nt:
        nt = nt[0]
    return int(nt.get("n_decoded") or 0) if isinstance(nt, dict) else 0


# -- the gateway's own metrics ------------------------------------------------------------------


def _find(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    return [s for s in samples if s[0] == name and all(s[1].get(k) == v for k, v in labels.items())]


def _value(samples: list[Sample], name: str, default: float | None = 0.0) -> float | None:
    found = _find(samples, name)
    return sum(s[2] for s in found) if found else default


def histogram(samples: list[Sample], base: str) -> dict[str, float | None]:
    """Count, mean and p50/p90/p99 (interpolated within buckets) of a prometheus histogram."""
    buckets = sorted(
        (
            (math.inf if s[1].get("le") in ("+Inf", "inf") else float(s[1]["le"]), s[2])
            for s in _find(samples, base + "_bucket")
            if "le" in s[1]
        ),
        key=lambda b: b[0],
    )
    count = _value(samples, base + "_count") or 0.0
    total = _value(samples, base + "_sum") or 0.0
    out: dict[str, float | None] = {"count": count, "mean": total / count if count else None}
    for q in (0.5, 0.9, 0.99):
        out[f"p{round(q * 100)}"] = _quantile(buckets, count, q)
    return out


def _quantile(buckets: list[tuple[float, float]], count: float, q: float) -> float | None:
    if not count or not buckets:
        return None
    rank = q * count
    lo_edge, lo_count = 0.0, 0.0
    for edge, cum in buckets:
        if cum >= rank:
            if math.isinf(edge):
                return lo_edge  # beyond the last finite bucket: its edge is all we know
            width = cum - lo_count
            return lo_edge + (edge - lo_edge) * ((rank - lo_count) / width if width else 1.0)
        lo_edge, lo_count = edge, cum
    return lo_edge


def gateway_view(samples: list[Sample]) -> dict[str, Any]:
    """Requests by status and endpoint, TTFT, queue depth, tokens, from the gateway's registry."""
    by_status: dict[str, float] = {}
    by_endpoint: dict[str, float] = {}
    for _, labels, value in _find(samples, "splitserve_requests_total"):
        status, endpoint = labels.get("status", "?"), labels.get("endpoint", "?")
        by_status[status] = by_status.get(status, 0) + value
        by_endpoint[endpoint] = by_endpoint.get(endpoint, 0) + value
    tokens = {labels.get("kind", "?"): value for _, labels, value in _find(samples, "splitserve_tokens_total")}
    prompt, cached = tokens.get("prompt", 0.0), tokens.get("cached", 0.0)
    return {
        "requests_by_status": dict(sorted(by_status.items())),
        "requests_by_endpoint": dict(sorted(by_endpoint.items())),
        "ttft_seconds": histogram(samples, "splitserve_time_to_first_token_seconds"),
        "decode_tps": histogram(samples, "splitserve_decode_tokens_per_second"),
        "queue_depth": _value(samples, "splitserve_queue_depth"),
        "running": _value(samples, "splitserve_requests_running"),
        "tokens": tokens,
        # the kinds do not overlap: prompt = computed, cached = reused
        "prompt_cache_hit_ratio": cached / (prompt + cached) if prompt + cached else None,
        "parse_warnings": _value(samples, "splitserve_parse_warnings_total"),
        "disconnects": _value(samples, "splitserve_client_disconnects_total"),
    }


# -- replicas behind the gateway ----------------------------------------------------------------

HEALTH = {"ok": "up", "loading": "loading"}
"""A replica's router status as the page says it (anything else: ``down``)."""


def _replica_tokens(samples: list[Sample], replica: str) -> dict[str, float]:
    return {
        labels.get("kind", "?"): value
        for _, labels, value in _find(samples, "splitserve_replica_tokens_total", replica=replica)
    }


def replicas_view(snap: Snapshot, history: History) -> list[dict[str, Any]] | None:
    """One row per replica: name, URL, health (up, loading, down), load (running + queued: the
    engine's busy slots and the gateway's requests there beyond them), completion tokens/s and the
    fraction of prompt tokens served from its cache (the gateway's own counters); None when the
    gateway fronts one engine."""
    if snap.replicas is None:
        return None
    out = []
    for r in snap.replicas:
        name = str(r.get("name"))
        in_flight, busy = int(r.get("running") or 0), r.get("busy_slots")
        running = int(busy) if isinstance(busy, int) and busy > 0 else in_flight
        queued = max(0, in_flight - running)
        tokens = _replica_tokens(snap.samples, name)
        prompt, cached = tokens.get("prompt", 0.0), tokens.get("cached", 0.0)
        out.append(
            {
                "name": name,
                "url": r.get("url"),
                "health": HEALTH.get(str(r.get("status")), "down"),
                "status": r.get("status"),
                "running": running,
                "queued": queued,
                "load": running + queued,
                "sessions": r.get("sessions"),
                "served": r.get("served"),
                "errors": r.get("errors"),
                "tokens_per_s": history.replica_tps.get(name),
                "tokens": {k: tokens.get(k, 0.0) for k in ("prompt", "cached", "completion")},
                "cached_fraction": cached / (prompt + cached) if prompt + cached else None,
            }
        )
    return out


# -- nodes, devices, memory, links, load ---------------------------------------------------------


def _endpoint(bind: str, port: int) -> str:
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"


def _plan_nodes(plan: dict[str, Any] | None) -> dict[str, list[dict[str, Any]]]:
    """Planner nodes grouped by the worker they belong to (``w1`` or ``w1/CUDA0`` -> ``w1``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for n in (plan or {}).get("nodes") or []:
        out.setdefault(str(n.get("name", "")).split("/", 1)[0], []).append(n)
    return out


def _sum(rows: list[dict[str, Any]], key: str) -> int | None:
    vals = [r.get(key) for r in rows if isinstance(r.get(key), (int, float))]
    return int(sum(vals)) if vals else None  # type: ignore[arg-type]


def _planned(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not rows:
        return None
    layers = [r["layers"] for r in rows if r.get("layers")]
    return {
        "layers": [min(a for a, _ in layers), max(b for _, b in layers)] if layers else None,
        "n_layers": _sum(rows, "n_layers"),
        "weights_bytes": _sum(rows, "weights_bytes"),
        "kv_bytes": _sum(rows, "kv_bytes"),
        "compute_bytes": _sum(rows, "compute_bytes"),
        "total_bytes": _sum(rows, "total_bytes"),
        "memory_bytes": _sum(rows, "memory_bytes"),
        "headroom_bytes": _sum(rows, "headroom_bytes"),
        "output_layer": any(r.get("output_layer") for r in rows),
    }


def _measured(devices: list[dict[str, Any]]) -> dict[str, int] | None:
    if not devices:
        return None
    keys = ("model_bytes", "kv_bytes", "compute_bytes", "output_bytes", "other_bytes", "total_bytes")
    return {k: int(sum(int(d.get(k) or 0) for d in devices)) for k in keys}


def _load(
    snap: Snapshot,
    planned: dict[str, Any] | None,
    measured: dict[str, int] | None,
    link: dict[str, float] | None,
    rate: float | None,
) -> dict[str, Any] | None:
    """The worker's weights in place against those it will hold, with an ETA (while loading): the
    bytes the head sent it, or with ``loaded_bytes`` (the worker's side: cache hits, RDMA) that."""
    if snap.state is None or snap.state.phase != "starting" or link is None:
        return None
    sent = float(link.get("loaded_bytes") or link.get("bytes_sent") or 0)
    expected = (measured or {}).get("model_bytes") or (planned or {}).get("weights_bytes")
    out: dict[str, Any] = {
        "bytes_sent": int(sent),
        "expected_bytes": expected,
        "fraction": None,
        "rate_bytes_per_s": rate,
        "eta_seconds": None,
    }
    if expected:
        out["fraction"] = min(1.0, sent / expected)
        if rate and rate > 0 and sent < expected:
            out["eta_seconds"] = (expected - sent) / rate
    return out


def nodes_view(snap: Snapshot, history: History) -> list[dict[str, Any]]:
    """One row per worker, then the head and the gateway, with memory planned and measured."""
    state = snap.state
    if state is None:
        return []
    plan_nodes = _plan_nodes(snap.plan)
    rows: list[dict[str, Any]] = []
    worker_eps = set()
    for p in state.processes:
        ep = _endpoint(p.bind, p.port)
        if p.role == "rpc":
            worker_eps.add(ep)
            devices = [d for d in snap.memory if d.get("endpoint") == ep]
        elif p.role == "server":
            devices = [d for d in snap.memory if not d.get("endpoint")]
        else:
            devices = []
        planned = _planned(plan_nodes.get(p.node, []))
        if p.role == "server" and planned is None and (snap.plan or {}).get("host"):
            host = snap.plan["host"]  # type: ignore[index]
            planned = {
                "layers": None,
                "weights_bytes": host.get("weights_bytes"),
                "kv_bytes": 0,
                "compute_bytes": host.get("compute_bytes"),
            }
        measured = _measured(devices)
        memory = (planned or {}).get("memory_bytes")
        link = snap.links.get(ep) if p.role == "rpc" else None
        rows.append(
            {
                "node": p.node,
                "role": p.role,
                "host": p.host,
                "endpoint": ep,
                "pid": p.pid,
                "alive": snap.alive.get(p.node),
                "planned": planned,
                "devices": devices,
                "measured": measured,
                "headroom_bytes": memory - measured["total_bytes"] if memory and measured else None,
                "link": (
                    {
                        "rtt_ms": link.get("rtt_ms"),
                        "rtt_status": link_rtt_status(link["rtt_ms"]) if "rtt_ms" in link else None,
                        "rtt_warn_ms": LINK_RTT_WARN_MS,
                        "rtt_meaning": LINK_RTT_MEANING,
                        "bytes_sent": int(link.get("bytes_sent") or 0),
                        "bytes_per_s": history.link_rate.get(ep),
                    }
                    if link
                    else None
                ),
                "load": _load(snap, planned, measured, link, history.load_rate.get(ep, history.link_rate.get(ep))),
                "transport": snap.transports.get(p.node) if p.role == "rpc" else None,
            }
        )
    order = {"rpc": 0, "server": 1, "gateway": 2}
    return sorted(rows, key=lambda r: order.get(r["role"], 3))


def slots_view(snap: Snapshot, history: History) -> list[dict[str, Any]]:
    out = []
    for s in snap.slots or []:
        n_ctx = int(s.get("n_ctx") or 0)
        busy = bool(s.get("is_processing"))
        prompt, decoded = int(s.get("n_prompt_tokens") or 0), _decoded(s)
        used = prompt + decoded if "id_task" in s else 0
        out.append(
            {
                "id": s.get("id"),
                "n_ctx": n_ctx,
                "processing": busy,
                "task": s.get("id_task"),
                "prompt_tokens": prompt,
                "cached_tokens": int(s.get("n_prompt_tokens_cache") or 0),
                "decoded_tokens": decoded,
                "context_used": used,
                "context_fill": used / n_ctx if n_ctx else None,
                "tokens_per_s": history.slot_tps.get(s.get("id")) if busy else None,
            }
        )
    return out


def throughput_view(snap: Snapshot, history: History) -> dict[str, Any]:
    series = [[round(t - snap.now, 1), round(d, 2), round(p, 2)] for t, d, p in history.series]
    plan = snap.plan or {}
    return {
        "series": series,
        "decode_tps": series[-1][1] if series else None,
        "prefill_tps": series[-1][2] if series else None,
        "decode_bound_tps": plan.get("decode_tps_upper_bound"),
        "decode_bound_full_ctx_tps": plan.get("decode_tps_upper_bound_full_ctx"),
    }


def warnings_view(snap: Snapshot, gateway: dict[str, Any], limit: int = 30) -> list[dict[str, Any]]:
    """Load-log warnings (with their fix), the supervisor's deaths and restarts, parse warnings."""
    out: list[dict[str, Any]] = [
        {"time": None, "source": "llama-server", "kind": w.get("kind"), "text": w.get("text"), "fix": w.get("fix")}
        for w in snap.load_warnings
    ]
    plan_warnings = (snap.plan or {}).get("warnings") or []
    out += [{"time": None, "source": "planner", "kind": "plan", "text": w, "fix": None} for w in plan_warnings]
    events = [e for e in snap.events if e.get("kind") in EVENT_KINDS]
    out += [
        {
            "time": e.get("time"),
            "source": "supervisor",
            "kind": e.get("kind"),
            "text": f"{e.get('node')}: {e.get('message')}",
            "fix": None,
        }
        for e in events[-limit:][::-1]
    ]
    if gateway.get("parse_warnings"):
        out.append(
            {
                "time": None,
                "source": "gateway",
                "kind": "parse_warnings",
                "text": f"{int(gateway['parse_warnings'])} parser or policy warnings since the gateway "
                "started (see its log)",
                "fix": None,
            }
        )
    return out[:limit]


def cluster_view(snap: Snapshot) -> dict[str, Any] | None:
    state = snap.state
    if state is None:
        return None
    alive = [v for v in snap.alive.values() if v is not None]
    phase = state.phase
    if phase == "ready" and alive and not all(alive):
        phase = "degraded"
    restarts = sum(
        1
        for e in snap.events
        if e.get("kind") == "restarting" or (e.get("kind") == "restarted" and e.get("node") == "gateway")
    )
    return {
        "name": state.name,
        "phase": phase,
        "model": state.model,
        "engine": state.engine,
        "endpoint": state.endpoint,
        "started_at": state.started_at,
        "ready_at": state.ready_at,
        "load_seconds": state.load_seconds,
        "up_seconds": state.up_seconds,
        "load_stage": snap.load_stage,
        "restarts": restarts,
        "uptime_seconds": snap.now - state.ready_at if state.ready_at else None,
    }


def assemble(snap: Snapshot, history: History) -> dict[str, Any]:
    """The JSON behind the page (and ``/ui/state``); never holds a key."""
    gateway = gateway_view(snap.samples)
    plan = snap.plan or {}
    return {
        "time": snap.now,
        "cluster": cluster_view(snap),
        "gateway_url": snap.gateway_url,
        "plan": {
            "note": snap.plan_note,
            "fits": plan.get("fits"),
            "settings": plan.get("settings"),
            "tensor_split": plan.get("tensor_split"),
            "host": plan.get("host"),
        }
        if snap.plan or snap.plan_note
        else None,
        "nodes": nodes_view(snap, history),
        "slots": slots_view(snap, history),
        "slots_error": snap.slots_error,
        "throughput": throughput_view(snap, history),
        "gateway": gateway,
        "replicas": replicas_view(snap, history),
        "warnings": warnings_view(snap, gateway),
        "runs": snap.runs,
    }


__all__ = [
    "EVENT_KINDS",
    "History",
    "Sample",
    "Snapshot",
    "assemble",
    "gateway_view",
    "histogram",
    "replicas_view",
]
