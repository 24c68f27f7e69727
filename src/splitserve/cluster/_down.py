"""Stopping a cluster, and what its launch and supervision share.

:func:`down` stops exactly the processes `up` recorded (a cluster held by a supervisor is
stopped by that supervisor: `down` asks it); :func:`stop_recorded` is that stop, in `down`'s
order. Beside it: :class:`Event` (what `up`, supervision and restarts report), the engines of a
spec's nodes (:func:`resolve_engines`), the cause of a dead process from its log
(:func:`death_message`) and what `up` refuses before anything starts (:func:`check_startable`,
:func:`check_serving`). `up` itself is :mod:`._execute`'s, its plan :mod:`._launch`'s.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._errors import ClusterError, NotRunningError, SpecError
from .._node import Node, ProcessRef, stop, wait_reaped
from ..engine import Engine, get_engine
from ._commands import (
    cluster_state_dir,
    kv_unified_asked,
    model_architecture,
)
from ._distribute import is_engine_path, node_engine
from ._edges import REAL_EDGES, Edges, port_in_use
from ._nodes import node_for
from ._spec import ClusterSpec
from ._spec_engines import ROLE_NAMES, STOP_RANK
from ._ssh import exit_status_from_log
from ._state import (
    ClusterState,
    LockHolder,
    clear_state,
    lock_holder,
    read_state,
)


@dataclass
class Event:
    """Something `up` did or saw, for progress displays and tests."""

    kind: str
    """``stale``, ``preflight``, ``engine``, ``smoke``, ``gateway_port``, ``gateway_started``, ``worker_started``,
    ``worker_ready``, ``protocol``, ``head_started``, ``loading``, ``gateway_ready``, ``ready``, ``warning``
    (a setting or a load-log line that costs speed or quality, with the fix); from
    supervision also ``died``, ``restarting``, ``restarted`` / ``restart_failed`` (the gateway
    alone), ``gave_up`` and ``stopping``."""
    node: str
    message: str


OnEvent = Callable[[Event], None]


def resolve_engines(spec: ClusterSpec, engine: Engine | None = None) -> dict[str, Engine]:
    """The engine of every node: a per-node override, else the cluster's."""
    cache: dict[str, Engine] = {}

    def pick(name: str | None) -> Engine:
        key = name if name and name != "default" else None
        if key is None and engine is not None:
            return engine
        if key not in cache:
            cache[key or ""] = get_engine(key)
        return cache[key or ""]

    engines = {"head": pick(spec.head.engine or spec.engine)}
    for w in spec.workers:
        if w.remote:
            # Paths on the worker's own node: its own build, or where the head's copy goes.
            own = w.engine if w.engine and is_engine_path(w.engine) else None
            engines[w.name] = node_engine(w, None if own else pick(w.engine or spec.engine), own)
        else:
            engines[w.name] = pick(w.engine or spec.engine)
    return engines


_ERROR_LINE = re.compile(
    r"\berror\b|\bfailed\b|\bfailure\b|cannot|unable|abort|terminate|exception|crashed|"
    r"requires|not supported|invalid|out of memory",
    re.IGNORECASE,
)
# llama.cpp's wrappers around the real cause ("failed to create context", "exiting due to model
# loading error"): named only when nothing more specific was logged.
_GENERIC = re.compile(
    r"exiting due to|failed to (create|load|init)|common_init_|load_model:|"
    r"encountered an error while trying to fit",
    re.IGNORECASE,
)


# Frames of the backtrace ggml prints after an abort ("libggml-base.so(ggml_abort+0x15f) [0x7f..]",
# "#3  0x... in ggml_abort ..."): they name `abort`, not the cause printed just before them.
_FRAME = re.compile(r"^#\d+\s|\(\+?0x[0-9a-f]+\)|\[0x[0-9a-f]+\]|^0x[0-9a-f]+ in |\+0x[0-9a-f]+\)", re.IGNORECASE)


_FATAL = re.compile(r"crashed|GGML_ASSERT|out of memory|segmentation fault|std::bad_alloc", re.IGNORECASE)


def _log_cause(text: str) -> str:
    """The most telling line at the end of a process's log: the last specific error, else the
    last error of any kind, else the last line (backtrace frames left out)."""
    lines = [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip() and not ln.startswith("# splitserve:") and not _FRAME.search(ln.strip())
    ]
    tail = lines[-40:]
    fatal = [ln for ln in tail if _FATAL.search(ln)]
    if fatal:  # what killed it, not the complaints that followed ("send failed")
        return fatal[-1][:300]
    hits = [ln for ln in tail if _ERROR_LINE.search(ln)]
    specific = [ln for ln in hits if not _GENERIC.search(ln)]
    if specific or hits:
        return (specific or hits)[-1][:300]
    return tail[-1][:300] if tail else "no output"


def death_message(role: str, transport: Node, ref: ProcessRef, log: Path, during: str) -> str:
    """``ggml-rpc-server was killed by signal 9 during load: <last telling log line> (log: ...)``."""
    text = transport.read_log(log, max_bytes=64 << 10)
    code = transport.exit_code(ref)
    if code is None:
        code = exit_status_from_log(text)
    what = {"server": "llama-server", "gateway": "the splitserve gateway", **ROLE_NAMES}.get(role, "ggml-rpc-server")
    how = (
        f"exited with code {code}"
        if code is not None and code >= 0
        else (f"was killed by signal {-code}" if code is not None else "died")
    )
    where = f"{transport.host}:{log}" if transport.host != "local" else str(log)
    return f"{what} {how} {during}: {_log_cause(text)} (log: {where})"


def stop_recorded(state: ClusterState, grace: float = 10.0, edges: Edges = REAL_EDGES) -> list[str]:
    """Stop every recorded process that is still ours (SIGTERM, SIGKILL after ``grace`` seconds);
    returns the nodes stopped."""
    stopped = []
    # The gateway first (clients get a refused connection, not a half-dead engine), then the head.
    rank = {"gateway": 0, "server": 1, **STOP_RANK}  # STOP_RANK: vLLM / SGLang / Ray roles
    order = sorted(state.processes, key=lambda p: rank.get(p.role, 2))
    done: list[tuple[Node, ProcessRef]] = []
    for rec in order:
        transport = edges.node(rec.host, state.ssh)
        if transport.alive(rec.ref):
            if not stop(transport, rec.ref, grace=grace, clock=edges.clock):
                raise ClusterError(f"{rec.node}: pid {rec.pid} did not stop after SIGKILL")
            stopped.append(rec.node)
        done.append((transport, rec.ref))
    wait_reaped(done, clock=edges.clock)
    return stopped


def check_serving(spec: ClusterSpec) -> list[str]:
    """What the model allows, before anything starts: a speculation type it cannot use is a
    :class:`SpecError` (one line, naming the key, the reason and the types it can use); settings
    that make MiniMax-M3 run dense attention, and synthetic acceptance, come back as warnings."""
    from ..plan import msa_warnings, tensor_override_warning
    from ._planning import speculation_problem

    s = spec.server
    problem = speculation_problem(spec) if s.speculation else None
    if problem:
        raise SpecError(problem)
    warnings: list[str] = []
    arch = model_architecture(spec.model)
    if arch:
        # flash_attn unset: the command line says `--flash-attn on` for these architectures
        fa = None if s.flash_attn == "auto" else s.flash_attn != "off"
        warnings += msa_warnings(arch, flash_attn=fa, kv_unified=kv_unified_asked(s), parallel=s.parallel)
    override = tensor_override_warning(s.extra_args) if spec.workers else None
    if override:  # more than one device: pipeline parallelism would be on without it
        warnings.append(override)
    if s.speculation and (s.spec_synth_len is not None or s.spec_synth_rates is not None):
        warnings.append(
            "server.spec_synth_len / spec_synth_rates: synthetic acceptance, for benchmarking only: "
            "the text served is NOT the model's output; remove them to serve"
        )
    return warnings


def _check_gateway_auth(spec: ClusterSpec) -> None:
    """A gateway beyond loopback needs a key: refused before anything starts."""
    import os

    from .._net import is_loopback

    g = spec.gateway
    if not g.enabled or g.api_key or g.keys_file or os.environ.get("SPLITSERVE_API_KEY"):
        return
    if not is_loopback(g.host):
        where = str(spec.source_file or "<spec>")
        raise SpecError(
            f"{where}: gateway.host = {g.host!r} is beyond loopback: set gateway.api_key or "
            "gateway.keys_file (or SPLITSERVE_API_KEY); the gateway serves other machines only "
            "with auth"
        )


def check_startable(spec: ClusterSpec) -> None:
    """What `up` refuses before anything starts (bind addresses, auth beyond loopback, the files
    the spec names, what the model can serve), each a one-line error; for a caller that starts
    `up` in another process (the background supervisor) and must refuse here, at once."""
    from ._spec import check_binds, check_files, check_server_auth

    if spec.backend != "llama.cpp":
        return
    check_binds(spec)
    check_server_auth(spec)
    check_files(spec)
    _check_gateway_auth(spec)
    check_serving(spec)
    from ._replicas import spec_topology

    spec_topology(spec)  # a topology the nodes cannot hold (replicas of more nodes than there are)


SUPERVISOR_STOP_TIMEOUT = 120.0
"""Seconds `down` waits for a supervisor it asked to stop (it stops every process first)."""


def down(
    spec_or_root: ClusterSpec | Path,
    grace: float = 10.0,
    supervisor_timeout: float = SUPERVISOR_STOP_TIMEOUT,
    edges: Edges = REAL_EDGES,
) -> list[str]:
    """Stop exactly the processes `up` recorded; returns the nodes stopped. Each gets SIGTERM,
    then SIGKILL after ``grace`` seconds. A cluster held by a supervisor (another process) is
    stopped by the supervisor: `down` sends it SIGTERM and waits until it has exited."""
    root = cluster_state_dir(spec_or_root) if isinstance(spec_or_root, ClusterSpec) else spec_or_root
    holder = lock_holder(root)
    if holder is not None and holder.pid != os.getpid():
        return _stop_supervisor(root, holder, supervisor_timeout)
    state = read_state(root)
    if state is None:
        return []
    stopped = stop_recorded(state, grace=grace, edges=edges)
    clear_state(root)
    return stopped


def _stop_supervisor(root: Path, holder: LockHolder, timeout: float) -> list[str]:
    """SIGTERM the supervisor holding ``root`` and wait for its lock to go; the nodes that ran."""
    import signal

    from .._node import start_ticks

    state = read_state(root)
    running = []
    if state is not None:
        for rec in state.processes:
            try:
                if node_for(rec.host, state.ssh).alive(rec.ref):
                    running.append(rec.node)
            except ClusterError:
                running.append(rec.node)
    if holder.pid <= 0 or (holder.start_ticks is not None and start_ticks(holder.pid) != holder.start_ticks):
        raise ClusterError(
            f"{root}: the supervisor lock is held, but not by the process it names "
            f"({holder.describe()}); stop that supervisor yourself"
        )
    try:
        os.kill(holder.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while lock_holder(root) is not None:
        if time.monotonic() > deadline:
            raise ClusterError(
                f"the supervisor {holder.describe()} did not stop within {timeout:.0f} s of "
                f"SIGTERM; stop it with: kill {holder.pid}"
            )
        time.sleep(0.1)
    # The supervisor stops every process before it lets go of the lock; anything it could not
    # stop is still recorded.
    left = read_state(root)
    if left is not None:
        stop_recorded(left)
        clear_state(root)
    return running


def require_state(spec: ClusterSpec) -> ClusterState:
    state = read_state(cluster_state_dir(spec))
    if state is None:
        raise NotRunningError(
            f"cluster {spec.name} is not running (no state in {cluster_state_dir(spec)}); start it with `splitserve up`"
        )
    return state


__all__ = [
    "Event",
    "check_serving",
    "check_startable",
    "death_message",
    "down",
    "port_in_use",
    "require_state",
    "resolve_engines",
    "stop_recorded",
]
