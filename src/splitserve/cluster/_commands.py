"""The processes a launch will run, as data: :func:`launch_plan` turns a spec and
its engines into argv/env/log paths; `up` executes the plan and `up --dry-run`
prints it."""

from __future__ import annotations

import functools
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import SplitserveError
from .._node import remote_env, sh_command
from ..engine import Engine
from ..plan import DRAFT_TYPES, MSA_ARCHS
from ..plan import kv_unified_asked as _kv_unified
from ._replicas import Replica
from ._spec import DEFAULT_GATEWAY_PORT, ClusterSpec, ServerSpec, WorkerSpec, draft_in_use, is_local_host
from ._spec_engines import engine_table


@dataclass(frozen=True)
class Step:
    """One action of `up`, in the order it runs."""

    action: str
    """``stop_stale``, ``warn``, ``note`` (printed first: a fix written), ``preflight``, ``engine``
    (``mode``: present / copy / own / fail), ``drop_caches``, ``refuse`` (the planner's), ``prefill``,
    ``check_port``, ``start``, ``wait_workers``, ``rpc_hello``, ``wait_ready``, ``wait_gateway``,
    ``report``; vLLM / SGLang plans also ``clear_report``, ``wait_port``, ``wait_probe`` and
    ``wait_token`` (:mod:`._engines_run`)."""
    node: str
    text: str
    """What it does, in one line (the dry-run prints it)."""
    process: ProcessPlan | None = None
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProcessPlan:
    """One process of a cluster."""

    node: str
    """``head`` or the worker's name."""
    role: str
    """``server`` (llama-server), ``rpc`` (ggml-rpc-server) or ``gateway`` (``splitserve serve``);
    vLLM / SGLang: ``ray_head``, ``ray_worker``, ``ray_probe``, ``vllm``, ``vllm_headless``, ``sglang``."""
    host: str
    argv: list[str]
    env: dict[str, str]
    bind: str
    port: int
    log: Path

    def shell(self) -> str:
        """The command as one shell line (for --dry-run and the logs), secrets masked.

        A remote process's line is the one its node's shell runs (:func:`~splitserve._node.sh_command`,
        as :class:`~._ssh.SshNode` starts it): ``~`` expanded there as ``"$HOME"``, the library path
        before the node's own, so it runs when pasted on that node."""
        argv = ["***" if i and self.argv[i - 1] == "--api-key" else a for i, a in enumerate(self.argv)]
        if not is_local_host(self.host):
            env = {k: "***" if _secret(k) else v for k, v in remote_env(self.env).items()}
            return sh_command(argv, env)
        envs = " ".join(f"{k}={'***' if _secret(k) else shlex.quote(v)}" for k, v in self.env.items())
        return (envs + " " if envs else "") + shlex.join(argv)


def _secret(name: str) -> bool:
    return name.endswith(("_KEY", "_TOKEN", "_SECRET"))


@dataclass
class ReplicaPlan:
    """One replica of a replicas topology: its llama-server and the RPC workers it uses."""

    name: str
    boxes: list[str]
    server: ProcessPlan
    workers: list[ProcessPlan]
    url: str
    """Its llama-server's URL (the gateway routes to it)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "boxes": list(self.boxes),
            "server": self.server.node,
            "workers": [w.node for w in self.workers],
            "url": self.url,
        }


@dataclass
class LaunchPlan:
    """Every process of a cluster, in start order (llama.cpp: workers, the head, then the gateway;
    vLLM / SGLang: :attr:`ranks`, then the gateway) and the steps that start them."""

    workers: list[ProcessPlan]
    head: ProcessPlan
    state_dir: Path
    endpoint: str
    """What clients use: the gateway's URL, or llama-server's when the gateway is off."""
    engine_endpoint: str = ""
    """llama-server's own URL (its native endpoints: /completion, /props, /slots)."""
    gateway: ProcessPlan | None = None
    notes: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    """Every action of `up` in order (filled by :func:`~._launch.plan_launch`)."""
    engines: dict[str, Engine] = field(default_factory=dict)
    """The engine of every node the plan starts processes on."""
    tensor_split: list[float] | None = None
    """The ``--tensor-split`` llama-server gets (the spec's, else the planner's), None for none."""
    replicas: list[ReplicaPlan] = field(default_factory=list)
    """With ``topology = "replicas"``: every replica (the first one's server is :attr:`head`); empty
    for a split. :attr:`workers` then holds the RPC workers of every replica."""
    topology: list[str] = field(default_factory=list)
    """The topology's choice, reason and alternatives as `plan` prints them (``Topology.lines()``)."""
    ranks: list[ProcessPlan] = field(default_factory=list)
    """vLLM / SGLang: every process of the deployment in start order (Ray nodes, ranks, the Ray
    probe; :attr:`head` is the head's server among them); empty for llama.cpp."""
    engine_name: str = ""
    """What the state records as the engine: the head's llama.cpp build (its key), or ``vllm 0.11.0``."""
    model: str = ""
    """What the state records as the model: the GGUF's path, or the vLLM / SGLang table's model."""
    record: dict[str, Any] = field(default_factory=dict)
    """What the cluster's state keeps besides its processes (``extra``): the replicas; for vLLM /
    SGLang also the backend, launcher, fixes written, the Ray address and the probe's report file."""

    @property
    def servers(self) -> list[ProcessPlan]:
        """Every llama-server: the head's, then each other replica's."""
        return [self.head, *(r.server for r in self.replicas if r.server is not self.head)]

    @property
    def processes(self) -> list[ProcessPlan]:
        engine = self.ranks or [*self.workers, *self.servers]
        return [*engine, *([self.gateway] if self.gateway else [])]


def _library_env(engine: Engine, extra: dict[str, str]) -> dict[str, str]:
    # RPATH is $ORIGIN for our builds; the library path also covers foreign builds without one.
    env = {"LD_LIBRARY_PATH": str(engine.bin_dir)}
    env.update(extra)
    return env


def rpc_argv(engine: Engine, worker: WorkerSpec) -> list[str]:
    """ggml-rpc-server's command line for a worker."""
    argv = [str(engine.path("rpc_server")), "-H", worker.bind, "-p", str(worker.port)]
    if worker.devices:
        argv += ["-d", ",".join(worker.devices)]
    if worker.threads:
        argv += ["-t", str(worker.threads)]
    if worker.cache:
        argv.append("-c")
    return argv


def rpc_endpoint(worker: WorkerSpec) -> str:
    host = f"[{worker.bind}]" if ":" in worker.bind else worker.bind
    return f"{host}:{worker.port}"


#: spec key -> (llama-server flag, the speculation types it applies to; None: any type)
SPEC_FLAGS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "spec_draft_n_max": ("--spec-draft-n-max", DRAFT_TYPES),
    "spec_draft_n_min": ("--spec-draft-n-min", DRAFT_TYPES),
    "spec_draft_p_min": ("--spec-draft-p-min", DRAFT_TYPES),
    "spec_draft_p_split": ("--spec-draft-p-split", DRAFT_TYPES),
    "spec_draft_sampling": ("--spec-draft-sampling", DRAFT_TYPES),
    "spec_draft_ngl": ("--spec-draft-ngl", DRAFT_TYPES),
    "spec_draft_device": ("--spec-draft-device", DRAFT_TYPES),
    **{
        f"spec_ngram_{t.removeprefix('ngram-').replace('-', '_')}_{p}": (f"--spec-{t}-{p.replace('_', '-')}", (t,))
        for t in ("ngram-simple", "ngram-map-k", "ngram-map-k4v")
        for p in ("size_n", "size_m", "min_hits")
    },
    "spec_ngram_mod_n_match": ("--spec-ngram-mod-n-match", ("ngram-mod",)),
    "spec_ngram_mod_n_min": ("--spec-ngram-mod-n-min", ("ngram-mod",)),
    "spec_ngram_mod_n_max": ("--spec-ngram-mod-n-max", ("ngram-mod",)),
    "spec_synth_len": ("--spec-synth-len", None),
    "spec_synth_rates": ("--spec-synth-rates", None),
}


def _flag_value(value: object) -> str:
    if isinstance(value, list):
        return ",".join(_flag_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def speculation_argv(s: ServerSpec) -> list[str]:
    """``--spec-type`` and the parameters of the types it enables (a parameter of a type that is
    not enabled is left out, so one spec serves every point of a ``speculation=`` sweep)."""
    if not s.speculation:
        return []
    argv = ["--spec-type", ",".join(s.speculation)]
    if draft_in_use(s):
        argv += ["--spec-draft-model", str(s.draft_model)]
    for key, (flag, types) in SPEC_FLAGS.items():
        value = getattr(s, key)
        if value is None or (types is not None and not set(types) & set(s.speculation)):
            continue
        argv += [flag, _flag_value(value)]
    return argv


def kv_unified_asked(s: ServerSpec) -> bool:
    """Whether the spec turns on llama.cpp's unified KV cache itself (extra_args or env)."""
    return _kv_unified(list(s.extra_args), dict(s.env))


@functools.lru_cache(maxsize=32)
def _arch_of(path: str, mtime: float) -> str | None:
    from ..model import read_gguf

    try:
        arch = read_gguf(Path(path)).get("general.architecture")
    except (SplitserveError, OSError, ValueError):
        return None
    return arch if isinstance(arch, str) else None


def model_architecture(model: Path) -> str | None:
    """The GGUF's ``general.architecture`` (headers only), or None when the file is not there."""
    try:
        mtime = model.stat().st_mtime
    except OSError:
        return None
    return _arch_of(str(model), mtime)


def server_argv(
    engine: Engine, spec: ClusterSpec, tensor_split: list[float] | None = None, architecture: str | None = None
) -> list[str]:
    """llama-server's command line: the RPC workers, all layers offloaded, the spec's options.

    ``architecture`` (default: read from the model's header when the file exists) turns on what
    an architecture needs: MiniMax-M3 gets ``--flash-attn on`` unless the spec sets flash_attn, as
    its sparse attention runs only with flash attention (``--parallel`` keeps the KV cache per slot)."""
    s = spec.server
    arch = architecture or model_architecture(spec.model)
    argv = [
        str(engine.path("server")),
        "--model",
        str(spec.model),
        "--host",
        s.host,
        "--port",
        str(s.port),
        *(["--rpc", ",".join(rpc_endpoint(w) for w in spec.workers)] if spec.workers else []),
        "-ngl",
        str(s.n_gpu_layers),
        "--split-mode",
        s.split_mode,
        "--ctx-size",
        str(s.ctx_size),
        "--parallel",
        str(s.parallel),
        # Per-device model / KV / compute buffer sizes in the log (read by `status`).
        "--verbosity",
        "4",
        # Prometheus metrics at /metrics: relayed by the gateway, read by `status` (spec_decode_*).
        "--metrics",
    ]
    if s.batch:
        argv += ["--batch-size", str(s.batch)]
    if s.ubatch:
        argv += ["--ubatch-size", str(s.ubatch)]
    if s.cache_type_k:
        argv += ["--cache-type-k", s.cache_type_k]
    if s.cache_type_v:
        argv += ["--cache-type-v", s.cache_type_v]
    if s.flash_attn:
        argv += ["--flash-attn", s.flash_attn]
    elif arch in MSA_ARCHS:
        argv += ["--flash-attn", "on"]
    split = s.tensor_split if s.tensor_split is not None else tensor_split
    if split:
        argv += ["--tensor-split", ",".join(f"{x:g}" for x in split)]
    if s.threads:
        argv += ["--threads", str(s.threads)]
    if spec.head.devices:
        rpc_devs = [f"RPC{i}" for i in range(sum(len(w.devices) or 1 for w in spec.workers))]
        argv += ["--device", ",".join(rpc_devs + spec.head.devices)]
    if s.chat_template_file:
        argv += ["--jinja", "--chat-template-file", str(s.chat_template_file)]
    if s.api_key:
        argv += ["--api-key", s.api_key]
    argv += speculation_argv(s)
    return argv + list(s.extra_args)


def base_url(host: str, port: int) -> str:
    """``http://host:port`` for a bind address (a wildcard is reached on loopback)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}"


def spec_ports(spec: ClusterSpec) -> set[int]:
    """The ports the spec itself gives to processes on this machine (llama-server, local workers)."""
    return {spec.server.port} | {w.port for w in spec.workers if not w.remote}


def default_gateway_port(spec: ClusterSpec) -> int:
    """8000, or the next port that neither llama-server nor a local worker of the spec uses."""
    ours = spec_ports(spec)
    port = DEFAULT_GATEWAY_PORT
    while port in ours:
        port += 1
    return port


def gateway_plan(spec: ClusterSpec, engine_url: str, log: Path, port: int | None = None) -> ProcessPlan:
    """``splitserve serve`` in front of llama-server; keys travel in the environment, not argv.

    ``port``: the port `up` chose when the spec gives none (default: the spec's, else 8000)."""
    g = spec.gateway
    port = port or g.port or default_gateway_port(spec)
    template = g.chat_template_file or spec.server.chat_template_file
    settings = g.model_copy(update={"chat_template_file": template})
    # one flag per setting of the spec's [gateway] (GatewaySettings: the same fields as `serve`'s flags)
    argv = [sys.executable, "-m", "splitserve", "serve", "--engine", engine_url, *settings.serve_args(port)]
    argv += list(g.extra_args)
    env = {"PYTHONUNBUFFERED": "1"}
    if g.api_key:
        env["SPLITSERVE_API_KEY"] = g.api_key
    engine_key = spec.server.api_key if spec.backend == "llama.cpp" else getattr(engine_table(spec), "api_key", None)
    if engine_key:  # llama-server's key, or the [vllm] / [sglang] table's
        env["SPLITSERVE_ENGINE_API_KEY"] = engine_key
    return ProcessPlan(
        node="gateway", role="gateway", host="local", argv=argv, env=env, bind=g.host, port=port, log=log
    )


def cluster_state_dir(spec: ClusterSpec) -> Path:
    from .._paths import state_dir

    return spec.state_dir or state_dir() / spec.name


def _log_path(spec: ClusterSpec, w: WorkerSpec, stem: str) -> Path:
    # A remote worker's log lives on its own node, under its workdir.
    if w.remote:
        return Path(f"{w.workdir.rstrip('/')}/clusters/{spec.name}/logs/{stem}.log")
    return cluster_state_dir(spec) / "logs" / f"{stem}.log"


def _rpc_process(spec: ClusterSpec, w: WorkerSpec, eng: Engine) -> ProcessPlan:
    return ProcessPlan(
        node=w.name,
        role="rpc",
        host=w.host,
        argv=rpc_argv(eng, w),
        env=_library_env(eng, w.env),
        bind=w.bind,
        port=w.port,
        log=_log_path(spec, w, w.name),
    )


def replica_plan(
    spec: ClusterSpec, engines: dict[str, Engine], replica: Replica, architecture: str | None = None
) -> ReplicaPlan:
    """One replica's processes: its llama-server (the head's, or one on its first worker's
    ``bind``:``port`` instead of that worker's ggml-rpc-server) with its group's RPC workers."""
    from ._spec import HeadSpec

    rpc = [w for w in spec.workers if w.name in replica.workers]
    workers = [_rpc_process(spec, w, engines[w.name]) for w in rpc]
    server = spec.server.model_copy(update={"tensor_split": None})
    if replica.leader == "head":
        own = spec.model_copy(update={"workers": rpc, "server": server})
        eng = engines["head"]
        proc = ProcessPlan(
            node="head",
            role="server",
            host=spec.head.host,
            argv=server_argv(eng, own, None, architecture),
            env=_library_env(eng, spec.server.env),
            bind=spec.server.host,
            port=spec.server.port,
            log=cluster_state_dir(spec) / "logs" / "head.log",
        )
    else:
        lead = next(w for w in spec.workers if w.name == replica.leader)
        eng = engines[lead.name]
        own = spec.model_copy(
            update={
                "workers": rpc,
                "head": HeadSpec(host=lead.host, devices=list(lead.devices)),
                "server": server.model_copy(update={"host": lead.bind, "port": lead.port}),
                "model": Path(lead.model) if lead.model else spec.model,
            }
        )
        proc = ProcessPlan(
            node=lead.name,
            role="server",
            host=lead.host,
            argv=server_argv(eng, own, None, architecture),
            env=_library_env(eng, {**spec.server.env, **lead.env}),
            bind=lead.bind,
            port=lead.port,
            log=_log_path(spec, lead, f"{lead.name}-server"),
        )
    return ReplicaPlan(replica.name, list(replica.boxes), proc, workers, base_url(proc.bind, proc.port))


def launch_plan(
    spec: ClusterSpec,
    engines: dict[str, Engine],
    tensor_split: list[float] | None = None,
    gateway_port: int | None = None,
    architecture: str | None = None,
    replicas: list[Replica] | None = None,
) -> LaunchPlan:
    """The processes for ``spec``; ``engines`` maps node name (``head`` or a worker) to its engine;
    ``gateway_port`` is the port `up` picked when the spec gives none; ``replicas`` (from
    :func:`~._replicas.replica_groups`): one llama-server per replica instead of one split."""
    root = cluster_state_dir(spec)
    logs = root / "logs"
    if replicas:
        reps = [replica_plan(spec, engines, r, architecture) for r in replicas]
        urls = ",".join(f"{r.name}={r.url}" for r in reps)
        gateway = gateway_plan(spec, urls, logs / "gateway.log", gateway_port) if spec.gateway.enabled else None
        return LaunchPlan(
            workers=[w for r in reps for w in r.workers],
            head=reps[0].server,
            state_dir=root,
            endpoint=base_url(gateway.bind, gateway.port) if gateway else reps[0].url,
            engine_endpoint=reps[0].url,
            gateway=gateway,
            engines=dict(engines),
            replicas=reps,
        )
    workers = [_rpc_process(spec, w, engines[w.name]) for w in spec.workers]
    head_engine = engines["head"]
    head = ProcessPlan(
        node="head",
        role="server",
        host=spec.head.host,
        argv=server_argv(head_engine, spec, tensor_split, architecture),
        env=_library_env(head_engine, spec.server.env),
        bind=spec.server.host,
        port=spec.server.port,
        log=logs / "head.log",
    )
    engine_url = base_url(spec.server.host, spec.server.port)
    gateway = gateway_plan(spec, engine_url, logs / "gateway.log", gateway_port) if spec.gateway.enabled else None
    endpoint = base_url(gateway.bind, gateway.port) if gateway else engine_url
    return LaunchPlan(
        workers=workers,
        head=head,
        state_dir=root,
        endpoint=endpoint,
        engine_endpoint=engine_url,
        gateway=gateway,
        engines=dict(engines),
    )


def process_env(plan: ProcessPlan) -> dict[str, str]:
    """The full environment of a local process: ours plus the plan's, library path prepended."""
    env = dict(os.environ)
    for key, value in plan.env.items():
        if key == "LD_LIBRARY_PATH" and env.get(key):
            env[key] = value + os.pathsep + env[key]
        else:
            env[key] = value
    return env
