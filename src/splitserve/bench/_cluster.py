"""Everything the bench needs from the cluster layer, in one place.

``-c cluster.toml`` means: the endpoint and engine of a cluster that `up`
started (:func:`cluster_target`); for a sweep, restarting the cluster with
changed server options through `up` itself (:class:`ClusterRestarter`); for
``bench engine``, the cluster's workers alone, because a ggml-rpc-server serves
one client at a time and llama-bench cannot share it with a running head
(:func:`~splitserve.cluster.workers_only`: a plan run by the cluster's executor, re-exported here).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._errors import UsageError
from ..cluster import (
    REAL_EDGES,
    ClusterSpec,
    Edges,
    Event,
    ServerSpec,
    cluster_state_dir,
    down,
    load_spec,
    read_state,
    require_state,
    resolve_engines,
    up,
    workers_only,
)
from ..engine import Engine, get_engine
from ._client import Target

# --set names -> ServerSpec fields.
SET_ALIASES = {
    "ctx": "ctx_size",
    "c": "ctx_size",
    "ctx_size": "ctx_size",
    "ubatch": "ubatch",
    "ub": "ubatch",
    "ubatch_size": "ubatch",
    "batch": "batch",
    "b": "batch",
    "batch_size": "batch",
    "parallel": "parallel",
    "np": "parallel",
    "fa": "flash_attn",
    "flash_attn": "flash_attn",
    "ctk": "cache_type_k",
    "cache_type_k": "cache_type_k",
    "ctv": "cache_type_v",
    "cache_type_v": "cache_type_v",
    "threads": "threads",
    "t": "threads",
    "split_mode": "split_mode",
    "sm": "split_mode",
    "ngl": "n_gpu_layers",
    "n_gpu_layers": "n_gpu_layers",
    "speculation": "speculation",
    "spec": "speculation",
    "spec_type": "speculation",
}
SET_SHOWN = (
    "ubatch",
    "batch",
    "ctx",
    "parallel",
    "fa",
    "ctk",
    "ctv",
    "threads",
    "split_mode",
    "ngl",
    "speculation",
    "spec_*",
)
NOT_SWEPT = {"host", "port", "api_key", "env", "extra_args", "chat_template_file", "draft_model"}
"""ServerSpec fields a sweep does not change (they are not speed settings)."""
SPEC_KEYS = ("topology", "replica_nodes")
"""Top-level spec keys a sweep may set besides the server options (``--set topology=split,replicas``
compares one split over every node with replicas behind the gateway, on the same nodes)."""


def server_field(name: str) -> str:
    """The ServerSpec field of a --set name: an alias, or any speed-relevant field by its own name
    (``spec_draft_n_max``, ``spec_ngram_mod_n_match``, ...)."""
    norm = name.strip().lower().replace("-", "_")
    key = SET_ALIASES.get(norm)
    if key is None and norm in ServerSpec.model_fields and norm not in NOT_SWEPT:
        key = norm
    if key is None:
        raise UsageError(f"--set {name}: unknown server option; use one of " + ", ".join(SET_SHOWN + SPEC_KEYS))
    return key


def spec_key(name: str) -> str | None:
    """The top-level spec key of a --set name (one of :data:`SPEC_KEYS`), None for a server option."""
    norm = name.strip().lower().replace("-", "_")
    return norm if norm in SPEC_KEYS else None


def set_value(field: str, value: Any) -> Any:
    """A --set value as the field takes it: ``speculation=ngram-simple+ngram-mod`` is a list of
    two types (``,`` separates sweep points, so ``+`` joins the types of one point)."""
    if field == "speculation" and isinstance(value, str):
        parts = [p.strip() for p in value.split("+") if p.strip()]
        return parts if len(parts) > 1 else value.strip()
    return value


def with_server(spec: ClusterSpec, values: dict[str, Any]) -> ClusterSpec:
    """A copy of ``spec`` with server options and top-level spec keys (:data:`SPEC_KEYS`) changed,
    validated like the spec file."""
    top = {str(spec_key(n)): v for n, v in values.items() if spec_key(n) is not None}
    data = spec.server.model_dump()
    for name, value in values.items():
        if spec_key(name) is not None:
            continue
        key = server_field(name)
        data[key] = set_value(key, value)
    try:
        server = ServerSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or ", ".join(values)
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise UsageError(f"--set {where}: {msg}") from None
    out = spec.model_copy(deep=True)
    out.server = server
    out.source_file = spec.source_file
    topology = top.get("topology")
    if isinstance(topology, str) and "replica_nodes" not in top and (topology == "split" or ":" in topology):
        out.replica_nodes = None  # the file's group size does not hold for this point's topology
    for key, value in top.items():
        setattr(out, str(key), value)  # all first: the checks across fields see the whole point
    for key, value in top.items():
        try:  # the field's own check and the spec's checks across fields, as when loaded
            type(out).__pydantic_validator__.validate_assignment(out, str(key), value)
        except ValidationError as exc:
            msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise UsageError(f"--set {key}={value}: {msg}") from None
    return out


def cluster_target(spec_path: Path, api: str = "chat") -> tuple[Target, dict[str, Any], ClusterSpec]:
    """The running cluster's endpoint as a target, plus its engine provenance."""
    spec = load_spec(spec_path)
    state = require_state(spec)
    target = Target(url=state.endpoint, api_key=spec.client_api_key, api=api)  # type: ignore[arg-type]
    return target, engine_provenance(spec, state.engine), spec


def engine_provenance(spec: ClusterSpec, key: str | None = None) -> dict[str, Any]:
    """The head engine's provenance: the spec's engine, else the key `up` recorded; {} if gone."""

    def from_spec() -> Engine:
        return resolve_engines(spec)["head"]

    def from_key() -> Engine:
        return get_engine(key)

    for pick in (from_spec, from_key):
        try:
            eng = pick()
        except Exception:  # noqa: BLE001 - an engine that is gone must not stop a bench
            continue
        return dict(eng.provenance) | {"bin_dir": str(eng.bin_dir)}
    return {}


def cluster_facts(spec: ClusterSpec) -> dict[str, Any]:
    """What a run records of the cluster: name, model, workers, server options, and the
    planner's decode upper bound when the spec gives it what it needs (memory, bandwidth)."""
    facts: dict[str, Any] = {
        "name": spec.name,
        "spec_file": str(spec.source_file) if spec.source_file else None,
        "model": str(spec.model),
        "workers": [f"{w.name}@{w.host}:{w.bind}:{w.port}" for w in spec.workers],
        "server": spec.server.model_dump(mode="json", exclude={"api_key"}),
        "topology": spec.topology,
        "replica_nodes": spec.replica_nodes,
        "gateway": spec.gateway.model_dump(mode="json", exclude={"api_key"}),
    }
    try:
        from ..cluster import plan_for_spec

        plan = plan_for_spec(spec)
        facts["decode_tps_upper_bound"] = plan.decode_tps_upper_bound
    except Exception:  # noqa: BLE001 - no memory sizes or bandwidth in the spec: no bound, not an error
        pass
    return facts


_CTX_LINE = re.compile(
    r"llama_context:\s+(n_seq_max|n_ctx|n_ctx_seq|n_batch|n_ubatch|flash_attn|kv_unified)"
    r"\s+=\s+(\S+)"
)


def effective_settings(log_text: str) -> dict[str, Any]:
    """What llama-server's context really got (``llama_context: n_ubatch = 512`` ... in its log)."""
    out: dict[str, Any] = {}
    for name, value in _CTX_LINE.findall(log_text):
        out[name] = int(value) if value.isdigit() else value
    return out


class ClusterRestarter:
    """Brings a cluster up once per sweep point with changed server options, via `up`."""

    def __init__(
        self,
        spec: ClusterSpec,
        engine: Engine | None = None,
        on_event: Callable[[Event], None] | None = None,
        ignore_eos: bool | None = None,
        api_key: str | None = None,
        edges: Edges = REAL_EDGES,
        preflight: bool = True,
    ) -> None:
        self.spec = spec
        self.edges = edges
        """The cluster layer's I/O (a :class:`~splitserve.cluster.FakeNetwork`'s in tests)."""
        self.preflight = preflight
        self.api_key = api_key
        """The key to send (`--api-key`), else the spec's own (a gateway with a keys file has none)."""
        self.ignore_eos = True if ignore_eos is None else ignore_eos
        self.engine = engine
        self.on_event = on_event
        self.was_running = read_state(cluster_state_dir(spec)) is not None
        self.current: ClusterSpec | None = None

    def start(self, values: dict[str, Any]) -> tuple[Target, dict[str, Any]]:
        point = with_server(self.spec, values)
        self.stop()
        state = up(point, engine=self.engine, on_event=self.on_event, preflight=self.preflight, edges=self.edges)
        self.current = point
        head = [p for p in state.processes if p.role == "server"]
        effective: dict[str, Any] = {}
        if head:
            effective = effective_settings(self.edges.node(head[0].host, point.ssh).read_log(Path(head[0].log)))
        facts = cluster_facts(point) | {
            "load_seconds": state.load_seconds,
            "engine": state.engine,
            "head_argv": head[0].argv if head else [],
            "effective": effective,
            "servers": len(head),  # llama-servers behind the endpoint: 1 for a split, N for N replicas
        }
        return (
            Target(url=state.endpoint, api_key=self.api_key or point.client_api_key, ignore_eos=self.ignore_eos),
            facts,
        )

    def stop(self) -> None:
        if self.current is not None:
            down(self.current, edges=self.edges)
            self.current = None
        else:
            down(self.spec, edges=self.edges)

    def finish(self) -> str:
        """Stop the last point; bring the original cluster back if it was running before."""
        self.stop()
        if self.was_running:
            up(self.spec, engine=self.engine, on_event=self.on_event, preflight=self.preflight, edges=self.edges)
            return "the cluster was restarted with its own settings"
        return "the cluster is down (it was not running before the sweep)"


__all__ = [
    "ClusterRestarter",
    "cluster_facts",
    "cluster_target",
    "effective_settings",
    "engine_provenance",
    "with_server",
    "workers_only",
]
