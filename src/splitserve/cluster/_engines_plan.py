"""vLLM and SGLang deployments as values: the processes per node, the known fixes, the checks.

Pure: a spec and the facts the I/O side gathered about each node go in, argv/env per process
and human notes come out (the steps that start them: :func:`~._launch.plan_launch`; the
preflight rows of these facts: :mod:`._preflight_engines`); nothing here starts a process or
opens a socket.

Launch styles
-------------
- vLLM, Ray-free (``launcher = "native"``): ``vllm serve M --nnodes N --node-rank R --master-addr
  HEAD --master-port P`` on every node, ``--headless`` on the ranks > 0
  (vllm-project/vllm ``docs/serving/parallelism_scaling.md``).
- vLLM over Ray (``launcher = "ray"``): ``ray start --head`` on the head, ``ray start --address
  HEAD:PORT`` on the others, then ``vllm serve ... --distributed-executor-backend ray`` on the head;
  with ``ray_probe = true`` the head runs :mod:`._ray_probe` instead of vLLM.
- SGLang: ``python -m sglang.launch_server --model-path M --nnodes N --node-rank R
  --dist-init-addr HEAD:PORT`` on every node (docs.sglang.io multi_node_deployment).

The known fixes (``fixes = true``, the default; each comes back as a note for ``--dry-run``):
``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME`` / ``UCX_NET_DEVICES`` set to the private link's
interface and ``VLLM_HOST_IP`` to the node's own address on every node; ``--object-store-memory``
capped on every ``ray start``; ``RAY_memory_monitor_refresh_ms=0`` on every node; ``--load-format
safetensors`` for vLLM where a node has no GPUDirect Storage (shared/research/round2.md §3.2); on
nodes with RDMA ports, the Spark NCCL block: ``NCCL_IB_HCA`` with every active HCA,
``NCCL_IB_MERGE_NICS=1`` for two, ``NCCL_IB_GID_INDEX`` from sysfs, ``NCCL_NET_GDR_LEVEL=0`` on
unified memory (shared/research/round3.md §3.2).

Replicas (``topology = "replicas"``, K nodes each): one server per group of K consecutive nodes
(:func:`~._spec_engines.server_groups`), each launched as above over its own group only; the
head's group serves on the table's ``host``/``port``, another group's on its first worker's
``bind`` and ``port`` (free: no RPC server runs there). A group's rendezvous port is the table's
``master_port`` / ``dist_init_port`` plus the group's index. The gateway fronts them all
(``--engine head=vllm+http://...,w1=vllm+http://...``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .._errors import ClusterError
from ..plan import ModelShape
from ._commands import ProcessPlan, base_url, cluster_state_dir
from ._link_facts import EndFacts, parse_ip_addr
from ._parallel_sizes import with_parallel_sizes
from ._rdma_node import gid_for_address, parse_sysfs
from ._spec import ClusterSpec
from ._spec_engines import (
    DEFAULT_OBJECT_STORE_BYTES,
    SglangSpec,
    VllmSpec,
    engine_table,
    node_names,
    server_groups,
    spec_gpus,
)

ROLES = ("ray_head", "ray_worker", "ray_probe", "vllm", "vllm_headless", "sglang")
"""Process roles of these backends (llama.cpp's are ``rpc``, ``server``, ``gateway``)."""

NIC_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES")
"""Set to the private link's interface: NCCL and Gloo otherwise pick the first interface that is
up, often a 1 GbE management port (3x Spark at ~6 tok/s: forum 373387)."""
PROBE_VARIABLES = (*NIC_VARIABLES, "VLLM_HOST_IP", "RAY_memory_monitor_refresh_ms")
"""What the Ray probe reports from inside each node's Ray workers."""
UNIFIED_MEMORY_GPUS = ("GB10", "Thor", "Orin")
"""GPU names (``nvidia-smi -L``) whose memory is the system's (DGX Spark, Jetson)."""
PROBE_FILE = "ray-probe.json"


@dataclass(frozen=True)
class EngineNode:
    """What the I/O side found on one node."""

    name: str
    """``head`` or the worker's name."""
    address: str
    """The node's address on the private link (a worker's ``bind``; the head's ``head_bind`` or the
    address it holds on the workers' subnet)."""
    interface: str | None = None
    """The interface holding ``address`` (``ip -j addr``), None when not found."""
    mtu: int | None = None
    operstate: str | None = None
    """``UP``, ``DOWN``, ``UNKNOWN`` (loopback, some virtual links) as ``ip`` reports it."""
    gpus: int | None = None
    """``nvidia-smi -L`` lines; None when it is missing there."""
    gpu_names: tuple[str, ...] = ()
    python: str = "python3"
    """The interpreter that has the engine (and Ray); its folder holds the ``vllm`` / ``ray`` scripts."""
    engine_version: str | None = None
    """``vllm.__version__`` / ``sglang.__version__``; None when it does not import."""
    ray_version: str | None = None
    gds: bool | None = None
    """GPUDirect Storage available; None: unknown."""
    unified_memory: bool | None = None
    """GPU memory is system memory (GB10); None: unknown (read from ``gpu_names`` when given)."""
    rdma_hcas: tuple[str, ...] = ()
    """Verbs ports that are up (``rocep1s0f0:1``) under ``/sys/class/infiniband``; a DGX Spark's
    QSFP port is two of them (two x4 halves). Empty: none, or not read."""
    rdma_gid_index: int | None = None
    """The GID index holding the node's address (RoCE v2 preferred), read from sysfs: what
    ``NCCL_IB_GID_INDEX`` names."""

    @property
    def bin_dir(self) -> PurePosixPath:
        return PurePosixPath(self.python).parent

    @property
    def is_unified(self) -> bool | None:
        if self.unified_memory is not None:
            return self.unified_memory
        if self.gpu_names:
            return any(k in name for name in self.gpu_names for k in UNIFIED_MEMORY_GPUS)
        return None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineNode:
        values = dict(data)
        values["gpu_names"] = tuple(values.get("gpu_names") or ())
        values["rdma_hcas"] = tuple(values.get("rdma_hcas") or ())
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["gpu_names"] = list(self.gpu_names)
        out["rdma_hcas"] = list(self.rdma_hcas)
        return out


@dataclass(frozen=True)
class EngineFacts:
    """Facts for every node of a spec, head first."""

    nodes: tuple[EngineNode, ...]
    shape: ModelShape | None = None
    """The model's heads and layers as the head holds it, read once when ``up`` chooses the
    parallel sizes (None: not read; then read where needed)."""

    def node(self, name: str) -> EngineNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise ClusterError(f"no facts for node {name!r}; gathered for: {', '.join(n.name for n in self.nodes)}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineFacts:
        shape = data.get("shape")
        return cls(tuple(EngineNode.from_dict(n) for n in data["nodes"]), ModelShape(**shape) if shape else None)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nodes": [n.as_dict() for n in self.nodes]}
        if self.shape is not None:
            out["shape"] = asdict(self.shape)
        return out


@dataclass
class EnginePlan:
    """Every process of a vLLM / SGLang deployment in start order, and what splitserve changed."""

    processes: list[ProcessPlan]
    endpoint: str
    """The engine's HTTP URL on the head (what the gateway talks to); the probe's has none."""
    notes: list[str] = field(default_factory=list)
    """One line per fix written (and per fix that could not be), for ``--dry-run``."""
    probe_out: Path | None = None
    """Where the Ray probe writes its report (``ray_probe = true``)."""
    replicas: list[EngineReplica] = field(default_factory=list)
    """With ``topology = "replicas"``: each server and its nodes (the first is :attr:`endpoint`);
    empty for one server over every node."""


@dataclass
class EngineReplica:
    """One vLLM / SGLang server of a replicas topology: named after the node that serves its HTTP."""

    name: str
    nodes: list[str]
    url: str

    def to_dict(self) -> dict[str, Any]:
        """Its row in the state's ``extra.replicas`` (what `status` and `down` read): the serving
        node as ``server``, the group's other ranks as ``workers``."""
        return {
            "name": self.name,
            "boxes": list(self.nodes),
            "server": self.name,
            "workers": self.nodes[1:],
            "url": self.url,
        }


# -- the plan ----------------------------------------------------------------------------------


def engine_plan(spec: ClusterSpec, facts: EngineFacts) -> EnginePlan:
    """The deployment of ``spec`` (backend ``vllm`` or ``sglang``) on nodes described by ``facts``;
    parallel sizes the spec leaves unset are chosen from the nodes first (a note says which and why)."""
    spec, sizes = with_parallel_sizes(spec, {n.name: n.gpus for n in facts.nodes}, facts.shape)
    plan = _engine_plan(spec, facts)
    if sizes:
        plan.notes.insert(0, sizes)
    return plan


def _engine_plan(spec: ClusterSpec, facts: EngineFacts) -> EnginePlan:
    table = engine_table(spec)
    if table is None:
        raise ClusterError(f"{spec.source_file or '<spec>'}: backend = {spec.backend!r} has no engine plan here")
    groups = server_groups(spec)
    if len(groups) == 1 and spec.topology_asked[0] != "replicas":
        return _build(_Builder(spec, table, facts), table)
    plan = EnginePlan(processes=[], endpoint="")
    for i, group in enumerate(groups):
        if group[0] == "head":
            host, port = table.host, table.port
        else:
            lead = next(w for w in spec.workers if w.name == group[0])
            host, port = lead.bind, lead.port
        one = _build(_Builder(spec, table, facts, group, host, port, i), table)
        plan.processes += one.processes
        plan.notes += [n for n in one.notes if n not in plan.notes]
        plan.replicas.append(EngineReplica(group[0], list(group), one.endpoint))
    plan.endpoint = plan.replicas[0].url
    k = len(groups[0])
    plan.notes.insert(
        0,
        f'topology = "replicas": {len(groups)} {spec.backend} server(s) of {k} node(s) each '
        f"({'; '.join(', '.join(g) for g in groups)})"
        + (", the gateway routes between them" if len(groups) > 1 else ""),
    )
    return plan


def _build(build: _Builder, table: VllmSpec | SglangSpec) -> EnginePlan:
    if isinstance(table, VllmSpec):
        build.vllm(table)
    else:
        build.sglang(table)
    return build.plan


def vllm_processes(spec: ClusterSpec, facts: EngineFacts) -> list[ProcessPlan]:
    """The processes of a ``backend = "vllm"`` spec, in start order."""
    if not isinstance(spec.vllm, VllmSpec) or spec.backend != "vllm":
        raise ClusterError(f'{spec.source_file or "<spec>"}: not a backend = "vllm" spec')
    return engine_plan(spec, facts).processes


def sglang_processes(spec: ClusterSpec, facts: EngineFacts) -> list[ProcessPlan]:
    """The processes of a ``backend = "sglang"`` spec, in start order."""
    if not isinstance(spec.sglang, SglangSpec) or spec.backend != "sglang":
        raise ClusterError(f'{spec.source_file or "<spec>"}: not a backend = "sglang" spec')
    return engine_plan(spec, facts).processes


def _model_args(t: VllmSpec | SglangSpec, max_len_flag: str, memory_flag: str) -> list[str]:
    """The flags both engines take from the table's dtype, quantization, context length and memory
    fraction (under their own names for the last two)."""
    argv: list[str] = []
    if t.dtype:
        argv += ["--dtype", t.dtype]
    if t.quantization:
        argv += ["--quantization", t.quantization]
    if t.max_model_len:
        argv += [max_len_flag, str(t.max_model_len)]
    if t.gpu_memory_utilization is not None:
        argv += [memory_flag, f"{t.gpu_memory_utilization:g}"]
    return argv


def host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_LOG_NAMES = {
    "ray_head": "ray",
    "ray_worker": "ray",
    "ray_probe": "ray-probe",
    "vllm": "vllm",
    "vllm_headless": "vllm",
    "sglang": "sglang",
}


class _Builder:
    """The processes of one server over ``names`` (default: every node), its HTTP on ``host``:``port``
    (default: the table's); ``index``: the group's, added to the rendezvous port."""

    def __init__(
        self,
        spec: ClusterSpec,
        table: VllmSpec | SglangSpec,
        facts: EngineFacts,
        names: list[str] | None = None,
        host: str | None = None,
        port: int | None = None,
        index: int = 0,
    ) -> None:
        self.spec = spec
        self.table = table
        self.names = names or node_names(spec)
        self.nodes = [facts.node(n) for n in self.names]
        self.head = self.nodes[0]
        self.root = cluster_state_dir(spec)
        self.host = host or table.host
        self.port = port or table.port
        self.index = index
        self.plan = EnginePlan(processes=[], endpoint=base_url(self.host, self.port))
        self.multi = len(self.nodes) > 1
        self._noted: set[str] = set()

    # -- helpers ---------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        if text not in self._noted:
            self._noted.add(text)
            self.plan.notes.append(text)

    def host_of(self, name: str) -> str:
        if name == "head":
            return self.spec.head.host
        return next(w.host for w in self.spec.workers if w.name == name)

    def log(self, name: str, role: str) -> Path:
        worker = next((w for w in self.spec.workers if w.name == name), None)
        file = f"{name}-{_LOG_NAMES[role]}.log"
        if worker is not None and worker.remote:
            return Path(f"{worker.workdir.rstrip('/')}/clusters/{self.spec.name}/logs/{file}")
        return self.root / "logs" / file

    def interface(self, node: EngineNode) -> str | None:
        nic = self.table.nic
        if isinstance(nic, str):
            return nic
        if isinstance(nic, dict) and node.name in nic:
            return nic[node.name]
        return node.interface

    def node_env(self, node: EngineNode, ray: bool, engine: bool = True) -> dict[str, str]:
        """The fixes' variables for one node, then the node's and the table's own."""
        env: dict[str, str] = {}
        t = self.table
        if t.fixes and (self.multi or ray):
            iface = self.interface(node)
            if iface:
                for var in NIC_VARIABLES:
                    env[var] = iface
                self.note(
                    f"fix: {', '.join(NIC_VARIABLES)} = the private link's interface on every node "
                    f"({self._iface_list()}), so NCCL and Gloo do not pick the management NIC"
                )
            else:
                self.note(
                    f"fix not written on {node.name}: no interface holds {node.address}; NCCL and Gloo pick "
                    f"their own (set {self.spec.backend}.nic)"
                )
            if isinstance(t, VllmSpec):
                env["VLLM_HOST_IP"] = node.address
                self.note("fix: VLLM_HOST_IP = each node's own private-link address (Ray and vLLM agree on the IP)")
            env.update(self.nccl_rdma_env(node))
        if ray and self.memory_monitor_off():
            env["RAY_memory_monitor_refresh_ms"] = "0"
            self.note(
                "fix: RAY_memory_monitor_refresh_ms=0 on every node: Ray's 95 % memory monitor false-kills "
                "rank 0 on unified-memory machines (set vllm.ray.memory_monitor = true to keep it)"
            )
        if node.name != "head":
            env.update(next(w for w in self.spec.workers if w.name == node.name).env)
        if engine:
            env.update(t.env)
        return env

    def nccl_rdma_env(self, node: EngineNode) -> dict[str, str]:
        """The Spark NCCL block, for a node with RDMA ports: every active HCA in ``NCCL_IB_HCA``
        (both x4 halves of a Spark's QSFP port, merged into one NIC), the GID index of the node's
        address from sysfs, and no GPUDirect RDMA on unified memory (round3.md §3.2)."""
        env: dict[str, str] = {}
        if not node.rdma_hcas:
            return env
        env["NCCL_IB_HCA"] = "=" + ",".join(node.rdma_hcas)
        self.note(
            f"fix: NCCL_IB_HCA = every RDMA port that is up, so NCCL uses both HCAs ({self._per_node(_hca_text)})"
        )
        if len(node.rdma_hcas) > 1:
            env["NCCL_IB_MERGE_NICS"] = "1"
            self.note(
                "fix: NCCL_IB_MERGE_NICS=1 where a node has two HCAs (a Spark's QSFP port is two x4 halves): "
                "NCCL drives them as one NIC (nccl-tests busbw 98 -> 161 Gb/s)"
            )
        if node.rdma_gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(node.rdma_gid_index)
            self.note(
                "fix: NCCL_IB_GID_INDEX = the RoCE v2 GID of the node's address, read from "
                f"/sys/class/infiniband ({self._per_node(_gid_text)})"
            )
        else:
            self.note(
                f"fix not written on {node.name}: no RDMA GID holds {node.address}; NCCL_IB_GID_INDEX is left to "
                "NCCL (give the node's address on the RDMA link)"
            )
        if node.is_unified:
            env["NCCL_NET_GDR_LEVEL"] = "0"
            self.note(
                "fix: NCCL_NET_GDR_LEVEL=0 on unified-memory nodes (GB10): no GPUDirect RDMA there, and "
                "NCCL's default hangs its init"
            )
        return env

    def _per_node(self, text: Any) -> str:
        return ", ".join(f"{n.name}: {text(n)}" for n in self.nodes if n.rdma_hcas)

    def _iface_list(self) -> str:
        return ", ".join(f"{n.name}: {self.interface(n) or '?'}" for n in self.nodes)

    def memory_monitor_off(self) -> bool:
        t = self.table
        if not isinstance(t, VllmSpec):
            return False
        if t.ray.memory_monitor is not None:
            return not t.ray.memory_monitor
        return t.fixes and any(n.is_unified is not False for n in self.nodes)

    def gpus(self, node: EngineNode) -> int | None:
        given = spec_gpus(self.spec)[node.name]
        return given if given is not None else node.gpus

    def add(self, node: EngineNode, role: str, argv: list[str], env: dict[str, str], bind: str, port: int) -> None:
        self.plan.processes.append(
            ProcessPlan(
                node=node.name,
                role=role,
                host=self.host_of(node.name),
                argv=argv,
                env=env,
                bind=bind,
                port=port,
                log=self.log(node.name, role),
            )
        )

    # -- vLLM ------------------------------------------------------------------------------------

    def vllm(self, t: VllmSpec) -> None:
        if t.launcher == "ray":
            self.ray_cluster(t)
            if t.ray_probe:
                self.ray_probe(t)
                return
        count = len(self.nodes)
        ray = t.launcher == "ray"
        for rank, node in enumerate(self.nodes[:1] if ray else self.nodes):
            argv = [str(node.bin_dir / "vllm"), "serve", t.model]
            headless = not ray and rank > 0
            if not headless:
                argv += ["--host", self.host, "--port", str(self.port)]
            argv += [
                "--tensor-parallel-size",
                str(t.tensor_parallel_size),
                "--pipeline-parallel-size",
                str(t.pipeline_parallel_size),
            ]
            if t.data_parallel_size > 1:
                argv += ["--data-parallel-size", str(t.data_parallel_size)]
            if ray:
                argv += ["--distributed-executor-backend", "ray"]
            elif count > 1:
                argv += [
                    "--nnodes",
                    str(count),
                    "--node-rank",
                    str(rank),
                    "--master-addr",
                    self.head.address,
                    "--master-port",
                    str(t.master_port + self.index),
                ]
                if headless:
                    argv.append("--headless")
            argv += self.vllm_model_args(t)
            if not headless:
                argv += self.frontend_args(t)
            argv += list(t.extra_args)
            env = self.node_env(node, ray=ray)
            if ray:
                env["RAY_ADDRESS"] = host_port(self.head.address, t.ray.port)
            if t.api_key and not headless:
                env["VLLM_API_KEY"] = t.api_key
            if headless:
                self.add(node, "vllm_headless", argv, env, node.address, 0)
            else:
                self.add(node, "vllm", argv, env, self.host, self.port)

    def vllm_model_args(self, t: VllmSpec) -> list[str]:
        argv = _model_args(t, "--max-model-len", "--gpu-memory-utilization")
        load_format = t.load_format
        if load_format is None and t.fixes and not t.model.lower().endswith(".gguf"):
            missing = [n.name for n in self.nodes if n.gds is not True]
            if missing:
                load_format = "safetensors"
                unknown = [n.name for n in self.nodes if n.gds is None]
                why = "unknown" if len(unknown) == len(missing) else "missing"
                self.note(
                    f"fix: --load-format safetensors: GPUDirect Storage {why} on {', '.join(missing)} (a GDS "
                    'loader throws without it); set vllm.load_format = "auto" to let vLLM choose'
                )
        if load_format:
            argv += ["--load-format", load_format]
        return argv

    def frontend_args(self, t: VllmSpec | SglangSpec) -> list[str]:
        argv: list[str] = []
        if t.served_model_name:
            argv += ["--served-model-name", t.served_model_name]
        if t.parsers == "engine":
            if t.tool_call_parser:
                if isinstance(t, VllmSpec):
                    argv.append("--enable-auto-tool-choice")
                argv += ["--tool-call-parser", t.tool_call_parser]
            if t.reasoning_parser:
                argv += ["--reasoning-parser", t.reasoning_parser]
        return argv

    # -- Ray -------------------------------------------------------------------------------------

    def ray_cluster(self, t: VllmSpec) -> None:
        r = t.ray
        store = r.object_store_memory
        if store is None and t.fixes:
            store = DEFAULT_OBJECT_STORE_BYTES
            self.note(
                f"fix: --object-store-memory {store} (1 GiB) on every ray start: Ray reserves 30 % of RAM "
                "by default, memory a unified-memory node needs for the model (vllm.ray.object_store_memory)"
            )
        gcs = host_port(self.head.address, r.port)
        for rank, node in enumerate(self.nodes):
            argv = [str(node.bin_dir / "ray"), "start"]
            if rank == 0:
                argv += ["--head", "--node-ip-address", node.address, "--port", str(r.port)]
                argv += ["--include-dashboard", "true" if r.dashboard else "false", "--disable-usage-stats"]
            else:
                argv += ["--address", gcs, "--node-ip-address", node.address]
            gpus = 0 if t.ray_probe and self.gpus(node) is None else self.gpus(node)
            if gpus is not None:
                argv += ["--num-gpus", str(gpus)]
            if r.num_cpus is not None:
                argv += ["--num-cpus", str(r.num_cpus)]
            if store is not None:
                argv += ["--object-store-memory", str(store)]
            argv += ["--block", *r.extra_args]
            env = self.node_env(node, ray=True)
            if rank == 0:
                self.add(node, "ray_head", argv, env, node.address, r.port)
            else:
                self.add(node, "ray_worker", argv, env, node.address, 0)

    def ray_probe(self, t: VllmSpec) -> None:
        out = self.root / PROBE_FILE
        self.plan.probe_out = out
        self.plan.endpoint = ""
        argv = [
            self.head.python,
            "-m",
            "splitserve.cluster._ray_probe",
            "--address",
            host_port(self.head.address, t.ray.port),
            "--node-ip-address",
            self.head.address,
            "--expect-nodes",
            str(len(self.nodes)),
            "--out",
            str(out),
        ]
        env = {"PYTHONUNBUFFERED": "1", **self.node_env(self.head, ray=True, engine=False)}
        self.note(f"ray_probe: the head runs splitserve's Ray probe instead of vllm serve; its report: {out}")
        self.add(self.head, "ray_probe", argv, env, self.head.address, 0)

    # -- SGLang ----------------------------------------------------------------------------------

    def sglang(self, t: SglangSpec) -> None:
        count = len(self.nodes)
        for rank, node in enumerate(self.nodes):
            argv = [node.python, "-m", "sglang.launch_server", "--model-path", t.model]
            if rank == 0:
                argv += ["--host", self.host, "--port", str(self.port)]
            argv += ["--tp-size", str(t.tensor_parallel_size)]
            if (t.pipeline_parallel_size or 1) > 1:
                argv += ["--pp-size", str(t.pipeline_parallel_size)]
            if t.data_parallel_size > 1:
                argv += ["--dp-size", str(t.data_parallel_size)]
            if count > 1:
                argv += [
                    "--nnodes",
                    str(count),
                    "--node-rank",
                    str(rank),
                    "--dist-init-addr",
                    host_port(self.head.address, t.dist_init_port + self.index),
                ]
            argv += _model_args(t, "--context-length", "--mem-fraction-static")
            if t.load_format:
                argv += ["--load-format", t.load_format]
            if rank == 0:
                argv += self.frontend_args(t)
                if t.api_key:
                    argv += ["--api-key", t.api_key]
            argv += list(t.extra_args)
            env = self.node_env(node, ray=False)
            if rank == 0:
                self.add(node, "sglang", argv, env, self.host, self.port)
            else:
                self.add(node, "sglang", argv, env, node.address, 0)


# -- facts: the commands the I/O side runs on each node, and their parsers ------------------


def fact_commands(spec: ClusterSpec, python: str = "python3") -> dict[str, list[str]]:
    """The command lines (argv) whose outputs make a node's :class:`EngineNode`, by fact name:
    ``engine`` (the version, or a failed import), ``nic`` (``ip -j addr show``), ``gpus``
    (``nvidia-smi -L``) and, for the Ray launcher, ``ray`` (``ray --version``)."""
    module = "sglang" if spec.backend == "sglang" else "vllm"
    probe = isinstance(spec.vllm, VllmSpec) and spec.backend == "vllm" and spec.vllm.ray_probe
    cmds: dict[str, list[str]] = {}
    if not probe:  # the probe starts no engine: its import is not asked for
        cmds["engine"] = [python, "-c", f"import {module}; print({module}.__version__)"]
    cmds["nic"] = ["ip", "-j", "addr", "show"]
    cmds["gpus"] = ["nvidia-smi", "-L"]
    if isinstance(spec.vllm, VllmSpec) and spec.backend == "vllm" and spec.vllm.launcher == "ray":
        cmds["ray"] = [str(PurePosixPath(python).parent / "ray"), "--version"]
    return cmds


_VERSION_RE = re.compile(r"(\d+\.\d+(?:\.\d+)?(?:[.+-]?[A-Za-z0-9.]+)?)")


def parse_version(text: str) -> str | None:
    """The version in ``ray --version`` (``ray, version 2.60.0``) or a ``print(__version__)``."""
    for line in reversed((text or "").strip().splitlines()):
        m = _VERSION_RE.search(line)
        if m:
            return m.group(1)
    return None


def parse_gpu_list(text: str) -> tuple[str, ...]:
    """GPU names from ``nvidia-smi -L`` (``GPU 0: NVIDIA GB10 (UUID: ...)``)."""
    names = []
    for line in (text or "").splitlines():
        m = re.match(r"^GPU \d+: (.+?)(?: \(UUID: [^)]*\))?\s*$", line.strip())
        if m:
            names.append(m.group(1))
    return tuple(names)


def node_facts(
    name: str,
    address: str,
    outputs: Mapping[str, tuple[int, str]],
    python: str = "python3",
    gds: bool | None = None,
) -> EngineNode:
    """A node's facts from the (exit status, stdout) of each :func:`fact_commands` command; a
    command that failed or is missing leaves its fact unknown (None)."""

    def ok(key: str) -> str | None:
        rc, out = outputs.get(key, (1, ""))
        return out if rc == 0 else None

    iface = None
    nic = ok("nic")
    if nic is not None:
        iface = EndFacts(interfaces=parse_ip_addr(nic)).holding(address)
    gpus_out = ok("gpus")
    names = parse_gpu_list(gpus_out) if gpus_out is not None else ()
    engine = ok("engine")
    ray = ok("ray")
    hcas, gid_index = rdma_facts(ok("rdma"), address)
    return EngineNode(
        name=name,
        address=address,
        interface=iface.name if iface else None,
        mtu=iface.mtu if iface else None,
        operstate=iface.operstate if iface else None,
        gpus=len(names) if gpus_out is not None else None,
        gpu_names=names,
        python=python,
        engine_version=parse_version(engine) if engine is not None else None,
        ray_version=parse_version(ray) if ray is not None else None,
        gds=gds,
        rdma_hcas=hcas,
        rdma_gid_index=gid_index,
    )


def rdma_facts(sysfs: str | None, address: str) -> tuple[tuple[str, ...], int | None]:
    """The active verbs ports (``dev:port``) and the GID index of ``address`` from the output of
    :func:`._rdma_node.sysfs_script` (None: not read)."""
    if not sysfs:
        return (), None
    ports = parse_sysfs(sysfs)
    hcas = tuple(f"{p.device}:{p.port}" for p in ports if (p.state or "").upper().endswith("ACTIVE"))
    found = gid_for_address(ports, address) if hcas else None
    return hcas, found[1].index if found else None


def _hca_text(node: EngineNode) -> str:
    return "=" + ",".join(node.rdma_hcas)


def _gid_text(node: EngineNode) -> str:
    return str(node.rdma_gid_index) if node.rdma_gid_index is not None else "none"


__all__ = [
    "NIC_VARIABLES",
    "PROBE_VARIABLES",
    "ROLES",
    "EngineFacts",
    "EngineNode",
    "EnginePlan",
    "engine_plan",
    "fact_commands",
    "host_port",
    "node_facts",
    "parse_gpu_list",
    "parse_version",
    "sglang_processes",
    "vllm_processes",
]
