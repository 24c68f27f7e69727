"""``splitserve tune``'s search space: the axes (:class:`Axis`, :func:`parse_axes`,
:func:`default_axes`, their order by metric), the start point from the spec's own settings, grid
points and budgets, point labels and keys, and the planner's exclusion of points that cannot run
(:class:`PlannerCheck`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import ClusterError, SplitserveError, UsageError
from ._tune_metrics import Metric

# -- axes --------------------------------------------------------------------------------------

KV = "kv"
"""The axis that sets both cache types (``cache_type_k`` and ``cache_type_v``)."""

ORDERS = {
    "decode": ("speculation", "threads", KV, "cache_type_k", "cache_type_v", "ubatch", "batch"),
    "prefill": ("ubatch", "batch", "threads", KV, "cache_type_k", "cache_type_v", "speculation"),
}
ORDERS["ttft"] = ORDERS["prefill"]
ORDERS["e2e"] = ORDERS["decode"]
ORDERS["throughput"] = ORDERS["decode"]

UNSET = ("auto", "default")
"""``--set threads=auto``: leave the option out (llama.cpp's default)."""
INT_FIELDS = ("ubatch", "batch", "threads")
DEFAULT_UBATCH = (128, 256, 512, 1024, 2048)
DEFAULT_BATCH = (512, 1024, 2048, 4096)
DEFAULT_KV = ("f16", "q8_0")
DEFAULT_SPECULATION = ("none", "ngram-simple", "ngram-map-k", "ngram-mod")
LLAMA_DEFAULTS = {
    "ubatch": 512,
    "batch": 2048,
    "cache_type_k": "f16",
    "cache_type_v": "f16",
    KV: "f16",
    "speculation": "none",
}
"""llama-server's values for options a spec leaves out."""


@dataclass(frozen=True)
class Axis:
    name: str
    """A ServerSpec field (``ubatch``, ``threads``, ``speculation`` ...) or ``kv``."""
    values: tuple[Any, ...]

    @property
    def ordered(self) -> bool:
        """Numbers only: walked from the current value outwards (early stopping)."""
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)


def axis_name(name: str) -> str:
    from ._cluster import server_field

    norm = name.strip().lower().replace("-", "_")
    if norm in (KV, "cache_type", "cache", "ct"):
        return KV
    return server_field(name)


def norm_value(axis: str, value: Any) -> Any:
    """A value as the search compares it: speculation as ``a+b`` type names (``none`` for off),
    ``auto``/``default`` as None for the numeric options."""
    if axis == "speculation":
        from ..plan import parse_types

        text = "+".join(value) if isinstance(value, (list, tuple)) else str(value)
        try:
            types = parse_types(text.replace("+", ","))
        except ValueError as exc:
            raise UsageError(f"--set speculation={text}: {exc}") from None
        return "+".join(types) or "none"
    if axis in INT_FIELDS and isinstance(value, str) and value.strip().lower() in UNSET:
        return None
    return value


def server_values(point: dict[str, Any]) -> dict[str, Any]:
    """A point as ServerSpec fields (``kv`` sets both cache types)."""
    out: dict[str, Any] = {}
    for name, value in point.items():
        if name == KV:
            out["cache_type_k"] = value
            out["cache_type_v"] = value
        else:
            out[name] = value
    return out


def parse_axes(items: Sequence[str]) -> list[Axis]:
    """``["ubatch=128,512", "speculation=none,ngram-mod"]`` -> axes (values in the order given)."""
    from ._run import parse_set

    axes: list[Axis] = []
    for item in items:
        name, sep, _ = item.partition("=")
        if not sep:
            raise UsageError(f"--set {item!r}: expected NAME=V1,V2,... (e.g. ubatch=128,512)")
        combos = parse_set([item])
        raw = name.strip()
        key = axis_name(raw)
        if any(a.name == key for a in axes):
            raise UsageError(f"--set {raw}: given twice (one --set per option)")
        values: list[Any] = []
        for combo in combos:
            v = norm_value(key, combo[raw])
            if v not in values:
                values.append(v)
        axes.append(Axis(key, tuple(values)))
    return axes


def order_axes(axes: Sequence[Axis], metric: Metric) -> list[Axis]:
    """Biggest effects first (:data:`ORDERS`); other axes after, in the order given."""
    rank = {n: i for i, n in enumerate(ORDERS[metric.name])}
    return sorted(axes, key=lambda a: (rank.get(a.name, len(rank)), axes.index(a)))


def spec_value(server: Any, axis: str) -> Any:
    """The value the spec runs with on ``axis`` (llama-server's default where it leaves it out;
    None where that default is not known here, e.g. ``threads``)."""
    if axis == KV:
        k, v = server.cache_type_k or "f16", server.cache_type_v or "f16"
        return k if k == v else None
    value = getattr(server, axis, None)
    if axis == "speculation":
        return norm_value(axis, value or [])
    if value is None:
        return LLAMA_DEFAULTS.get(axis)
    return value


def default_threads(cores: tuple[int, int]) -> tuple[int, ...]:
    """Thread counts worth trying on a head with (physical, logical) cores."""
    phys, logical = max(1, cores[0]), max(1, cores[1])
    vals = {max(1, phys // 4), max(1, phys // 2), phys, logical}
    if phys <= 4:
        vals |= set(range(1, phys + 1))
    return tuple(sorted(vals))


def default_axes(server: Any, supported: Sequence[str] = (), cores: tuple[int, int] = (1, 1)) -> list[Axis]:
    """The five axes ``tune`` searches without ``--set``.

    ``supported``: speculation types the model can use (the planner's ``speculation_support``);
    the draftless n-gram types are always tried, MTP and draft-model types when supported.
    """
    spec_types = list(DEFAULT_SPECULATION)
    for t in ("draft-mtp", "draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"):
        if t in supported:
            spec_types.append(t)
    axes: list[Axis] = []
    for name, base in (
        ("speculation", spec_types),
        ("threads", list(default_threads(cores))),
        (KV, list(DEFAULT_KV)),
        ("ubatch", list(DEFAULT_UBATCH)),
        ("batch", list(DEFAULT_BATCH)),
    ):
        current = spec_value(server, name)
        values = list(base)
        if current is not None and current not in values:
            values.append(current)
        if all(isinstance(v, int) for v in values):
            values.sort()
        axes.append(Axis(name, tuple(values)))
    return axes


def start_point(server: Any, axes: Sequence[Axis], cores: tuple[int, int] = (1, 1)) -> tuple[dict[str, Any], list[str]]:
    """Where the search starts: the spec's own value on each axis (or, where the axis does not
    have it, its first value); notes say where it had to pick."""
    point: dict[str, Any] = {}
    notes: list[str] = []
    for a in axes:
        current = spec_value(server, a.name)
        if current is None and a.name == "threads" and a.ordered:
            # llama-server's default is about the number of physical cores
            current = min(a.values, key=lambda v: abs(v - max(1, cores[0])))
        if current in a.values:
            point[a.name] = current
        else:
            point[a.name] = a.values[0]
            notes.append(
                f"{a.name}: the spec's value ({current if current is not None else 'unset'}) is not "
                f"on the axis; starting from {a.values[0]}"
            )
    return point, notes


def grid_points(axes: Sequence[Axis]) -> list[dict[str, Any]]:
    names = [a.name for a in axes]
    return [dict(zip(names, combo)) for combo in itertools.product(*(a.values for a in axes))]


def grid_size(axes: Sequence[Axis]) -> int:
    return math.prod(len(a.values) for a in axes)


def default_budget(axes: Sequence[Axis], allowed: int | None = None, confirm: bool = True) -> int:
    """A third of the grid's runs (its ``allowed`` points, default all), but at least one full pass
    (the start, twice with ``confirm``, and every other value once)."""
    one_pass = (2 if confirm else 1) + sum(len(a.values) - 1 for a in axes)
    return max(math.ceil((grid_size(axes) if allowed is None else allowed) / 3), one_pass)


def point_label(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={'auto' if v is None else v}" for k, v in point.items())


def point_key(point: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(point.items(), key=lambda kv: kv[0]))


# -- what the planner allows -------------------------------------------------------------------


class PlannerCheck:
    """Why a point cannot run (None: it can): an invalid setting, ``ubatch`` above ``batch``,
    a quantized V cache without flash attention, a speculation type the model cannot use, or (when
    the spec gives the nodes' memory) a plan that does not fit."""

    def __init__(self, spec: Any) -> None:
        from ..cluster import draft_info, spec_nodes
        from ..model import inspect_model

        self.spec = spec
        self.notes: list[str] = []
        self.info: Any = None
        self.draft: Any = None
        try:
            self.info = inspect_model(spec.model)
            self.draft = draft_info(spec)
        except SplitserveError as exc:
            self.notes.append(f"the model's headers could not be read ({exc}): the planner rules nothing out")
        self.nodes: Any = None
        if self.info is not None:
            try:
                self.nodes = spec_nodes(spec)
            except UsageError:
                self.notes.append(
                    "the spec gives no memory sizes (memory_gib on the workers/head): the planner "
                    "cannot say what fits, so no point is ruled out for memory"
                )
        self._cache: dict[tuple[tuple[str, Any], ...], str | None] = {}

    def supported_types(self) -> list[str]:
        from ..plan import speculation_support

        if self.info is None:
            return []
        return [r.type for r in speculation_support(self.info, self.draft) if r.supported]

    def __call__(self, point: dict[str, Any]) -> str | None:
        key = point_key(server_values(point))
        if key not in self._cache:
            self._cache[key] = self._why(point)
        return self._cache[key]

    def _why(self, point: dict[str, Any]) -> str | None:
        from ..cluster import require_fit, spec_options
        from ..plan import make_plan, speculation_refusal
        from ._cluster import with_server

        try:
            cand = with_server(self.spec, server_values(point))
        except UsageError as exc:
            return str(exc)
        s = cand.server
        ub, b = s.ubatch or 512, s.batch or 2048
        if ub > b:
            return f"ubatch {ub} > batch {b}: llama.cpp caps ubatch at batch (the same run as ubatch = {b})"
        quantized_v = (s.cache_type_v or "f16") not in ("f16", "f32", "bf16")
        if quantized_v and s.flash_attn == "off":
            return f"cache_type_v = {s.cache_type_v} needs flash attention (server.flash_attn is off)"
        if self.info is None:
            return None
        if s.speculation:
            problem = speculation_refusal(list(s.speculation), self.info, self.draft)
            if problem:
                return f"speculation: {problem}"
        if self.nodes is not None:
            try:
                require_fit(make_plan(self.info, self.nodes, spec_options(cand)))
            except ClusterError as exc:
                return f"the planner: {exc}".split("; lower ctx_size")[0]
        return None
