"""The plan: which layers go where, what each node holds, how much context fits, how fast decode can be.

make_plan(model, nodes, PlanOptions(...)) -> Plan      # pure: model headers + nodes in, numbers out
Plan.to_dict()                                         # the ``plan --json`` document
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .._errors import UsageError
from ..model import ModelInfo
from ._compute import estimate_compute
from ._devices import GIB, Node
from ._memory import (
    KVSettings,
    host_bytes,
    kv_bytes_per_token,
    layer_devices,
    layer_kv_bytes,
    pad,
    padded_layer_bytes,
    weights_per_device,
)
from ._serving import SpecSupport, msa_warnings, speculation_support

MAX_CTX_TYPES = ("f16", "q8_0", "q4_0")
PARALLEL_STEPS = (1, 2, 4, 8)


@dataclass(frozen=True)
class PlanOptions:
    """llama-server's memory-relevant flags, and the planner's own knobs."""

    ctx: int | None = None  #: None: the model's training context, like llama.cpp's ``-c 0``
    parallel: int = 1
    unified: bool = False  #: ``--kv-unified``
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    ubatch: int = 512
    flash_attn: bool = True
    tensor_split: tuple[float, ...] | None = None  #: None: choose one that balances headroom
    margin_bytes: int = GIB  #: headroom to keep per node (llama.cpp's fit uses 1024 MiB)
    host_node: int | None = 0  #: node whose memory also holds the host-side bytes (the head); None: apart
    link_gbps: float | None = None  #: bandwidth of the link between consecutive nodes
    link_latency_us: float | None = None  #: one-way latency of one hop
    speculation: tuple[str, ...] = ()  #: ``--spec-type`` asked for (empty: none)


@dataclass
class NodePlan:
    name: str
    memory_bytes: int
    layers: tuple[int, int] | None  #: first and last repeating layer, or None
    has_output: bool
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    host_bytes: int  #: host-side bytes charged to this node (the head's own RAM on unified memory)
    bandwidth_gbps: float | None

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.host_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.memory_bytes - self.total_bytes

    @property
    def n_layers(self) -> int:
        return 0 if self.layers is None else self.layers[1] - self.layers[0] + 1


@dataclass
class Plan:
    model: ModelInfo
    options: PlanOptions
    ctx: int
    nodes: list[NodePlan]
    host_weights_bytes: int
    host_compute_bytes: int
    tensor_split: list[float]
    kv_bytes_per_token: dict[str, int]
    max_ctx: dict[str, dict[str, Any]]
    parallel: list[dict[str, int]]
    decode_tps_upper_bound: float | None
    decode_tps_upper_bound_full_ctx: float | None
    bytes_per_token: int
    hop_seconds: float | None
    warnings: list[str] = field(default_factory=list)
    estimated: list[str] = field(default_factory=list)
    speculation: list[SpecSupport] = field(default_factory=list)
    """Which speculation types the model can use (with the spec's draft model, if any)."""

    @property
    def fits(self) -> bool:
        return all(n.headroom_bytes >= 0 for n in self.nodes)

    @property
    def host_bytes(self) -> int:
        return self.host_weights_bytes + self.host_compute_bytes

    def server_args(self) -> list[str]:
        """The llama-server flags this plan is for (memory-relevant ones; add ``-m`` and ``--rpc``)."""
        o = self.options
        args = [
            "-c",
            str(self.ctx),
            "-np",
            str(o.parallel),
            "-ctk",
            o.cache_type_k,
            "-ctv",
            o.cache_type_v,
            "-ub",
            str(o.ubatch),
            "-fa",
            "on" if o.flash_attn else "off",
            "-ngl",
            "999",
            "--tensor-split",
            ",".join(f"{x:g}" for x in self.tensor_split),
        ]
        if o.unified:
            args.append("--kv-unified")
        if o.speculation:
            args += ["--spec-type", ",".join(o.speculation)]
        return args

    def to_dict(self) -> dict[str, Any]:
        o = self.options
        return {
            "model": {
                "path": str(self.model.path),
                "architecture": self.model.architecture,
                "weights_bytes": self.model.weights_bytes,
                "n_layer": self.model.n_layer,
            },
            "settings": {
                "ctx": self.ctx,
                "parallel": o.parallel,
                "kv_unified": o.unified,
                "cache_type_k": o.cache_type_k,
                "cache_type_v": o.cache_type_v,
                "ubatch": o.ubatch,
                "flash_attn": o.flash_attn,
                "margin_bytes": o.margin_bytes,
            },
            "fits": self.fits,
            "nodes": [
                {
                    "name": n.name,
                    "layers": list(n.layers) if n.layers else None,
                    "n_layers": n.n_layers,
                    "output_layer": n.has_output,
                    "weights_bytes": n.weights_bytes,
                    "kv_bytes": n.kv_bytes,
                    "kv_bytes_per_token": round(n.kv_bytes / self.ctx) if self.ctx else 0,
                    "compute_bytes": n.compute_bytes,
                    "host_bytes": n.host_bytes,
                    "total_bytes": n.total_bytes,
                    "memory_bytes": n.memory_bytes,
                    "headroom_bytes": n.headroom_bytes,
                    "bandwidth_gbps": n.bandwidth_gbps,
                }
                for n in self.nodes
            ],
            "host_bytes": self.host_bytes,
            "host": {"weights_bytes": self.host_weights_bytes, "compute_bytes": self.host_compute_bytes},
            "kv_bytes_per_token": self.kv_bytes_per_token[o.cache_type_k + "/" + o.cache_type_v],
            "kv_bytes_per_token_by_type": self.kv_bytes_per_token,
            "tensor_split": self.tensor_split,
            "tensor_split_arg": ",".join(f"{x:g}" for x in self.tensor_split),
            "llama_server_args": self.server_args(),
            # the largest context per KV type (None: that type cannot be used, see max_ctx_detail)
            "max_ctx": {t: v.get("ctx") for t, v in self.max_ctx.items()},
            "max_ctx_detail": self.max_ctx,
            "margin_bytes": o.margin_bytes,
            "parallel": self.parallel,
            "decode_tps_upper_bound": self.decode_tps_upper_bound,
            "decode_tps_upper_bound_full_ctx": self.decode_tps_upper_bound_full_ctx,
            "decode_bytes_per_token": self.bytes_per_token,
            "hop_seconds": self.hop_seconds,
            "speculation": {
                "requested": list(o.speculation),
                "supported": [r.type for r in self.speculation if r.supported],
                "types": [r.as_dict() for r in self.speculation],
            },
            "warnings": self.warnings,
            "estimated": self.estimated,
        }


def _settings(
    o: PlanOptions, ctx: int, type_k: str | None = None, type_v: str | None = None, parallel: int | None = None
) -> KVSettings:
    return KVSettings(
        ctx=ctx,
        parallel=parallel or o.parallel,
        unified=o.unified,
        type_k=type_k or o.cache_type_k,
        type_v=type_v or o.cache_type_v,
        ubatch=o.ubatch,
        flash_attn=o.flash_attn,
    )


@dataclass
class _Alloc:
    devices: list[int]
    weights: list[int]
    kv: list[int]
    compute: list[int]
    host_compute: int
    notes: list[str]


def _allocate(model: ModelInfo, n_dev: int, split: list[float], s: KVSettings) -> _Alloc:
    devices = layer_devices(model.n_layer, split)
    weights = weights_per_device(model, devices, n_dev)
    kv = [0] * n_dev
    for dev, b in zip(devices, layer_kv_bytes(model, s)):
        kv[dev] += b
    comp = estimate_compute(model, s, devices, n_dev)
    return _Alloc(devices, weights, kv, comp.device_bytes, comp.host_bytes, comp.notes)


def _usage(model: ModelInfo, nodes: list[Node], o: PlanOptions, a: _Alloc) -> list[int]:
    used = [w + k + c for w, k, c in zip(a.weights, a.kv, a.compute)]
    if o.host_node is not None and 0 <= o.host_node < len(nodes):
        used[o.host_node] += host_bytes(model) + a.host_compute
    return used


def _fits(model: ModelInfo, nodes: list[Node], o: PlanOptions, a: _Alloc) -> bool:
    return all(u + o.margin_bytes <= n.memory_bytes for u, n in zip(_usage(model, nodes, o, a), nodes))


def choose_split(model: ModelInfo, nodes: list[Node], o: PlanOptions, s: KVSettings) -> list[float]:
    """Layer counts per node (usable as ``--tensor-split``) that fill every node to the same fraction.

    Each node's room is its memory less the margin and its fixed bytes (compute buffer, and the
    host side on the head's node); the layers (weights + KV, the output layer last) are cut into
    contiguous ranges whose bytes are proportional to that room, like llama.cpp's default split by
    free memory but with what the node must hold anyway taken out first; then single layers move
    across the cuts while that raises the smallest headroom (as a fraction of the node's memory).
    """
    n = len(nodes)
    kv = layer_kv_bytes(model, s) + [0]
    cost = [w + k for w, k in zip(padded_layer_bytes(model), kv)]
    even = _allocate(model, n, [1.0] * n, s)
    fixed = list(even.compute)
    if o.host_node is not None and 0 <= o.host_node < n:
        fixed[o.host_node] += host_bytes(model) + even.host_compute
    room = [max(0, node.memory_bytes - o.margin_bytes - f) for node, f in zip(nodes, fixed)]
    if sum(room) <= 0:  # nothing has room: llama.cpp's default, proportional to memory
        return [float(node.memory_bytes // GIB or 1) for node in nodes]
    total = sum(cost)
    cum = [0]
    for c in cost:
        cum.append(cum[-1] + c)
    counts: list[int] = []
    start, share = 0, 0
    for dev in range(n - 1):
        share += room[dev]
        target = total * share / sum(room)
        # the cut (after layer k) nearest the target; leave at least the output layer for the last node
        k = min(range(start, len(cost)), key=lambda j: abs(cum[j] - target))
        k = min(k, len(cost) - 1)
        counts.append(k - start)
        start = k
    counts.append(len(cost) - start)
    # then move single layers across the cuts while that raises the smallest relative headroom
    avail = [node.memory_bytes - o.margin_bytes - f for node, f in zip(nodes, fixed)]

    def worst(cs: list[int]) -> float:
        out, i = [], 0
        for dev, c in enumerate(cs):
            out.append((avail[dev] - (cum[i + c] - cum[i])) / max(1, nodes[dev].memory_bytes))
            i += c
        return min(out)

    best = worst(counts)
    floor = 1 if len(cost) >= n and min(counts) >= 1 else 0
    for _ in range(4 * len(cost)):
        moved = False
        for b in range(n - 1):
            for step in (1, -1):
                cand = list(counts)
                cand[b] -= step
                cand[b + 1] += step
                if min(cand) < floor or cand[-1] < 1:  # every node given keeps a layer when there are enough
                    continue
                w = worst(cand)
                if w > best:
                    best, counts, moved = w, cand, True
        if not moved:
            break
    return [float(c) for c in counts]


def _ranges(devices: list[int], n_dev: int) -> list[tuple[int, int] | None]:
    out: list[tuple[int, int] | None] = [None] * n_dev
    for il, dev in enumerate(devices[:-1]):
        r = out[dev]
        out[dev] = (il, il) if r is None else (r[0], il)
    return out


def _max_ctx(model: ModelInfo, nodes: list[Node], o: PlanOptions, type_k: str, type_v: str, parallel: int) -> int:
    """Largest context (a multiple of 256, up to the training context) that fits every node."""
    limit = model.n_ctx_train or 1 << 20

    def ok(ctx: int) -> bool:
        s = _settings(o, ctx, type_k, type_v, parallel)
        split = list(o.tensor_split) if o.tensor_split else choose_split(model, nodes, o, s)
        return _fits(model, nodes, o, _allocate(model, len(nodes), split, s))

    lo, hi = 0, pad(limit, 256) // 256
    if not ok(256 * max(parallel, 1)):
        return 0
    lo = max(parallel, 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid * 256):
            lo = mid
        else:
            hi = mid - 1
    return min(lo * 256, limit)


#: how the planner's note asks for a bandwidth, in --node syntax; a spec's plan says it in keys
BANDWIDTH_HINT_CLI = "give device= or bw="
BANDWIDTH_HINT_SPEC = 'set device_kind (e.g. "gb10") or bandwidth_gbps on those workers (or [head]) in the spec'


def _decode(
    model: ModelInfo, nodes: list[Node], a: _Alloc, o: PlanOptions
) -> tuple[float | None, float | None, int, float | None, list[str]]:
    notes: list[str] = []
    per_dev = [0] * len(nodes)
    for layer, dev in zip(model.layers, a.devices):
        dense = layer.weights_bytes - layer.expert_bytes
        routed = layer.expert_bytes * (model.n_expert_used / model.n_expert) if model.n_expert else 0
        per_dev[dev] += int(dense + routed)
    per_dev[a.devices[-1]] += sum(model.output_tensor_bytes)
    active = [i for i, b in enumerate(per_dev) if b]
    hops = max(0, len(active) - 1)
    hop_s: float | None = None
    if o.link_gbps or o.link_latency_us:
        per_hop = (o.link_latency_us or 0) * 1e-6
        if o.link_gbps:
            per_hop += model.n_embd * 4 / (o.link_gbps * 1e9 / 8)
        hop_s = per_hop
    missing = [
        nodes[i].name + (f" (device {nodes[i].device!r} is not in the bandwidth table)" if nodes[i].device else "")
        for i in active
        if nodes[i].bandwidth is None
    ]
    if missing:
        notes.append(f"no memory bandwidth for {', '.join(missing)}: {BANDWIDTH_HINT_CLI} to get a decode bound")
        return None, None, sum(per_dev), hop_s, notes
    bw = [(nodes[i].bandwidth or 1.0) * 1e9 for i in range(len(nodes))]
    t = sum(per_dev[i] / bw[i] for i in active)
    t_kv = sum(a.kv[i] / bw[i] for i in active)
    link = hops * (hop_s or 0.0)
    return 1.0 / (t + link), 1.0 / (t + t_kv + link), sum(per_dev), hop_s, notes


def _check_options(nodes: list[Node], o: PlanOptions) -> None:
    """A one-line UsageError for nodes or options that cannot be planned."""
    if not nodes:
        raise UsageError("no nodes: give at least one --node NAME=GIB")
    names = [n.name for n in nodes]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"--node {', '.join(twice)} given more than once; give each device its own name")
    if o.parallel < 1:
        raise UsageError("--parallel must be at least 1")
    if o.ubatch < 1:
        raise UsageError("--ubatch must be at least 1")
    if o.ctx is not None and o.ctx < 0:
        raise UsageError(f"--ctx {o.ctx}: give a number of tokens, or 0 for the model's training context")
    if o.margin_bytes < 0:
        raise UsageError("--margin must be 0 or more GiB")
    if o.tensor_split is not None and len(o.tensor_split) != len(nodes):
        raise UsageError(f"--tensor-split has {len(o.tensor_split)} entries for {len(nodes)} nodes; give one per node")


def _node_plans(nodes: list[Node], a: _Alloc, o: PlanOptions, host_weights: int) -> list[NodePlan]:
    """Each node's layers and bytes (weights, KV, compute; the host's share on ``o.host_node``)."""
    ranges = _ranges(a.devices, len(nodes))
    plans = []
    for i, node in enumerate(nodes):
        host = host_weights + a.host_compute if o.host_node == i else 0
        plans.append(
            NodePlan(
                node.name,
                node.memory_bytes,
                ranges[i],
                a.devices[-1] == i,
                a.weights[i],
                a.kv[i],
                a.compute[i],
                host,
                node.bandwidth,
            )
        )
    return plans


def _plan_warnings(model: ModelInfo, plans: list[NodePlan], o: PlanOptions, ctx: int) -> list[str]:
    """Nodes short of memory or under the margin, a slot's context past the training context,
    and the architecture's own caveats."""
    warnings: list[str] = []
    for n in plans:
        if n.headroom_bytes < 0:
            warnings.append(
                f"{n.name}: needs {n.total_bytes / GIB:.2f} GiB but has {n.memory_bytes / GIB:.2f} GiB "
                f"({-n.headroom_bytes / GIB:.2f} GiB short)"
            )
        elif n.headroom_bytes < o.margin_bytes:
            warnings.append(
                f"{n.name}: headroom {n.headroom_bytes / GIB:.2f} GiB is under the "
                f"{o.margin_bytes / GIB:.2f} GiB margin"
            )
    per_slot = ctx if o.unified else ctx // o.parallel
    if model.n_ctx_train and per_slot > model.n_ctx_train:
        warnings.append(
            f"context per slot {per_slot:,} is above the model's training context "
            f"{model.n_ctx_train:,} (llama.cpp warns too: quality may drop past it)"
        )
    warnings += msa_warnings(model.architecture, flash_attn=o.flash_attn, kv_unified=o.unified, parallel=o.parallel)
    return warnings


def _max_ctx_table(model: ModelInfo, nodes: list[Node], o: PlanOptions) -> dict[str, dict[str, Any]]:
    """Per KV cache type, the largest context that fits (and its KV bytes)."""
    max_ctx: dict[str, dict[str, Any]] = {}
    for t in MAX_CTX_TYPES:
        if not o.flash_attn and t != "f16":
            max_ctx[t] = {"ctx": None, "reason": "a quantized V cache needs flash attention"}
            continue
        c = _max_ctx(model, nodes, o, t, t, o.parallel)
        max_ctx[t] = {
            "ctx": c,
            "limited_by_training_context": bool(model.n_ctx_train and c >= model.n_ctx_train),
            "kv_bytes_at_max": sum(layer_kv_bytes(model, _settings(o, c, t, t))) if c else 0,
        }
    return max_ctx


def _parallel_table(model: ModelInfo, nodes: list[Node], o: PlanOptions) -> list[dict[str, Any]]:
    """Per ``--parallel`` step, the largest total context that fits and each slot's share."""
    par = []
    for p in PARALLEL_STEPS:
        c = _max_ctx(model, nodes, replace(o, parallel=p), o.cache_type_k, o.cache_type_v, p)
        par.append({"parallel": p, "max_ctx": c, "ctx_per_slot": (c // p) // 256 * 256})
    return par


def make_plan(model: ModelInfo, nodes: list[Node], options: PlanOptions | None = None) -> Plan:
    """Plan ``model`` over ``nodes`` (devices in llama.cpp's order)."""
    o = options or PlanOptions()
    _check_options(nodes, o)
    ctx = o.ctx if o.ctx else (model.n_ctx_train or 4096)
    s = _settings(o, ctx)
    split = list(o.tensor_split) if o.tensor_split else choose_split(model, nodes, o, s)
    a = _allocate(model, len(nodes), split, s)
    hb = host_bytes(model)
    plans = _node_plans(nodes, a, o, hb)
    warnings = _plan_warnings(model, plans, o, ctx)
    kvpt = {f"{t}/{t}": kv_bytes_per_token(model, t, t) for t in MAX_CTX_TYPES}
    kvpt.setdefault(f"{o.cache_type_k}/{o.cache_type_v}", kv_bytes_per_token(model, o.cache_type_k, o.cache_type_v))
    max_ctx = _max_ctx_table(model, nodes, o)
    par = _parallel_table(model, nodes, o)
    tps, tps_full, bpt, hop_s, dnotes = _decode(model, nodes, a, o)
    estimated = list(model.estimated) + a.notes + dnotes
    return Plan(
        model=model,
        options=o,
        ctx=pad(ctx, 256),
        nodes=plans,
        host_weights_bytes=hb,
        host_compute_bytes=a.host_compute,
        tensor_split=split,
        kv_bytes_per_token=kvpt,
        max_ctx=max_ctx,
        parallel=par,
        decode_tps_upper_bound=tps,
        decode_tps_upper_bound_full_ctx=tps_full,
        bytes_per_token=bpt,
        hop_seconds=hop_s,
        warnings=warnings,
        estimated=estimated,
        speculation=speculation_support(model),
    )
