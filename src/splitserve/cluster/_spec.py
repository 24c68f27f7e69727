"""The cluster spec: a TOML file validated with pydantic.

Example::

    name = "m3"
    model = "~/models/MiniMax-M3-UD-IQ4_XS-00001-of-00006.gguf"
    engine = "default"            # an engine key, prefix or folder; "default" = newest cached

    [head]
    host = "local"
    devices = []                  # the head's own offload devices (CUDA0, ...); none on a CPU build

    [[workers]]
    name = "w1"
    host = "local"                # "local", or over SSH: "user@box2" or an ~/.ssh/config alias
    bind = "127.0.0.1"            # the address the RPC server listens on (the private link's)
    port = 50052
    devices = []                  # e.g. ["CUDA0"]; empty = all of the worker's devices

    [server]
    host = "127.0.0.1"
    port = 8080
    ctx_size = 8192
    parallel = 1
    flash_attn = "on"
    cache_type_k = "q8_0"
    cache_type_v = "q8_0"
    extra_args = ["--jinja"]
    speculation = "ngram-mod"     # --spec-type (or a list); spec_* keys: its parameters

    [gateway]                     # splitserve's OpenAI-compatible gateway in front of llama-server
    enabled = true
    host = "127.0.0.1"            # beyond loopback needs api_key or keys_file
    port = 8000
    model_format = "minimax-m3"   # default: detected from the chat template
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .._errors import SpecError, SplitserveError
from ._gateway_settings import GatewaySettings
from ._gateway_settings import bind_address as _bind_address
from ._spec_engines import ENGINE_BACKENDS, SglangSpec, VllmSpec, check_engine_tables

HOST_RE = r"^[A-Za-z0-9_.@:%\[\]-]{1,255}$"
LOCAL_HOSTS = ("local", "localhost", "127.0.0.1")

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
TOPOLOGIES = ("auto", "split", "replicas")

Port = Annotated[int, Field(ge=1, le=65535)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class HeadSpec(_Strict):
    """The node that runs llama-server."""

    host: str = "local"
    """Where the head runs: ``local`` (this machine)."""
    devices: list[str] = Field(default_factory=list)
    """The head's own offload devices as llama.cpp names them (``CUDA0``); none on a CPU build."""
    engine: str | None = None
    """This node's engine (key or folder) when it differs from the cluster's."""
    memory_gib: Annotated[float, Field(gt=0)] | list[Annotated[float, Field(gt=0)]] | None = None
    """Memory the node offers the model, GiB (one number, or one per device): lets `up` refuse a
    spec that will not fit and fill in ``server.tensor_split``."""
    device_kind: str | None = None
    """The device kind for the planner's bandwidth table (``h200``, ``gb10``, ...)."""
    bandwidth_gbps: Annotated[float, Field(gt=0)] | None = None
    """Memory bandwidth override for the planner's decode bound, GB/s."""


class WorkerSpec(_Strict):
    """One ggml-rpc-server."""

    name: Annotated[str, Field(pattern=NAME_RE)]
    host: Annotated[str, Field(pattern=HOST_RE)] = "local"
    """``local``, or an SSH destination: ``user@box2``, ``box2`` or an alias from ``~/.ssh/config``."""
    bind: str = "127.0.0.1"
    """The address the RPC server listens on: the private link's address, never a wildcard by default."""
    port: Port = 50052
    devices: list[str] = Field(default_factory=list)
    """Devices this worker offers (``-d``), e.g. ``["CUDA0"]``; empty = all of them."""
    threads: Annotated[int, Field(ge=1)] | None = None
    cache: bool = True
    """Start the RPC server with its local tensor cache (``-c``): second loads are fast."""
    model: str | None = None
    """The model's path on this worker's own disk (any shard of a split GGUF; ``~`` is that node's
    home). With ``cache``, `up` fills the worker's ``-c`` cache from it before starting the worker,
    so the head's first load sends hashes instead of tensor bytes. Unset: the head's ``model`` path,
    when that file is on this node too."""
    engine: str | None = None
    """This node's engine when it differs from the cluster's: an engine key, or a folder. For a
    remote node a folder is a path *on that node* holding its own build's ``ggml-rpc-server``
    (for boxes that build their own, e.g. aarch64); then nothing is copied."""
    memory_gib: Annotated[float, Field(gt=0)] | list[Annotated[float, Field(gt=0)]] | None = None
    """Memory the node offers the model, GiB (one number, or one per device): lets `up` refuse a
    spec that will not fit and fill in ``server.tensor_split``."""
    device_kind: str | None = None
    """The device kind for the planner's bandwidth table (``h200``, ``gb10``, ...)."""
    bandwidth_gbps: Annotated[float, Field(gt=0)] | None = None
    """Memory bandwidth override for the planner's decode bound, GB/s."""
    workdir: str = "~/.cache/splitserve"
    """splitserve's folder on a remote node: copied engines (``engines/``) and logs (``clusters/``)."""
    env: dict[str, str] = Field(default_factory=dict)

    @property
    def remote(self) -> bool:
        return not is_local_host(self.host)

    @field_validator("bind")
    @classmethod
    def _bind_is_address(cls, value: str) -> str:
        return _bind_address(value, "the interface the RPC server listens on")


class ServerSpec(_Strict):
    """llama-server's options."""

    host: str = "127.0.0.1"
    port: Port = 8080
    ctx_size: Annotated[int, Field(ge=0)] = 4096
    parallel: Annotated[int, Field(ge=1)] = 1
    batch: Annotated[int, Field(ge=1)] | None = None
    ubatch: Annotated[int, Field(ge=1)] | None = None
    cache_type_k: Literal[CACHE_TYPES] | None = None  # type: ignore[valid-type]
    cache_type_v: Literal[CACHE_TYPES] | None = None  # type: ignore[valid-type]
    flash_attn: Literal["on", "off", "auto"] | None = None
    split_mode: Literal["layer", "row", "none"] = "layer"
    tensor_split: list[Annotated[float, Field(ge=0)]] | None = None
    n_gpu_layers: int = 999
    threads: Annotated[int, Field(ge=1)] | None = None
    chat_template_file: Path | None = None
    api_key: str | None = None
    extra_args: list[str] = Field(default_factory=list)
    """Passed to llama-server untouched, after splitserve's own flags."""
    env: dict[str, str] = Field(default_factory=dict)

    # -- speculative decoding (``--spec-*``; see docs/cluster.md "Speculative decoding") --------
    speculation: list[str] = Field(default_factory=list)
    """``--spec-type``: one of llama.cpp's types (``ngram-mod``, ``ngram-simple``, ``draft-mtp``, ...)
    or a list of them; ``"none"`` or absent: off.  Given as a string or a list; kept as a list."""
    draft_model: Path | None = None
    """``--spec-draft-model``: the draft GGUF for draft-simple / draft-eagle3 / draft-dflash /
    draft-dspark (or an MTP sidecar for draft-mtp); on the head, like ``model``."""
    spec_draft_n_max: Annotated[int, Field(ge=0)] | None = None
    """``--spec-draft-n-max``: tokens to draft per step (llama.cpp: 3)."""
    spec_draft_n_min: Annotated[int, Field(ge=0)] | None = None
    """``--spec-draft-n-min`` (llama.cpp: 0)."""
    spec_draft_p_min: Annotated[float, Field(ge=0, le=1)] | None = None
    """``--spec-draft-p-min``: stop drafting below this probability (llama.cpp: 0.0)."""
    spec_draft_p_split: Annotated[float, Field(ge=0, le=1)] | None = None
    """``--spec-draft-p-split`` (llama.cpp: 0.10)."""
    spec_draft_sampling: Literal["greedy", "probabilistic"] | None = None
    """``--spec-draft-sampling`` (llama.cpp: greedy)."""
    spec_draft_ngl: int | Literal["auto", "all"] | None = None
    """``--spec-draft-ngl``: draft layers to offload (llama.cpp: auto)."""
    spec_draft_device: list[str] | None = None
    """``--spec-draft-device``: where the draft model goes (llama.cpp: follows ``--device``)."""
    spec_ngram_simple_size_n: Annotated[int, Field(ge=1, le=1024)] | None = None
    """``--spec-ngram-simple-size-n``: lookup n-gram length (llama.cpp: 12)."""
    spec_ngram_simple_size_m: Annotated[int, Field(ge=1, le=1024)] | None = None
    """``--spec-ngram-simple-size-m``: drafted m-gram length (llama.cpp: 48)."""
    spec_ngram_simple_min_hits: Annotated[int, Field(ge=1)] | None = None
    """``--spec-ngram-simple-min-hits`` (llama.cpp: 1)."""
    spec_ngram_map_k_size_n: Annotated[int, Field(ge=1, le=1024)] | None = None
    """``--spec-ngram-map-k-size-n`` (llama.cpp: 12)."""
    spec_ngram_map_k_size_m: Annotated[int, Field(ge=1, le=1024)] | None = None
    """``--spec-ngram-map-k-size-m`` (llama.cpp: 48)."""
    spec_ngram_map_k_min_hits: Annotated[int, Field(ge=1)] | None = None
    """``--spec-ngram-map-k-min-hits`` (llama.cpp: 1)."""
    spec_ngram_map_k4v_size_n: Annotated[int, Field(ge=1, le=1024)] | None = None
    """``--spec-ngram-map-k4v-size-n`` (llama.cpp: 12)."""
    spec_ngram_map_k4v_size_m: Annotated[int, Field(ge=1, le=1024)] | None = None
    """``--spec-ngram-map-k4v-size-m`` (llama.cpp: 48)."""
    spec_ngram_map_k4v_min_hits: Annotated[int, Field(ge=1)] | None = None
    """``--spec-ngram-map-k4v-min-hits`` (llama.cpp: 1)."""
    spec_ngram_mod_n_match: Annotated[int, Field(ge=1, le=1024)] | None = None
    """``--spec-ngram-mod-n-match``: lookup length (llama.cpp: 24)."""
    spec_ngram_mod_n_min: Annotated[int, Field(ge=0, le=1024)] | None = None
    """``--spec-ngram-mod-n-min`` (llama.cpp: 48)."""
    spec_ngram_mod_n_max: Annotated[int, Field(ge=0, le=1024)] | None = None
    """``--spec-ngram-mod-n-max`` (llama.cpp: 64)."""
    spec_synth_len: Annotated[float, Field(ge=1)] | None = None
    """``--spec-synth-len``: synthetic mean acceptance length, BENCHMARKING ONLY (output invalid)."""
    spec_synth_rates: list[Annotated[float, Field(ge=0, le=1)]] | None = None
    """``--spec-synth-rates``: synthetic per-position acceptance, BENCHMARKING ONLY (output invalid)."""

    @field_validator("speculation", mode="before")
    @classmethod
    def _spec_types(cls, value: Any) -> list[str]:
        from ..plan import parse_types

        return parse_types(value)

    @field_validator("draft_model")
    @classmethod
    def _draft_needed(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        from ..plan import DRAFT_MODEL_TYPES

        need = [t for t in info.data.get("speculation") or [] if t in DRAFT_MODEL_TYPES]
        if need and value is None:
            raise ValueError(
                f"required with speculation = {need[0]!r}: a draft GGUF whose vocabulary matches the "
                "model's; or use a draftless type: ngram-mod, ngram-simple, ngram-map-k, "
                "ngram-map-k4v, ngram-cache"
            )
        return value

    @model_validator(mode="after")
    def _spec_check(self) -> ServerSpec:
        if self.spec_synth_len is not None and self.spec_synth_rates is not None:
            raise ValueError("spec_synth_len and spec_synth_rates are mutually exclusive (llama.cpp takes one)")
        if self.spec_synth_rates is not None and any(
            b > a for a, b in zip(self.spec_synth_rates, self.spec_synth_rates[1:])
        ):
            raise ValueError(
                "spec_synth_rates must not increase: entry i is the chance that the first i+1 "
                "drafted tokens are all accepted"
            )
        return self


DEFAULT_GATEWAY_PORT = 8000


class GatewaySpec(GatewaySettings):
    """splitserve's gateway (``splitserve serve``), started by `up` in front of llama-server: the
    gateway's settings (:class:`GatewaySettings`, the same fields as ``serve``'s flags) and these."""

    enabled: bool = True
    """Start the gateway; false serves llama-server's own endpoint only."""
    port: int | None = None  # type: ignore[assignment]  # the spec may leave it to `up`
    """Default: 8000, or a free port when 8000 is taken (`up` says which)."""
    chat_template_file: Path | None = None
    """The template the gateway renders; default: server.chat_template_file, else the GGUF's."""
    extra_args: list[str] = Field(default_factory=list)
    """Passed to ``splitserve serve`` untouched."""


class SshSpec(_Strict):
    """How the system OpenSSH client reaches remote nodes (``~/.ssh/config`` applies as usual)."""

    config: Path | None = None
    """An ssh config file to use instead of ``~/.ssh/config`` (``ssh -F``)."""
    options: list[str] = Field(default_factory=list)
    """Extra ``-o`` options, e.g. ``["ProxyJump=bastion"]``."""
    connect_timeout: Annotated[float, Field(gt=0)] = 10.0
    """Seconds for a connection to come up (``ConnectTimeout``)."""


class SuperviseSpec(_Strict):
    """How `up --foreground` / `splitserve run` restart a cluster whose process died."""

    backoff_initial: Annotated[float, Field(ge=0)] = 1.0
    """Seconds before the first restart; doubled after each restart that follows quickly."""
    backoff_max: Annotated[float, Field(gt=0)] = 60.0
    """The cap on the wait between restarts."""
    stable_seconds: Annotated[float, Field(gt=0)] = 300.0
    """A cluster that served this long resets the backoff."""
    max_restarts: Annotated[int, Field(ge=0)] | None = None
    """Give up after this many restarts in a row (none: never give up)."""
    poll_seconds: Annotated[float, Field(gt=0)] = 0.5
    """How often every process is checked."""


class ClusterSpec(_Strict):
    """A whole cluster: the model, the head, the workers and the server options."""

    name: Annotated[str, Field(pattern=NAME_RE)] = "default"
    model: Path
    engine: str = "default"
    head: HeadSpec = Field(default_factory=HeadSpec)
    workers: list[WorkerSpec] = Field(default_factory=list)
    """llama.cpp: the RPC servers (one at least); vLLM / SGLang: the other nodes, ranks 1.. in order."""
    backend: Literal["llama.cpp", "vllm", "sglang"] = "llama.cpp"
    """What serves the model: llama.cpp over RPC, or vLLM / SGLang (settings in their own table)."""
    vllm: VllmSpec | None = None
    """``vllm serve`` on every node (backend = "vllm"); see ``_spec_engines``."""
    sglang: SglangSpec | None = None
    """``sglang.launch_server`` on every node (backend = "sglang")."""
    server: ServerSpec = Field(default_factory=ServerSpec)
    gateway: GatewaySpec = Field(default_factory=lambda: GatewaySpec())
    allow_public_rpc: bool = False
    """Allow RPC workers to bind to a wildcard or public address (the protocol has no authentication)."""
    state_dir: Path | None = None
    """Where pids and logs go (default: ~/.local/state/splitserve/<name>)."""
    load_timeout: Annotated[float, Field(gt=0)] = 1800.0
    """Seconds to wait for the head to load the model."""
    ssh: SshSpec = Field(default_factory=lambda: SshSpec())
    supervise: SuperviseSpec = Field(default_factory=lambda: SuperviseSpec())
    drop_caches: bool = False
    """Drop each node's page cache before starting (needs root or passwordless sudo there)."""
    topology: str = "auto"
    """``auto`` (the planner chooses), ``split`` (one llama-server over every node) or ``replicas``
    (one llama-server per group of ``replica_nodes`` nodes behind the gateway); ``replicas:K`` is
    short for ``replicas`` with ``replica_nodes = K``. The nodes are the head's machine and each
    worker's host, in that order. With ``backend = "vllm"`` / ``"sglang"``: ``replicas`` runs one
    engine server per group of K nodes (the head, then each worker, in order; K must divide their
    number), and ``auto`` is one server over every node."""
    replica_nodes: Annotated[int, Field(ge=1)] | None = None
    """Nodes per replica (``topology = "replicas"`` or ``auto``); unset: the smallest that fits."""

    # Where the spec was read from (not a TOML key).
    source_file: Path | None = Field(default=None, exclude=True)

    @property
    def client_api_key(self) -> str | None:
        """The key a client of the cluster's endpoint sends: the gateway's, or llama-server's."""
        return self.gateway.api_key if self.gateway.enabled else self.server.api_key

    @model_validator(mode="before")
    @classmethod
    def _engine_model(cls, data: Any) -> Any:
        # vLLM / SGLang take their model from their table; ``model`` (the GGUF) stays llama.cpp's.
        backend = data.get("backend") if isinstance(data, dict) else None
        if backend is not None and backend not in ("llama.cpp", *ENGINE_BACKENDS):
            raise ValueError(f"backend: {backend!r} is not one of: llama.cpp, {', '.join(ENGINE_BACKENDS)}")
        if backend in ENGINE_BACKENDS:
            if "model" in data:
                raise ValueError(
                    f'model: the GGUF of the llama.cpp backend; with backend = "{backend}" the model is {backend}.model'
                )
            data = {**data, "model": f"<{backend}.model>"}
        return data

    @field_validator("topology")
    @classmethod
    def _known_topology(cls, value: str) -> str:
        kind, _, size = value.partition(":")
        if kind not in TOPOLOGIES or (size and (kind != "replicas" or not size.isdigit() or int(size) < 1)):
            raise ValueError(
                f"{value!r} is not one of: auto, split, replicas, replicas:K (K nodes per replica, K >= 1)"
            )
        return value

    @property
    def topology_asked(self) -> tuple[str, int | None]:
        """(``auto`` / ``split`` / ``replicas``, nodes per replica or None) from ``topology`` and
        ``replica_nodes``."""
        kind, _, size = self.topology.partition(":")
        return kind, int(size) if size else self.replica_nodes

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        check_engine_tables(self)
        kind, _, size = self.topology.partition(":")
        if size and self.replica_nodes is not None and int(size) != self.replica_nodes:
            raise ValueError(
                f"topology = {self.topology!r} and replica_nodes = {self.replica_nodes} disagree: give one of them"
            )
        if self.replica_nodes is not None and kind == "split":
            raise ValueError('replica_nodes: only with topology = "replicas" or "auto"')
        if self.backend == "llama.cpp" and not self.workers:
            raise ValueError(
                "workers: required key is missing"
                if "workers" not in self.model_fields_set
                else "workers: at least one [[workers]] table (an RPC server) is required"
            )
        if not is_local_host(self.head.host):
            raise ValueError(
                f"head.host = {self.head.host!r}: the head runs where splitserve runs; "
                "run `splitserve up` on the head node (workers may be remote)"
            )
        names = [w.name for w in self.workers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"worker names must be unique; repeated: {', '.join(dupes)}")
        endpoints = [(w.host, w.bind, w.port) for w in self.workers]
        clash = sorted({f"{b}:{p}" for (h, b, p) in endpoints if endpoints.count((h, b, p)) > 1})
        if clash:
            raise ValueError(f"two workers listen on the same address: {', '.join(clash)}")
        if self.server.tensor_split is not None:
            expected = device_count(self)
            if len(self.server.tensor_split) != expected:
                raise ValueError(
                    f"server.tensor_split has {len(self.server.tensor_split)} entries; expected {expected}, "
                    "one per device in llama.cpp's order: each worker's devices (a worker without `devices` "
                    "counts as one), then the head's devices"
                )
        if self.gateway.enabled and self.gateway.port is not None:
            if (self.gateway.host, self.gateway.port) == (self.server.host, self.server.port) or (
                self.gateway.port == self.server.port and "0.0.0.0" in (self.gateway.host, self.server.host)
            ):
                raise ValueError(
                    f"gateway.port = {self.gateway.port} is also server.port: give the gateway "
                    "and llama-server different ports"
                )
            local = [(w.bind, w.port) for w in self.workers if not w.remote]
            if any(p == self.gateway.port for (_b, p) in local):
                raise ValueError(f"gateway.port = {self.gateway.port} is also a local worker's port")
        # A wildcard or public worker bind is refused by `up` (check_binds) and shown by
        # `preflight` as a failing row, not at load: preflight must be able to report it.
        return self


def is_local_host(host: str) -> bool:
    """Whether a spec's ``host`` means this machine."""
    return host in LOCAL_HOSTS


def device_count(spec: ClusterSpec) -> int:
    """Devices llama-server will see: RPC devices first (worker by worker), then the head's own."""
    return sum(len(w.devices) or 1 for w in spec.workers) + len(spec.head.devices)


def unsafe_bind(address: str) -> str | None:
    """Why binding an RPC server to ``address`` is unsafe, or None."""
    if address == "localhost":
        return None
    ip = ipaddress.ip_address(address)
    if ip.is_unspecified:
        return "a wildcard address (every interface)"
    if ip.is_loopback or ip.is_private or ip.is_link_local:
        return None
    return "a public address"


def _loc(loc: tuple[Any, ...], data: dict[str, Any]) -> str:
    """``workers[w2].port`` style key paths from a pydantic error location."""
    out = ""
    node: Any = data
    for part in loc:
        if isinstance(part, int):
            name = None
            if isinstance(node, list) and 0 <= part < len(node) and isinstance(node[part], dict):
                name = node[part].get("name")
            out += f"[{name}]" if name else f"[{part}]"
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        else:
            out += ("." if out else "") + str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the table holding ``loc``'s last key accepts (``workers[w1].prot`` -> a worker's)."""
    model: Any = ClusterSpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return []
        ann = field.annotation
        for arg in (ann, *getattr(ann, "__args__", ())):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                model = arg
                break
        else:
            return []
    return sorted(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _table(loc: tuple[Any, ...]) -> str:
    """Where ``loc``'s last key sits: ``in [[workers]]``, ``in [server]``, ``at the top level``."""
    names = [str(p) for p in loc[:-1] if not isinstance(p, int)]
    if not names:
        return "at the top level"
    array = len(loc) > 1 and isinstance(loc[-2], int)
    return f"in [[{'.'.join(names)}]]" if array else f"in [{'.'.join(names)}]"


def _message(err: Mapping[str, Any]) -> str:
    msg = str(err.get("msg", "invalid"))
    msg = re.sub(r"^Value error, ", "", msg)
    if err.get("type") == "extra_forbidden":
        loc = tuple(err.get("loc", ()))
        allowed = [k for k in _allowed_keys(loc) if k != "source_file"]
        table = _table(loc)
        given = str(loc[-1]) if loc else ""
        prefixed = [k for k in allowed if k.startswith(given)] if len(given) >= 3 else []
        close = sorted(prefixed, key=lambda k: -difflib.SequenceMatcher(None, given, k).ratio())[:2]
        close = close or difflib.get_close_matches(given, allowed, n=2, cutoff=0.6)
        if close:
            return f"unknown key {table}; did you mean {' or '.join(close)}?"
        return f"unknown key {table}; allowed: {', '.join(allowed)}" if allowed else f"unknown key {table}"
    if err.get("type") == "missing":
        return "required key is missing"
    return msg


def parse_spec(data: dict[str, Any], source: Path | None = None) -> ClusterSpec:
    """Validate a spec given as a dict; relative paths resolve against the file's folder."""
    where = str(source) if source else "<spec>"
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = _loc(tuple(first.get("loc", ())), data)
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        head = f"{where}: {key}: " if first.get("loc") else f"{where}: "
        raise SpecError(f"{head}{_message(first)}{more}") from None
    base = source.parent if source else Path.cwd()
    spec.model = _resolve(spec.model, base)
    if spec.model.is_dir():  # a folder `splitserve fetch` wrote: its one model (first shard)
        from ..model import model_in_dir

        try:
            spec.model = model_in_dir(spec.model)
        except SplitserveError as exc:
            raise SpecError(f"{where}: model: {exc}") from None
    if spec.server.chat_template_file is not None:
        spec.server.chat_template_file = _resolve(spec.server.chat_template_file, base)
    if spec.server.draft_model is not None:
        spec.server.draft_model = _resolve(spec.server.draft_model, base)
    for key in ("chat_template_file", "keys_file"):
        value = getattr(spec.gateway, key)
        if value is not None:
            setattr(spec.gateway, key, _resolve(value, base))
    if spec.state_dir is not None:
        spec.state_dir = _resolve(spec.state_dir, base)
    if spec.ssh.config is not None:
        spec.ssh.config = _resolve(spec.ssh.config, base)
    spec.source_file = source
    return spec


def _resolve(path: Path, base: Path) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster spec file; every mistake is a :class:`SpecError`
    naming the file, the key and what is allowed."""
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(f"{path}: no such cluster spec file") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    return parse_spec(data, path.resolve())


def draft_in_use(server: ServerSpec) -> bool:
    """Whether ``--spec-draft-model`` is passed: a draft model and a draft-* type that reads it."""
    return server.draft_model is not None and any(t.startswith("draft-") for t in server.speculation)


def check_binds(spec: ClusterSpec) -> None:
    """No RPC worker listens on a wildcard or public address unless the spec allows it (the
    protocol has no authentication); `up` refuses such a spec before starting anything."""
    if spec.allow_public_rpc:
        return
    where = str(spec.source_file or "<spec>")
    for w in spec.workers:
        problem = unsafe_bind(w.bind)
        if problem:
            raise SpecError(
                f"{where}: workers[{w.name}].bind = {w.bind!r} is {problem}; llama.cpp's RPC protocol "
                "has no authentication: bind to the private link's address, or set "
                "allow_public_rpc = true"
            )


def server_has_key(server: ServerSpec) -> bool:
    """Whether llama-server will ask clients for a key: ``server.api_key``, or the key flags or
    variable passed through ``extra_args`` / ``env``."""
    flags = ("--api-key", "--api-key-file")
    return (
        bool(server.api_key)
        or bool(server.env.get("LLAMA_API_KEY"))
        or any(a in flags or a.startswith(tuple(f + "=" for f in flags)) for a in server.extra_args)
    )


def server_auth_problem(spec: ClusterSpec) -> str | None:
    """Why llama-server's address is refused, or None: beyond loopback (a wildcard, a LAN or
    public address, a host name) it must have a key, like the gateway (``gateway.api_key``) and
    unlike nothing else: its endpoints run generations and expose the slots' prompts."""
    from .._net import is_loopback

    host = spec.server.host
    if is_loopback(host) or host.endswith(".sock") or server_has_key(spec.server):
        return None
    return (
        f"server.host = {host!r} is beyond loopback and llama-server has no key (server.api_key): set "
        'server.api_key (the gateway sends it to llama-server), or server.host = "127.0.0.1" (the gateway '
        "reaches it on loopback)"
    )


def check_server_auth(spec: ClusterSpec) -> None:
    """llama-server beyond loopback needs a key; `up` refuses before starting anything."""
    problem = server_auth_problem(spec)
    if problem:
        raise SpecError(f"{spec.source_file or '<spec>'}: {problem}")


def check_files(spec: ClusterSpec) -> None:
    """The files a launch needs exist (checked at `up`, not at load, so `--dry-run` works anywhere)."""
    where = str(spec.source_file or "<spec>")
    if not spec.model.is_file():
        raise SpecError(f"{where}: model: {spec.model} does not exist")
    tf = spec.server.chat_template_file
    if tf is not None and not tf.is_file():
        raise SpecError(f"{where}: server.chat_template_file: {tf} does not exist")
    dm = spec.server.draft_model
    if dm is not None and draft_in_use(spec.server) and not dm.is_file():
        raise SpecError(
            f"{where}: server.draft_model: {dm} does not exist (the draft GGUF is read on the head, like model)"
        )
    if spec.gateway.enabled:
        for key in ("chat_template_file", "keys_file"):
            path = getattr(spec.gateway, key)
            if path is not None and not path.is_file():
                raise SpecError(f"{where}: gateway.{key}: {path} does not exist")
