"""What `splitserve status` reports: each process, the model, per-device memory
as llama-server reported it at load, the slots, warnings from the load log (with their fix) and,
when speculation is on, the engine's drafted / accepted tokens.

Under a supervisor the phase is ``restarting`` (with the attempt and the cause) from the moment a
process dies until the cluster serves again, also while its state is gone between stopping
everything and starting it again; without one, a dead process makes it ``degraded`` or
``stopped``, with the cause read from the logs and the command that brings it back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .._errors import ClusterError, EngineError, NotRunningError
from .._paths import state_dir
from ..engine import BlockingEngine
from ._logparse import load_warnings, parse_load_report
from ._nodes import node_for
from ._rdma_node import worker_transport
from ._state import ClusterState, read_state


def find_state_root(name: str | None = None, spec_root: Path | None = None) -> Path:
    """The state folder of a cluster by spec, by name, or the only one running."""
    if spec_root is not None:
        return spec_root
    base = state_dir()
    if name:
        return base / name
    from ._state import lock_holder

    held = {p.parent for p in base.glob("*/supervisor.lock") if lock_holder(p.parent)} if base.is_dir() else set()
    # a cluster between a restart's stop and start has no state.json, but its supervisor's lock
    roots = sorted({p.parent for p in base.glob("*/state.json")} | held) if base.is_dir() else []
    if len(roots) == 1:
        return roots[0]
    if not roots:
        raise NotRunningError(f"no running cluster (nothing in {base}); start one with `splitserve up -c FILE`")
    names = ", ".join(r.name for r in roots)
    raise NotRunningError(f"several clusters are running ({names}): name one with -c FILE or --name NAME")


_METRIC = re.compile(
    r"^llamacpp:(spec_decode_num_(?:draft_tokens|accepted_tokens|drafts)_total)\s+(\S+)\s*$", re.MULTILINE
)
_SPEC_KEYS = {
    "spec_decode_num_draft_tokens_total": "drafted",
    "spec_decode_num_accepted_tokens_total": "accepted",
    "spec_decode_num_drafts_total": "drafts",
}


def parse_spec_metrics(text: str) -> dict[str, Any]:
    """llama-server's ``/metrics`` speculation counters: ``drafted`` (draft tokens generated),
    ``accepted`` (of those, accepted by the model), ``drafts`` (verification steps) and
    ``acceptance_rate`` (accepted / drafted; None before the first draft)."""
    out: dict[str, Any] = {"drafted": 0, "accepted": 0, "drafts": 0}
    for m in _METRIC.finditer(text):
        try:
            out[_SPEC_KEYS[m.group(1)]] = int(float(m.group(2)))
        except ValueError:
            continue
    out["acceptance_rate"] = round(out["accepted"] / out["drafted"], 4) if out["drafted"] else None
    return out


def _spec_types(argv: list[str]) -> list[str]:
    return argv[argv.index("--spec-type") + 1].split(",") if "--spec-type" in argv[:-1] else []


def _engine_spec_metrics(url: str) -> dict[str, Any]:
    from ..engine import BlockingEngine

    with BlockingEngine(url, timeout=3.0) as engine:
        text = engine.metrics()
    if text is None:
        raise EngineError(f"{url}/metrics: no Prometheus text (llama-server needs --metrics)")
    return parse_spec_metrics(text.decode("utf-8", "replace"))


def _node_of(device: dict[str, Any], state: ClusterState) -> str:
    endpoint = device.get("endpoint")
    if endpoint:
        for p in state.processes:
            host = f"[{p.bind}]" if ":" in p.bind else p.bind
            if p.role == "rpc" and f"{host}:{p.port}" == endpoint:
                return p.node
    return "head"


STATUS_EXIT = {"ready": 0, "degraded": 3, "stopped": 3, "restarting": 4, "starting": 4}
"""`status`'s exit code per phase: 0 serving; 3 (as `systemctl status`) a process is not running
and nothing restarts it; 4 its supervisor is starting or restarting it. No cluster at all: 1."""


def restart_count(root: Path) -> int:
    """Restarts in the supervisor's log, counted as the page counts them (every `restarting`,
    and every gateway restarted alone)."""
    import json

    try:
        lines = (root / "supervisor.log").read_text().splitlines()
    except OSError:
        return 0
    n = 0
    for ln in lines:
        try:
            e = json.loads(ln)
        except ValueError:
            continue
        if isinstance(e, dict) and (
            e.get("kind") == "restarting" or (e.get("kind") == "restarted" and e.get("node") == "gateway")
        ):
            n += 1
    return n


def _supervisor(root: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the lock holder as status shows it, what it says it is doing) or (None, None)."""
    from ._state import lock_holder
    from ._supervise import read_supervision

    holder = lock_holder(root)
    if holder is None:
        return None, None
    doing = read_supervision(root)
    if doing is not None and doing.get("pid") != holder.pid:
        doing = None  # an earlier supervisor's file
    return {"pid": holder.pid, "command": holder.command, "started_at": holder.started_at}, doing


def _between_restarts(root: Path, sup: dict[str, Any], doing: dict[str, Any] | None) -> dict[str, Any]:
    """Status while the supervisor holds the cluster but its state is gone (stopped, not yet started)."""
    phase = "starting" if doing is not None and doing.get("phase") == "starting" else "restarting"
    return {
        "name": root.name,
        "phase": phase,
        "endpoint": None,
        "engine_endpoint": None,
        "gateway": False,
        "model": None,
        "engine": None,
        "spec_file": None,
        "load_seconds": None,
        "up_seconds": None,
        "processes": [],
        "memory": [],
        "slots": None,
        "warnings": [],
        "speculation": None,
        "supervisor": sup,
        "restart": _restart_view(doing) if phase == "restarting" else None,
        "restarts": restart_count(root),
        "cause": None,
        "next": None,
    }


def _restart_view(doing: dict[str, Any] | None) -> dict[str, Any]:
    doing = doing or {}
    return {
        "attempt": doing.get("attempt") or 1,
        "cause": doing.get("cause"),
        "detail": doing.get("detail"),
        "since": doing.get("since"),
    }


def death_cause(state: ClusterState) -> dict[str, Any] | None:
    """Who died first and why, from exit statuses and the logs (the head's log says
    ``Remote RPC server crashed`` when a worker went), then who died after it."""
    from ._supervise import find_dead

    try:
        root = find_dead(state, settle=0)
    except ClusterError:
        return None
    if root is None:
        return None
    return {
        "node": root.node,
        "summary": root.short,
        "message": root.message,
        "others": [{"node": d.node, "message": d.message} for d in root.others],
    }


def serving_now(root: Path, timeout: float = 3.0) -> ClusterState | None:
    """The state of the cluster in ``root`` when it is up and healthy: ready, every recorded
    process alive and its endpoint answering ``/health``; else None."""
    import httpx

    try:
        state = read_state(root)
    except ClusterError:
        return None
    if state is None or state.phase != "ready" or not state.processes or not state.endpoint:
        return None
    for rec in state.processes:
        try:
            if not node_for(rec.host, state.ssh).alive(rec.ref):
                return None
        except ClusterError:
            return None
    try:
        resp = httpx.get(state.endpoint.split("+", 1)[-1].rstrip("/") + "/health", timeout=timeout)
    except httpx.HTTPError:
        return None
    return state if resp.status_code in (200, 401) else None  # 401: it answers, behind a key


def cluster_status(root: Path, with_slots: bool = True) -> dict[str, Any]:
    """A JSON-able snapshot of the cluster whose state is in ``root``."""
    state = read_state(root)
    sup, doing = _supervisor(root)
    if state is None:
        if sup is not None:
            return _between_restarts(root, sup, doing)
        raise NotRunningError(f"cluster {root.name} is not running (no state in {root})")
    procs = []
    head_log = None
    for rec in state.processes:
        transport = node_for(rec.host, state.ssh)
        entry: dict[str, Any] = {
            "node": rec.node,
            "role": rec.role,
            "host": rec.host,
            "pid": rec.pid,
            "alive": False,
            "bind": rec.bind,
            "port": rec.port,
            "rss_bytes": None,
            "log": rec.log,
        }
        try:
            entry["alive"] = transport.alive(rec.ref)
            entry["rss_bytes"] = transport.rss_bytes(rec.ref)
        except ClusterError as exc:  # an unreachable node: say so in its row, keep the others
            entry["error"] = str(exc)
        if rec.role == "rpc" and entry["alive"]:  # RDMA or TCP, from the worker's own lines
            try:
                log_text = transport.read_log(Path(rec.log), 1 << 20)
                entry["transport"] = worker_transport(transport, rec.ref, log_text, rec.bind).as_dict()
            except ClusterError:
                entry["transport"] = None
        procs.append(entry)
        if rec.role == "server":
            head_log = (transport, Path(rec.log))
    memory = state.extra.get("memory") or []
    warnings = state.extra.get("warnings") or []
    if head_log is not None:
        text = head_log[0].read_log(head_log[1], 8 << 20)
        fresh = [d.as_dict() for d in parse_load_report(text).devices]
        memory = fresh or memory
        warnings = [w.as_dict() for w in load_warnings(text)] or warnings
    order = [p.node for p in state.processes]
    memory = sorted(
        (dict(d, node=_node_of(d, state)) for d in memory),
        key=lambda d: order.index(d["node"]) if d["node"] in order else len(order),
    )
    phase = state.phase
    alive = [p["alive"] for p in procs]
    if phase == "ready" and not all(alive):
        phase = "stopped" if not any(alive) else "degraded"
    restart = None
    cause = None
    if sup is not None and (phase != "ready" or (doing is not None and doing.get("phase") == "restarting")):
        if doing is not None and doing.get("phase") == "starting" and phase == "starting":
            phase = "starting"  # the first start, under the supervisor `up` left
        else:
            phase = "restarting"  # it has seen the death, or will at its next look
            if doing is None or doing.get("phase") != "restarting":
                found = death_cause(state) or {}
                doing = {
                    "attempt": int((doing or {}).get("attempt") or 0) + 1,
                    "cause": found.get("summary"),
                    "detail": found.get("message"),
                }
            restart = _restart_view(doing)
    elif phase in ("degraded", "stopped", "starting", "failed"):
        cause = death_cause(state)
    out: dict[str, Any] = {
        "name": state.name,
        "phase": phase,
        "endpoint": state.endpoint,
        "engine_endpoint": state.engine_url,
        "gateway": state.gateway is not None,
        "model": state.model,
        "engine": state.engine,
        "spec_file": state.spec_file,
        "load_seconds": state.load_seconds,
        "up_seconds": state.up_seconds,
        "processes": procs,
        "memory": memory,
        "slots": None,
        "warnings": warnings,
        "speculation": None,
        "supervisor": sup,
        "restart": restart,
        "restarts": restart_count(root),
        "cause": cause,
        "next": None,
    }
    if state.extra.get("replicas"):  # topology = "replicas": each one's nodes and health
        from ._replicas import replica_status

        out["replicas"] = replica_status(state, procs, probe=with_slots)
    if sup is None and phase != "ready":  # `up` stops what is left and starts it again, supervised
        out["next"] = f"splitserve up -c {state.spec_file or 'SPEC'}"
    if state.extra.get("backend") not in (None, "llama.cpp"):  # vLLM / SGLang: ranks, fixes, Ray
        from ._engines_run import engine_status

        out["engine_backend"] = engine_status(state)
    head = next((p for p in state.processes if p.role == "server"), None)
    types = _spec_types(head.argv) if head is not None else []
    server_alive = any(p["alive"] for p in procs if p["role"] == "server")
    if with_slots and server_alive:
        try:
            with BlockingEngine(state.engine_url, timeout=3.0) as client:
                out["slots"] = [
                    {
                        "id": s.get("id"),
                        "n_ctx": s.get("n_ctx"),
                        "is_processing": s.get("is_processing"),
                        "id_task": s.get("id_task"),
                    }
                    for s in client.info().slots
                ]
        except EngineError as exc:
            out["slots_error"] = str(exc)
    if types:
        out["speculation"] = {
            "types": types,
            "drafted": None,
            "accepted": None,
            "drafts": None,
            "acceptance_rate": None,
        }
        if server_alive:
            try:
                out["speculation"].update(_engine_spec_metrics(state.engine_url))
            except EngineError as exc:
                out["speculation_error"] = str(exc)
    return out
