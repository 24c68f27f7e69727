"""Carrying out a vLLM / SGLang deployment: `up` for ``backend = "vllm"`` / ``"sglang"``.

:func:`engine_up` (what ``_execute.up`` hands such a spec to) stops what an earlier `up` left,
gathers every node's facts (:mod:`._engines_facts`), builds the :class:`~._engines_plan.EnginePlan`,
runs the preflight rows, then starts the processes in the plan's order through the same
:class:`~splitserve._node.Node` interface as llama.cpp's (``ray start --head``, waiting for its GCS
port, then the other nodes' ``ray start``, then ``vllm serve`` or the Ray probe; for the native
launcher and SGLang every rank in order), recording each in the cluster's state so `down` stops
every rank and `status` shows each one.

Readiness is real work, not ``/health`` (vLLM's says 200 with a dead engine): one streamed
completion through ``/v1/completions`` that yields a token; in Ray-probe mode, the probe's report
saying that every node joined. A rank that dies meanwhile fails `up` at once, naming it (when
one rank dies the others may hang rather than exit: SGLang #3099). Then the gateway, when the
spec has one, in front of the engine's raw completions. Any failure stops everything started.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._errors import ClusterError, NodeError, SplitserveError
from .._node import sh_path
from ._commands import ProcessPlan, base_url, cluster_state_dir, gateway_plan
from ._down import Event, OnEvent, stop_recorded
from ._edges import REAL_EDGES, Edges
from ._engines_facts import engine_preflight, gather_engine_facts, port_rows, ray_status
from ._engines_plan import EngineFacts, EnginePlan, engine_plan
from ._preflight_engines import backend_checks
from ._runner import ProcessRunner, process_record
from ._spec import ClusterSpec
from ._spec_engines import ROLE_NAMES, SglangSpec, VllmSpec, engine_table
from ._state import ClusterState, clear_state, lock_holder, read_state, supervised_message, write_state

FirstToken = Callable[[str, str, "str | None"], "str | None"]
"""(engine URL, model name, key) -> the text of the first streamed token, or None while the
engine does not answer yet; raises :class:`ClusterError` for an answer that will not improve."""

RAY_GCS_TIMEOUT = 60.0
"""Seconds ``ray start --head`` gets to open its GCS port."""
READY_POLL = 1.0
"""Seconds between readiness attempts."""


def engine_kind_url(backend: str, url: str) -> str:
    """The engine URL the gateway takes for this backend: ``vllm+http://...`` (see
    :func:`splitserve.engine.backend_for`); llama.cpp's stays plain."""
    return url if backend == "llama.cpp" else f"{backend}+{url}"


def first_token(url: str, model: str, api_key: str | None) -> str | None:
    """One streamed one-token completion through ``/v1/completions`` (see :data:`FirstToken`)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0, "stream": True}
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, headers=headers, timeout=60.0) as resp:
            if resp.status_code in (404, 502, 503) and not resp.is_success:
                text = resp.read().decode("utf-8", "replace")
                if resp.status_code == 404 and "does not exist" in text:
                    raise ClusterError(f"{url}/v1/completions: {text[:300]} (the model name is {model!r})")
                return None  # the API server is up, the engine not yet
            if not resp.is_success:
                text = resp.read().decode("utf-8", "replace")
                raise ClusterError(f"{url}/v1/completions answered HTTP {resp.status_code}: {text[:300]}")
            for line in resp.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                data = json.loads(line[6:])
                choices = data.get("choices") if isinstance(data, dict) else None
                if choices:
                    return str(choices[0].get("text") or "")
    except httpx.HTTPError:
        return None
    return None


class EngineRun(ProcessRunner):
    """Starts an :class:`EnginePlan`'s processes and waits for readiness; remembers what it started."""

    def __init__(
        self,
        spec: ClusterSpec,
        plan: EnginePlan,
        state: ClusterState,
        edges: Edges = REAL_EDGES,
        on_event: OnEvent | None = None,
        should_stop: Callable[[], bool] | None = None,
        first_token: FirstToken = first_token,
    ) -> None:
        super().__init__(spec, state, edges, on_event, should_stop)
        self.plan = plan
        self.first_token = first_token
        self.root = cluster_state_dir(spec)

    def start(self, proc: ProcessPlan) -> None:
        ref = self.spawn(proc)
        self.state.processes.append(process_record(proc, ref))
        write_state(self.root, self.state)
        what = ROLE_NAMES.get(proc.role, proc.role)
        self.emit(Event("started", proc.node, f"{what} on {proc.host} (pid {ref.pid}, log {proc.log})"))

    def wait_port(self, proc: ProcessPlan, timeout: float) -> None:
        deadline = self.clock.monotonic() + timeout
        while not self.edges.net.port_answers(proc.bind, proc.port, timeout=0.5):
            self.check_alive("at start")
            if self.clock.monotonic() > deadline:
                raise NodeError(
                    proc.node,
                    f"{ROLE_NAMES.get(proc.role, proc.role)} did not open port {proc.port} on {proc.bind} "
                    f"within {timeout:.0f} s (log: {proc.log})",
                )
            self.clock.sleep(0.2)
        self.emit(
            Event("ray_ready" if proc.role == "ray_head" else "port", proc.node, f"{proc.bind}:{proc.port} answers")
        )

    def wait_probe(self, expected: int, timeout: float) -> dict[str, Any]:
        """The probe's report once it says every node joined."""
        out = self.plan.probe_out
        assert out is not None
        head = self.node(self.spec.head.host)
        deadline = self.clock.monotonic() + timeout
        while True:
            self.check_alive("while the Ray nodes join")
            raw = head.read_file(out)
            if raw:
                try:
                    report = json.loads(raw)
                except ValueError:
                    report = None
                if isinstance(report, dict) and report.get("ok") and int(report.get("alive_nodes", 0)) >= expected:
                    return report
            if self.clock.monotonic() > deadline:
                raise NodeError(
                    "head",
                    f"the Ray probe did not report {expected} nodes within {timeout:.0f} s (report: {out})",
                )
            self.clock.sleep(0.2)

    def wait_engine(
        self, table: VllmSpec | SglangSpec, timeout: float, url: str | None = None, node: str = "head"
    ) -> str:
        """The first token of one streamed completion through the engine at ``url`` (default: the
        plan's endpoint), served by ``node``."""
        model = table.served_model_name or table.model
        url = url or self.plan.endpoint
        log = next((p.log for p in self.plan.processes if p.node == node and p.port), self.plan.processes[-1].log)
        deadline = self.clock.monotonic() + timeout
        while True:
            self.check_alive("during load")
            try:
                text = self.first_token(url, model, table.api_key)
            except ClusterError as exc:
                raise NodeError(node, f"the first streamed completion failed: {exc}") from None
            if text is not None:
                return text
            if self.clock.monotonic() > deadline:
                raise NodeError(
                    node,
                    f"{self.spec.backend} did not stream a token within {timeout:.0f} s (log: {log})",
                )
            self.clock.sleep(READY_POLL)


def _gateway(spec: ClusterSpec, plan: EnginePlan) -> ProcessPlan | None:
    if not spec.gateway.enabled or not plan.endpoint:
        return None
    log = cluster_state_dir(spec) / "logs" / "gateway.log"
    if len(plan.replicas) > 1:  # every server, named after its node: the gateway routes between them
        urls = ",".join(f"{r.name}={engine_kind_url(spec.backend, r.url)}" for r in plan.replicas)
        return gateway_plan(spec, urls, log)
    return gateway_plan(spec, engine_kind_url(spec.backend, plan.endpoint), log)  # the table's key goes along


def dry_run_lines(spec: ClusterSpec, facts: EngineFacts) -> list[str]:
    """What `up --dry-run` prints for a vLLM / SGLang spec: the fixes written, then each process
    in start order with its node, log and full command line (environment first)."""
    table = engine_table(spec)
    assert table is not None
    plan = engine_plan(spec, facts)
    lines = [f"# {note}" for note in plan.notes]
    for i, p in enumerate(plan.processes, 1):
        lines.append(f"# {i}. {p.node}: start {ROLE_NAMES.get(p.role, p.role)} on {p.host}, log {p.log}")
        lines.append(p.shell())
    if plan.probe_out is not None:
        lines.append(f"# ready when {plan.probe_out} says every node ({len(facts.nodes)}) joined")
    elif plan.replicas:
        for r in plan.replicas:
            lines.append(f"# replica {r.name} ({', '.join(r.nodes)}) ready when {r.url}/v1/completions streams a token")
    elif plan.endpoint:
        lines.append(f"# ready when {plan.endpoint}/v1/completions streams a token (not /health)")
    gw = _gateway(spec, plan)
    if gw is not None:
        lines.append(f"# {len(plan.processes) + 1}. gateway: start splitserve gateway on {base_url(gw.bind, gw.port)}")
        lines.append(gw.shell())
    return lines


def engine_up(
    spec: ClusterSpec,
    *,
    on_event: OnEvent | None = None,
    preflight: bool = True,
    should_stop: Callable[[], bool] | None = None,
    edges: Edges = REAL_EDGES,
    first_token: FirstToken = first_token,
) -> ClusterState:
    """Start a vLLM / SGLang deployment and wait until it serves (see the module); its state."""
    table = engine_table(spec)
    if table is None:
        raise ClusterError(f"{spec.source_file or '<spec>'}: backend = {spec.backend!r} is not vLLM or SGLang")
    emit = on_event or (lambda _e: None)
    t0 = edges.clock.monotonic()
    root = cluster_state_dir(spec)
    holder = lock_holder(root)
    if holder is not None and holder.pid != os.getpid():
        raise ClusterError(supervised_message(spec.name, holder))
    old = read_state(root)
    if old is not None:
        stopped = stop_recorded(old, edges=edges)
        if stopped:
            emit(Event("stale", "cluster", f"stopped stale processes of {spec.name}: {', '.join(stopped)}"))
        clear_state(root)
    facts = gather_engine_facts(spec, edges)
    plan = engine_plan(spec, facts)
    for note in plan.notes:
        emit(Event("fix", "cluster", note))
    rows = (backend_checks(spec, facts) if preflight else []) + port_rows(plan, edges)
    for row in rows:
        if row.status != "pass":
            emit(Event("preflight", row.node, f"{row.status}: {row.check}: {row.message}"))
    failed = [r for r in rows if r.status == "fail"]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more; see `splitserve preflight`)" if len(failed) > 1 else ""
        raise NodeError(first.node, f"preflight {first.check}: {first.message}; fix: {first.fix}{more}")
    if preflight:
        skipped = sum(r.status == "skip" for r in rows)
        emit(
            Event(
                "preflight", "cluster", f"{len(rows)} checks: none failed" + (f", {skipped} skipped" if skipped else "")
            )
        )
    gw = _gateway(spec, plan)
    head = facts.node("head")
    version = head.ray_version if isinstance(table, VllmSpec) and table.ray_probe else head.engine_version
    state = ClusterState(
        name=spec.name,
        spec_file=str(spec.source_file) if spec.source_file else None,
        model=table.model,
        endpoint=base_url(gw.bind, gw.port) if gw is not None else plan.endpoint,
        engine=f"{'ray' if isinstance(table, VllmSpec) and table.ray_probe else spec.backend} {version or '?'}",
        started_at=edges.clock.time(),
        engine_endpoint=engine_kind_url(spec.backend, plan.endpoint) if plan.endpoint else None,
    )
    state.ssh = spec.ssh
    state.extra["backend"] = spec.backend
    state.extra["notes"] = list(plan.notes)
    state.extra["head_python"] = head.python
    if plan.replicas:  # `status` shows each one; the supervisor restarts a dead one alone
        state.extra["replicas"] = [r.to_dict() for r in plan.replicas]
    if isinstance(table, VllmSpec):
        state.extra["launcher"] = table.launcher
        if table.launcher == "ray":
            host = f"[{head.address}]" if ":" in head.address else head.address
            state.extra["ray_address"] = f"{host}:{table.ray.port}"
        if plan.probe_out is not None:
            state.extra["probe_out"] = str(plan.probe_out)
    run = EngineRun(spec, plan, state, edges, emit, should_stop, first_token)
    load_started = edges.clock.monotonic()
    try:
        for proc in plan.processes:
            if proc.role == "ray_probe" and plan.probe_out is not None:
                run.node(proc.host).run(f"rm -f {sh_path(plan.probe_out)}", check=False)
            if proc.role in ("vllm", "sglang", "ray_probe") and proc.node == "head":
                load_started = edges.clock.monotonic()
            run.start(proc)
            if proc.role == "ray_head":
                run.wait_port(proc, RAY_GCS_TIMEOUT)
        if plan.probe_out is not None:
            report = run.wait_probe(len(facts.nodes), spec.load_timeout)
            state.extra["probe"] = report
            emit(Event("ray_joined", "cluster", f"{report['alive_nodes']} Ray nodes joined; report: {plan.probe_out}"))
        elif plan.replicas:  # they all load at once; then each one streams a token
            for r in plan.replicas:
                text = run.wait_engine(table, spec.load_timeout, r.url, r.name)
                emit(
                    Event(
                        "first_token", r.name, f"replica {r.name} ({spec.backend}) streamed its first token ({text!r})"
                    )
                )
        else:
            text = run.wait_engine(table, spec.load_timeout)
            emit(Event("first_token", "head", f"{spec.backend} streamed its first token ({text!r})"))
        state.load_seconds = round(edges.clock.monotonic() - load_started, 3)
        if gw is not None:
            run.start(gw)
            run.wait_gateway(gw, state.endpoint)
            emit(Event("gateway_ready", "gateway", f"{state.endpoint}/v1 serves (tool calls parsed by splitserve)"))
    except BaseException as exc:
        leftovers = run.stop_all()
        state.phase = "failed"
        clear_state(root)
        if leftovers and isinstance(exc, SplitserveError):
            raise ClusterError(f"{exc}; could not stop: {', '.join(leftovers)}") from None
        raise
    state.phase = "ready"
    state.ready_at = edges.clock.time()
    state.up_seconds = round(edges.clock.monotonic() - t0, 3)
    write_state(root, state)
    emit(Event("ready", "head", f"{state.endpoint or plan.probe_out} ready in {state.up_seconds:.1f} s"))
    return state


def engine_restart_replica(
    spec: ClusterSpec,
    state: ClusterState,
    name: str,
    *,
    edges: Edges = REAL_EDGES,
    first_token: FirstToken = first_token,
) -> ClusterState:
    """Start replica ``name`` of a running vLLM / SGLang replicas cluster again alone (its
    processes are gone): its server process(es) on its node(s), as `up` planned them, until it
    streams its first token; the other replicas and the gateway are not touched. Its records
    in the state take the place of the dead ones."""
    table = engine_table(spec)
    rows = [r for r in state.extra.get("replicas", []) if r.get("name") == name]
    if table is None or not rows:
        raise ClusterError(f"cluster {spec.name} has no {spec.backend} replica {name}")
    plan = engine_plan(spec, gather_engine_facts(spec, edges))
    replica = next((r for r in plan.replicas if r.name == name), None)
    if replica is None:
        raise ClusterError(f"cluster {spec.name}: the spec no longer plans replica {name}")
    nodes = set(replica.nodes)
    at = next((i for i, p in enumerate(state.processes) if p.node in nodes), len(state.processes))
    kept = [p for p in state.processes if p.node not in nodes]
    state.processes = list(kept)  # the others stay recorded while it starts (each start appends)
    run = EngineRun(spec, plan, state, edges, first_token=first_token)
    try:
        for proc in plan.processes:
            if proc.node in nodes:
                run.start(proc)
        run.wait_engine(table, spec.load_timeout, replica.url, replica.name)
    except BaseException:
        run.stop_all()
        state.processes = kept
        write_state(cluster_state_dir(spec), state)
        raise
    at = min(at, len(kept))  # its records where the dead ones were
    state.processes = kept[:at] + state.processes[len(kept) :] + kept[at:]
    write_state(cluster_state_dir(spec), state)
    return state


def engine_status(state: ClusterState, edges: Edges = REAL_EDGES) -> dict[str, Any]:
    """What `status` adds for a vLLM / SGLang cluster: the backend, launcher, the fixes written,
    the probe's report and (Ray) ``ray status``."""
    out: dict[str, Any] = {
        "backend": state.extra.get("backend"),
        "launcher": state.extra.get("launcher"),
        "notes": state.extra.get("notes") or [],
    }
    probe = state.extra.get("probe_out")
    if probe:
        raw = edges.node("local", None).read_file(Path(probe))
        try:
            out["probe"] = json.loads(raw) if raw else None
        except ValueError:
            out["probe"] = None
    address = state.extra.get("ray_address")
    if address and any(p.role == "ray_head" for p in state.processes):
        out["ray_status"] = ray_status(str(state.extra.get("head_python") or "python3"), str(address), edges)
    return out


__all__ = [
    "EngineRun",
    "FirstToken",
    "dry_run_lines",
    "engine_kind_url",
    "engine_preflight",
    "engine_restart_replica",
    "engine_status",
    "engine_up",
    "first_token",
]
