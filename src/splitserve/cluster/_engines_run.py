"""The step kinds only vLLM / SGLang plans have, carried out by the one
:class:`~._execute.Executor` (it inherits them from :class:`EngineSteps`).

A vLLM / SGLang deployment is planned by :func:`~._launch.plan_launch` like llama.cpp's: its
processes (from :func:`~._engines_plan.engine_plan`) become ``start`` steps in their order
(``ray start --head``, ``wait_port`` for its GCS port, the other nodes' ``ray start``, then ``vllm
serve`` or the Ray probe; for the native launcher and SGLang every rank in order), then the
readiness this module carries out, then the gateway.

Readiness is real work, not ``/health`` (vLLM's says 200 with a dead engine): ``wait_token``, one
streamed completion through ``/v1/completions`` that yields a token; in Ray-probe mode
``wait_probe``, the probe's report saying that every node joined (``clear_report`` removes an old
report first). A rank that dies meanwhile fails `up` at once, naming it (when one rank dies the
others may hang rather than exit: SGLang #3099).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._errors import ClusterError, NodeError
from .._node import sh_path
from ._commands import LaunchPlan, Step
from ._down import Event
from ._edges import REAL_EDGES, Edges
from ._engines_facts import ray_status
from ._runner import ProcessRunner
from ._spec_engines import ROLE_NAMES, engine_table
from ._state import ClusterState

FirstToken = Callable[[str, str, "str | None"], "str | None"]
"""(engine URL, model name, key) -> the text of the first streamed token, or None while the
engine does not answer yet; raises :class:`ClusterError` for an answer that will not improve."""

READY_POLL = 1.0
"""Seconds between readiness attempts."""
SERVING_ROLES = ("vllm", "sglang", "ray_probe")
"""The head's process whose start begins the model's load (what ``load_seconds`` counts from)."""


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


class EngineSteps(ProcessRunner):
    """``clear_report``, ``wait_port``, ``wait_probe`` and ``wait_token``: the steps of vLLM / SGLang
    plans (the executor that runs every plan is one of these)."""

    plan: LaunchPlan
    first_token: FirstToken
    head_started: float | None

    def _loaded(self, since: float) -> None:
        started = self.head_started if self.head_started is not None else since
        self.state.load_seconds = round(self.clock.monotonic() - started, 3)

    def do_clear_report(self, step: Step) -> None:
        self.node(self.spec.head.host).run(f"rm -f {sh_path(Path(step.args['path']))}", check=False)

    def do_wait_port(self, step: Step) -> None:
        proc = step.process
        assert proc is not None
        timeout = float(step.args["timeout"])
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

    def do_wait_probe(self, step: Step) -> None:
        """Until the probe's report says every node joined; the report goes into the state."""
        out = Path(step.args["path"])
        expected = int(step.args["expected"])
        timeout = float(step.args["timeout"])
        head = self.node(self.spec.head.host)
        since = self.clock.monotonic()
        deadline = since + timeout
        while True:
            self.check_alive("while the Ray nodes join")
            raw = head.read_file(out)
            report = _json(raw) if raw else None
            if isinstance(report, dict) and report.get("ok") and int(report.get("alive_nodes", 0)) >= expected:
                break
            if self.clock.monotonic() > deadline:
                raise NodeError(
                    "head", f"the Ray probe did not report {expected} nodes within {timeout:.0f} s (report: {out})"
                )
            self.clock.sleep(0.2)
        self.state.extra["probe"] = report
        self._loaded(since)
        self.emit(Event("ray_joined", "cluster", f"{report['alive_nodes']} Ray nodes joined; report: {out}"))

    def do_wait_token(self, step: Step) -> None:
        """Until the engine at the step's URL streams a token (its log: the step's process's)."""
        proc = step.process
        table = engine_table(self.spec)
        assert proc is not None and table is not None
        url, model = str(step.args["url"]), str(step.args["model"])
        timeout = float(step.args["timeout"])
        since = self.clock.monotonic()
        deadline = since + timeout
        while True:
            self.check_alive("during load")
            try:
                text = self.first_token(url, model, table.api_key)
            except ClusterError as exc:
                raise NodeError(step.node, f"the first streamed completion failed: {exc}") from None
            if text is not None:
                break
            if self.clock.monotonic() > deadline:
                raise NodeError(
                    step.node, f"{self.spec.backend} did not stream a token within {timeout:.0f} s (log: {proc.log})"
                )
            self.clock.sleep(READY_POLL)
        self._loaded(since)
        who = f"replica {step.node} ({self.spec.backend})" if step.args.get("replica") else self.spec.backend
        self.emit(Event("first_token", step.node, f"{who} streamed its first token ({text!r})"))


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


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
        out["probe"] = _json(raw) if raw else None
    address = state.extra.get("ray_address")
    if address and any(p.role == "ray_head" for p in state.processes):
        out["ray_status"] = ray_status(str(state.extra.get("head_python") or "python3"), str(address), edges)
    return out


__all__ = ["READY_POLL", "SERVING_ROLES", "EngineSteps", "FirstToken", "engine_status", "first_token"]
