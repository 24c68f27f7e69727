"""The ``[vllm]`` and ``[sglang]`` tables of a cluster spec (``backend = "vllm"`` / ``"sglang"``).

Example (two nodes, vLLM's Ray-free launcher)::

    backend = "vllm"

    [[workers]]
    name = "spark2"
    host = "spark2"               # over SSH, as for llama.cpp
    bind = "10.20.20.2"           # the worker's address on the private link (NCCL/Gloo go there)

    [vllm]
    model = "Qwen/Qwen3-0.6B"     # a hub id or a folder, as vLLM takes it
    head_bind = "10.20.20.1"      # the head's address on the private link (default: found from the workers')
    tensor_parallel_size = 2      # unset (with pipeline_parallel_size): chosen from the GPUs and the model
    launcher = "native"           # or "ray": ray start on every node, then --distributed-executor-backend ray

Nodes are the head (rank 0, where splitserve runs) and the ``[[workers]]`` in order.
``fixes = true`` (the default) writes the known multi-node fixes (NIC variables,
Ray's object store cap and memory monitor, ``--load-format safetensors``); `up
--dry-run` says which and why.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Port = Annotated[int, Field(ge=1, le=65535)]
DEFAULT_GATEWAY_PORT = 8000
"""The gateway's default port (as in ``_spec``; `up` picks the next free one when taken)."""
PositiveInt = Annotated[int, Field(ge=1)]

BACKENDS = ("llama.cpp", "vllm", "sglang")
ENGINE_BACKENDS = ("vllm", "sglang")
"""Backends whose settings live in a table of their own name."""

ROLE_NAMES = {
    "ray_head": "ray start --head",
    "ray_worker": "ray start (a worker node)",
    "ray_probe": "the Ray probe",
    "vllm": "vllm serve",
    "vllm_headless": "vllm serve --headless",
    "sglang": "sglang.launch_server",
}
"""How messages name the processes of these backends (by role)."""
STOP_RANK = {"ray_probe": 1, "vllm": 1, "sglang": 1, "vllm_headless": 2, "ray_worker": 3, "ray_head": 4}
"""`down`'s order for these roles (after the gateway, 0): the engine's front first, then the
other ranks, the Ray workers, the Ray head last (SGLang's ranks keep their recorded order: head first)."""

GIB = 1024**3
DEFAULT_OBJECT_STORE_BYTES = GIB
"""``--object-store-memory`` with fixes on: 1 GiB (Ray's own default is 30 % of RAM; on a 128 GB
unified-memory box that is ~36 GB the model needs: forum 373387, fix 2)."""
RAY_MIN_OBJECT_STORE_BYTES = 75 * 1024**2
"""Ray refuses a smaller object store."""

DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
"""``--dtype`` values vLLM and SGLang both accept."""

_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": GIB}
_BYTES_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_NIC_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def parse_bytes(value: int | float | str) -> int:
    """Bytes from ``1073741824``, ``"1GiB"``, ``"512MiB"`` or ``"2GB"``; a ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("a size in bytes, or a string such as '1GiB' or '512MiB'")
    if isinstance(value, int | float):
        return int(value)
    m = _BYTES_RE.match(value)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise ValueError(f"{value!r} is not a size: give bytes, or a number with KiB, MiB, GiB, KB, MB or GB")
    return int(float(m.group(1)) * _UNITS[unit])


def _address(value: str, what: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"must be an IP address ({what})") from None
    return value


class RaySpec(_Strict):
    """``ray start`` on every node (``vllm.launcher = "ray"``)."""

    port: Port = 6379
    """The head's GCS port (``ray start --head --port``); workers join ``head_bind:port``."""
    object_store_memory: int | None = None
    """Bytes (or ``"2GiB"``) for ``--object-store-memory`` on every node; default with fixes on:
    1 GiB, otherwise Ray's own (30 % of RAM)."""
    memory_monitor: bool | None = None
    """Ray's memory monitor, which kills workers at 95 % use; default: off
    (``RAY_memory_monitor_refresh_ms=0``) when fixes are on and a node has unified memory or its
    memory kind is unknown (it false-kills rank 0 on a 128 GB Spark: forum 373387, fix 3)."""
    dashboard: bool = False
    """Ray's dashboard on the head (``--include-dashboard``); it listens on loopback."""
    num_cpus: PositiveInt | None = None
    """``--num-cpus`` on every node (default: Ray counts them)."""
    extra_args: list[str] = Field(default_factory=list)
    """Passed to every ``ray start`` untouched, after splitserve's flags."""

    @field_validator("object_store_memory", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if value is None or not isinstance(value, int | float | str) or isinstance(value, bool):
            return value
        size = parse_bytes(value)
        if size < RAY_MIN_OBJECT_STORE_BYTES:
            raise ValueError(
                f"{size} bytes is below Ray's minimum object store ({RAY_MIN_OBJECT_STORE_BYTES} = 75 MiB)"
            )
        return size


class EngineSpec(_Strict):
    """What ``[vllm]`` and ``[sglang]`` share."""

    model: Annotated[str, Field(min_length=1)]
    """A hub id (``Qwen/Qwen3-0.6B``) or a folder, as the engine takes it (the same on every node)."""
    served_model_name: str | None = None
    """The model id the engine answers to (default: the engine's, i.e. ``model``)."""
    tensor_parallel_size: PositiveInt | None = None
    """Tensor parallel ranks. Unset together with ``pipeline_parallel_size``: `up` chooses both from
    the nodes' GPUs and the model's heads (:func:`splitserve.plan.choose_parallel`: tensor over
    every GPU when the heads divide evenly, else tensor over each node's GPUs and pipeline over the
    nodes) and `up --dry-run` says which and why. One of the two given: the other is 1."""
    pipeline_parallel_size: PositiveInt | None = None
    """Pipeline parallel stages (see ``tensor_parallel_size``)."""
    data_parallel_size: PositiveInt = 1
    quantization: str | None = None
    """``--quantization`` (``fp8``, ``awq``, ``modelopt_fp4``, ...); default: read from the checkpoint."""
    dtype: Literal[DTYPES] | None = None  # type: ignore[valid-type]
    max_model_len: PositiveInt | None = None
    """Context length (vLLM ``--max-model-len``, SGLang ``--context-length``)."""
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    """Fraction of GPU memory for weights and KV (vLLM ``--gpu-memory-utilization``, SGLang
    ``--mem-fraction-static``)."""
    load_format: str | None = None
    """``--load-format``; default: the engine's, or ``safetensors`` for vLLM when fixes are on and a
    node lacks GPUDirect Storage (forum 373387, fix 1)."""
    host: str = "127.0.0.1"
    """The engine's HTTP address (the gateway reaches it there); beyond loopback needs ``api_key``."""
    port: Port = 8080
    """The engine's HTTP port on the head."""
    api_key: str | None = None
    """A key the engine asks clients for (the gateway sends it)."""
    head_bind: str | None = None
    """The head's address on the private link (Ray, NCCL, the rendezvous); default: the head's
    address on the subnet of the workers' ``bind``."""
    nic: str | dict[str, str] | None = None
    """The private link's interface (``enp1s0f0np0``), or one per node (``{head = ..., w1 = ...}``);
    default: the interface that holds the node's address."""
    python: str | dict[str, str] | None = None
    """The Python interpreter that has the engine (and Ray) on every node, or one per node
    (``{head = ..., w1 = ...}``); the ``vllm`` / ``ray`` scripts are looked for next to it.
    Default: the interpreter running splitserve on the head, ``python3`` on the other nodes."""
    fixes: bool = True
    """Write the known multi-node fixes (NIC variables, Ray's object store and memory monitor,
    ``--load-format safetensors``); `up --dry-run` lists them."""
    parsers: Literal["gateway", "engine"] = "gateway"
    """``gateway``: splitserve renders the prompt and parses tool calls and reasoning, through the
    engine's raw completions; ``engine``: the engine's own ``tool_call_parser`` / ``reasoning_parser``."""
    tool_call_parser: str | None = None
    """The engine's tool-call parser name (with ``parsers = "engine"``)."""
    reasoning_parser: str | None = None
    """The engine's reasoning parser name (with ``parsers = "engine"``)."""
    extra_args: list[str] = Field(default_factory=list)
    """Passed to the engine on every node untouched, after splitserve's flags."""
    env: dict[str, str] = Field(default_factory=dict)
    """Set on every node's engine process (after the fixes: a key here wins)."""

    @field_validator("host")
    @classmethod
    def _host_is_address(cls, value: str) -> str:
        if value == "localhost":
            return value
        return _address(value, "the interface the engine's HTTP server listens on")

    @field_validator("head_bind")
    @classmethod
    def _head_bind_is_address(cls, value: str | None) -> str | None:
        return None if value is None else _address(value, "the head's address on the private link")

    def python_for(self, node: str, default: str) -> str:
        """The interpreter of ``node`` (``head`` or a worker's name)."""
        if isinstance(self.python, str):
            return self.python
        if isinstance(self.python, dict) and node in self.python:
            return self.python[node]
        return default

    @field_validator("nic")
    @classmethod
    def _nic_names(cls, value: str | dict[str, str] | None) -> str | dict[str, str] | None:
        names = [value] if isinstance(value, str) else list((value or {}).values())
        bad = [n for n in names if not _NIC_RE.match(n)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an interface name (as `ip addr` shows them, e.g. enp1s0f0np0)")
        return value

    @model_validator(mode="after")
    def _one_size_given(self) -> EngineSpec:
        if self.tensor_parallel_size is not None and self.pipeline_parallel_size is None:
            self.pipeline_parallel_size = 1
        elif self.pipeline_parallel_size is not None and self.tensor_parallel_size is None:
            self.tensor_parallel_size = 1
        return self

    @model_validator(mode="after")
    def _parser_names(self) -> EngineSpec:
        named = [k for k in ("tool_call_parser", "reasoning_parser") if getattr(self, k)]
        if self.parsers == "gateway" and named:
            raise ValueError(
                f'{named[0]} is for parsers = "engine"; with parsers = "gateway" (the default) splitserve '
                "parses tool calls and reasoning itself"
            )
        if self.parsers == "engine" and not named:
            raise ValueError(
                'parsers = "engine" needs tool_call_parser and/or reasoning_parser: the engine\'s parser names'
            )
        return self

    @property
    def auto_sizes(self) -> bool:
        """Neither tensor nor pipeline parallel size given: `up` chooses them from the nodes."""
        return self.tensor_parallel_size is None and self.pipeline_parallel_size is None

    @property
    def world_size(self) -> int:
        """GPUs the deployment uses: tensor x pipeline x data parallel (an unset size counts 1)."""
        return (self.tensor_parallel_size or 1) * (self.pipeline_parallel_size or 1) * self.data_parallel_size


class VllmSpec(EngineSpec):
    """``vllm serve`` on every node (``backend = "vllm"``)."""

    launcher: Literal["native", "ray"] = "native"
    """``native``: vLLM's Ray-free multi-node (``--nnodes --node-rank --master-addr``, ``--headless`` on
    ranks > 0); ``ray``: ``ray start`` on every node, then ``--distributed-executor-backend ray``."""
    master_port: Port = 29501
    """The rendezvous port on the head (``--master-port``; native launcher)."""
    ray: RaySpec = Field(default_factory=lambda: RaySpec())
    """``ray start``'s options (launcher = "ray")."""
    ray_probe: bool = False
    """Start the Ray cluster, but run splitserve's Ray probe on the head instead of ``vllm serve``: a
    Ray job that waits for every node and records what each node's workers see (their address and
    the variables the fixes set). For testing the cluster without GPUs; needs launcher = "ray"."""

    @model_validator(mode="after")
    def _launcher_options(self) -> VllmSpec:
        if self.ray_probe and self.launcher != "ray":
            raise ValueError('ray_probe = true needs launcher = "ray" (the probe is a Ray job)')
        if "ray" in self.model_fields_set and self.launcher != "ray":
            raise ValueError('a [vllm.ray] table needs launcher = "ray" (the native launcher starts no Ray)')
        return self


class SglangSpec(EngineSpec):
    """``python -m sglang.launch_server`` on every node (``backend = "sglang"``)."""

    dist_init_port: Port = 20000
    """The rendezvous port on the head (``--dist-init-addr HEAD:PORT``)."""


class _WorkerLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def bind(self) -> str: ...
    @property
    def remote(self) -> bool: ...
    @property
    def devices(self) -> list[str]: ...


class _HeadLike(Protocol):
    @property
    def devices(self) -> list[str]: ...


class _GatewayLike(Protocol):
    @property
    def enabled(self) -> bool: ...
    @property
    def port(self) -> int | None: ...


class SpecLike(Protocol):
    """What these rules read of a ``ClusterSpec`` (a Protocol, so this module needs no import of
    ``_spec``, which imports it)."""

    @property
    def backend(self) -> str: ...
    @property
    def vllm(self) -> VllmSpec | None: ...
    @property
    def sglang(self) -> SglangSpec | None: ...
    @property
    def workers(self) -> Sequence[_WorkerLike]: ...
    @property
    def head(self) -> _HeadLike: ...
    @property
    def gateway(self) -> _GatewayLike: ...
    @property
    def model_fields_set(self) -> set[str]: ...


def engine_table(spec: SpecLike) -> VllmSpec | SglangSpec | None:
    """The table of the spec's backend, or None for llama.cpp."""
    table = getattr(spec, spec.backend, None) if spec.backend in ENGINE_BACKENDS else None
    return table if isinstance(table, VllmSpec | SglangSpec) else None


def node_names(spec: SpecLike) -> list[str]:
    """The nodes in rank order: ``head``, then the workers."""
    return ["head", *(w.name for w in spec.workers)]


def replica_size(spec: SpecLike) -> int | None:
    """Nodes per server with ``topology = "replicas"`` (``replicas:K`` or ``replica_nodes``, else
    1); None for one server over every node (``split``, and ``auto``, which vLLM / SGLang take as
    a split)."""
    kind, _, size = str(getattr(spec, "topology", "split")).partition(":")
    if kind != "replicas":
        return None
    if size:
        return int(size)
    given = getattr(spec, "replica_nodes", None)
    return int(given) if given else 1


def server_groups(spec: SpecLike) -> list[list[str]]:
    """The nodes of each vLLM / SGLang server in rank order: every node in one group, or with
    replicas consecutive groups of :func:`replica_size` nodes (the head's group first)."""
    nodes = node_names(spec)
    k = replica_size(spec)
    if k is None:
        return [nodes]
    return [nodes[i : i + k] for i in range(0, len(nodes) - k + 1, k)]


def spec_gpus(spec: SpecLike) -> dict[str, int | None]:
    """GPUs per node as the spec gives them (``devices``), None where it does not."""
    out: dict[str, int | None] = {"head": len(spec.head.devices) or None}
    for w in spec.workers:
        out[w.name] = len(w.devices) or None
    return out


def gpus_per_rank_node(table: VllmSpec | SglangSpec, nodes: int) -> int | None:
    """GPUs each node runs when every node runs the same share (vLLM native, SGLang), or None
    for Ray (which places ranks where GPUs are)."""
    if isinstance(table, VllmSpec) and table.launcher == "ray":
        return None
    return table.world_size // nodes if nodes else None


def check_engine_tables(spec: SpecLike) -> None:
    """The cross-table rules of a vLLM / SGLang spec (raised as ValueError inside ClusterSpec's
    validator; each message starts with the key it is about)."""
    backend = spec.backend
    for other in ENGINE_BACKENDS:
        if other != backend and getattr(spec, other) is not None:
            raise ValueError(f'{other}: a [{other}] table needs backend = "{other}" (backend is "{backend}")')
    if backend not in ENGINE_BACKENDS:
        return
    table = engine_table(spec)
    if table is None:
        raise ValueError(
            f'{backend}: required with backend = "{backend}" (the model; the parallel sizes are chosen from the nodes when unset)'
        )
    if "server" in spec.model_fields_set:
        raise ValueError(f'server: llama-server\'s options; with backend = "{backend}" use the [{backend}] table')
    nodes = node_names(spec)
    count = len(nodes)
    k = replica_size(spec)
    if k is not None:
        _check_replicas(spec, table, k)
        count = k  # each server runs over its own group of k nodes
    for key in ("nic", "python"):
        value = getattr(table, key)
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(nodes))
            if unknown:
                raise ValueError(f"{backend}.{key}: no node named {unknown[0]!r}; nodes: {', '.join(nodes)}")
    for w in spec.workers:
        if w.remote and _loopback(w.bind):
            raise ValueError(
                f"workers[{w.name}].bind = {w.bind!r} is loopback but the node is remote: give its address "
                "on the private link (NCCL, Gloo and Ray connect there)"
            )
    if table.head_bind is not None and _loopback(table.head_bind) and any(w.remote for w in spec.workers):
        raise ValueError(
            f"{backend}.head_bind = {table.head_bind!r} is loopback but a worker is remote: give the head's "
            "address on the private link"
        )
    if isinstance(table, VllmSpec) and count > 1 and table.data_parallel_size > 1:
        raise ValueError(
            f"{backend}.data_parallel_size = {table.data_parallel_size} over {count} nodes is not supported: "
            "splitserve spreads tensor/pipeline parallel ranks over nodes; use one node for data parallel"
        )
    if not table.auto_sizes:  # unset: `up` chooses them from the nodes (splitserve.plan.choose_parallel)
        _check_sizes(spec, table, count)
    _check_ports(spec, table)
    _check_key(spec, table)


def _check_sizes(spec: SpecLike, table: VllmSpec | SglangSpec, count: int) -> None:
    """Given sizes split evenly over the ``count`` nodes of a server and fit the devices listed."""
    backend = spec.backend
    world = table.world_size
    sizes = (
        f"tensor_parallel_size x pipeline_parallel_size x data_parallel_size = "
        f"{table.tensor_parallel_size} x {table.pipeline_parallel_size} x {table.data_parallel_size} = {world}"
    )
    per_node = gpus_per_rank_node(table, count)
    if count > 1 and per_node is not None and world % count:
        raise ValueError(
            f"{backend}.{sizes} does not split evenly over {count} nodes (each node runs world/nodes ranks)"
        )
    gpus = spec_gpus(spec)
    given = {n: g for n, g in gpus.items() if g is not None}
    if per_node is not None:
        short = [n for n, g in given.items() if g < max(per_node, 1)]
        if short:
            raise ValueError(
                f"{backend}.{sizes} needs {per_node} GPU(s) on each of the {count} nodes; "
                f"{_devices_key(short[0])} lists {given[short[0]]}"
            )
    elif len(given) == count and sum(given.values()) < world:
        raise ValueError(f"{backend}.{sizes} needs {world} GPUs; the nodes' devices list {sum(given.values())}")


def _check_key(spec: SpecLike, table: VllmSpec | SglangSpec) -> None:
    from .._net import is_loopback

    backend = spec.backend
    if not is_loopback(table.host) and not table.api_key:
        raise ValueError(
            f"{backend}.host = {table.host!r} is beyond loopback and the engine has no key: set "
            f'{backend}.api_key, or {backend}.host = "127.0.0.1" (the gateway reaches it on loopback)'
        )


def _check_replicas(spec: SpecLike, table: VllmSpec | SglangSpec, k: int) -> None:
    backend = spec.backend
    nodes = node_names(spec)
    if k > len(nodes) or len(nodes) % k:
        raise ValueError(
            f"topology: replicas of {k} node(s), but the spec has {len(nodes)} ({', '.join(nodes)}: the head and "
            f"each worker); with backend = {backend!r} give a group size that divides {len(nodes)}"
        )
    if isinstance(table, VllmSpec) and table.launcher == "ray":
        raise ValueError(
            'topology = "replicas": each vLLM replica is its own server; use vllm.launcher = "native" '
            "(the Ray launcher builds one cluster of every node)"
        )
    if table.api_key is None:
        for w in spec.workers:
            if any(g[0] == w.name for g in server_groups(spec)) and not _loopback(w.bind):
                raise ValueError(
                    f'topology = "replicas": replica {w.name}\'s server binds workers[{w.name}].bind = {w.bind!r}, '
                    f"beyond loopback, and the engine has no key: set {backend}.api_key"
                )


def _loopback(address: str) -> bool:
    return address == "localhost" or ipaddress.ip_address(address).is_loopback


def _devices_key(node: str) -> str:
    return "head.devices" if node == "head" else f"workers[{node}].devices"


def _check_ports(spec: SpecLike, table: VllmSpec | SglangSpec) -> None:
    backend = spec.backend
    used: dict[int, str] = {table.port: f"{backend}.port"}
    if isinstance(table, VllmSpec):
        extra = {"ray.port": table.ray.port} if table.launcher == "ray" else {"master_port": table.master_port}
    else:
        extra = {"dist_init_port": table.dist_init_port}
    for key, port in extra.items():
        if port in used:
            raise ValueError(f"{backend}.{key} = {port} is also {used[port]}: give each its own port")
        used[port] = f"{backend}.{key}"
    gw = spec.gateway
    if gw.enabled and gw.port is not None and gw.port in used:
        raise ValueError(f"gateway.port = {gw.port} is also {used[gw.port]}: give the gateway its own port")
    if gw.enabled and gw.port is None and DEFAULT_GATEWAY_PORT in used:
        raise ValueError(
            f"{used[DEFAULT_GATEWAY_PORT]} = {DEFAULT_GATEWAY_PORT} is the gateway's default port: "
            "set gateway.port, or give the engine another port"
        )
