"""Reading llama-server's load log: per-device memory, load progress, and warnings worth a fix.

llama-server (at ``--verbosity 4``) prints, per device, lines such as::

    load_tensors:   RPC0[127.0.0.1:50052] model buffer size =    33.82 MiB
    llama_kv_cache: RPC0[127.0.0.1:50052] KV buffer size =    48.00 MiB
    sched_reserve:  RPC0[127.0.0.1:50052] compute buffer size =    43.05 MiB

:func:`parse_load_report` collects them into one :class:`DeviceMemory` per
device, in the order the devices first appear.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MIB = 1024 * 1024

_BUFFER = re.compile(
    r"(?P<dev>[A-Za-z][\w.-]*(?:\[[^\]]*\])?)\s+(?P<kind>model|KV|compute|output|RS)\s+buffer size\s*=\s*"
    r"(?P<mib>[\d.]+)\s*MiB"
)
_RPC_DEV = re.compile(r"^RPC(?P<idx>\d+)\[(?P<endpoint>[^\]]+)\]$")


@dataclass
class DeviceMemory:
    """What llama.cpp allocated on one device (bytes)."""

    device: str
    """As llama.cpp names it: ``RPC0[127.0.0.1:50052]``, ``CUDA0``, ``CPU``, ``CPU_Mapped``."""
    model_bytes: int = 0
    kv_bytes: int = 0
    compute_bytes: int = 0
    output_bytes: int = 0
    other_bytes: int = 0

    @property
    def endpoint(self) -> str | None:
        """For an RPC device, the worker's ``host:port``."""
        m = _RPC_DEV.match(self.device)
        return m.group("endpoint") if m else None

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.kv_bytes + self.compute_bytes + self.output_bytes + self.other_bytes

    def as_dict(self) -> dict[str, object]:
        return {
            "device": self.device,
            "endpoint": self.endpoint,
            "model_bytes": self.model_bytes,
            "kv_bytes": self.kv_bytes,
            "compute_bytes": self.compute_bytes,
            "output_bytes": self.output_bytes,
            "other_bytes": self.other_bytes,
            "total_bytes": self.total_bytes,
        }


@dataclass
class LoadReport:
    devices: list[DeviceMemory] = field(default_factory=list)

    def device(self, name_or_endpoint: str) -> DeviceMemory | None:
        for d in self.devices:
            if d.device == name_or_endpoint or d.endpoint == name_or_endpoint:
                return d
        return None


def parse_load_report(text: str) -> LoadReport:
    """Per-device buffer sizes from a llama-server (or llama-cli / llama-bench) log.

    A log holding several loads (a restart appended to the same file) reports the last one.
    """
    marker = text.rfind("llama_model_loader: loaded meta data")
    if marker > 0:
        text = text[marker:]
    devices: dict[str, DeviceMemory] = {}
    for m in _BUFFER.finditer(text):
        dev = devices.setdefault(m.group("dev"), DeviceMemory(m.group("dev")))
        size = round(float(m.group("mib")) * MIB)
        kind = m.group("kind")
        if kind == "model":
            dev.model_bytes += size
        elif kind == "KV":
            dev.kv_bytes += size
        elif kind == "compute":
            dev.compute_bytes += size
        elif kind == "output":
            dev.output_bytes += size
        else:
            dev.other_bytes += size
    return LoadReport(devices=list(devices.values()))


_STAGES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"llama_model_loader: loaded meta data with (\d+) key-value pairs and (\d+) tensors"),
        "read the model's metadata ({2} tensors)",
    ),
    (re.compile(r"load_tensors: loading model tensors"), "loading tensors"),
    (re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers"), "offloaded {1}/{2} layers"),
    (re.compile(r"model buffer size"), "sending weights to the devices"),
    (re.compile(r"llama_context: constructing"), "creating the context"),
    (re.compile(r"KV buffer size"), "allocating the KV cache"),
    (re.compile(r"compute buffer size"), "reserving compute buffers"),
    (re.compile(r"warming up"), "warming up"),
    (re.compile(r"model loaded"), "model loaded"),
    (re.compile(r"server is listening"), "listening"),
]


def load_progress(text: str) -> str | None:
    """A short description of the furthest load stage the log shows."""
    best: tuple[int, str] | None = None
    for pattern, label in _STAGES:
        for m in pattern.finditer(text):
            if best is None or m.start() >= best[0]:
                groups = m.groups()
                best = (
                    m.start(),
                    label.replace("{1}", groups[0] if groups else "").replace(
                        "{2}", groups[1] if len(groups) > 1 else ""
                    ),
                )
    return best[1] if best else None


@dataclass(frozen=True)
class LoadWarning:
    """A line of llama-server's log that costs speed or quality, and what to change."""

    kind: str
    text: str
    """The log line, stripped."""
    fix: str

    def line(self) -> str:
        return f"llama-server: {self.text} -> fix: {self.fix}"

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text, "fix": self.fix}


# (kind, pattern, fix), from the pinned llama.cpp's own messages
_WARNINGS: list[tuple[str, re.Pattern[str], str]] = [
    # src/models/minimax-m3.cpp: MSA needs flash attention ...
    (
        "msa_dense_no_flash_attn",
        re.compile(r"MSA requires it -> running DENSE attention"),
        'set server.flash_attn = "on" (--flash-attn on): MiniMax-M3\'s sparse attention runs only with it',
    ),
    # ... and one KV stream per slot
    (
        "msa_dense_kv_unified",
        re.compile(r"MSA needs per-sequence streams|Drop --kv-unified to enable MSA"),
        "drop --kv-unified (server.extra_args / LLAMA_ARG_KV_UNIFIED), or use server.parallel = 1",
    ),
    # src/llama-context.cpp: --spec-type draft-mtp on a model without MTP layers
    (
        "mtp_missing",
        re.compile(r"context type MTP requested but model doesn't contain MTP layers"),
        'use a draftless type (server.speculation = "ngram-mod") or a GGUF with MTP layers (`splitserve plan`)',
    ),
    # common/speculative.cpp: --spec-synth-*
    (
        "synthetic_acceptance",
        re.compile(r"synthetic speculative acceptance is enabled for benchmarking"),
        "remove server.spec_synth_len / spec_synth_rates to serve real output",
    ),
    # common/speculative.cpp: a draft model of another tokenizer
    (
        "draft_vocab",
        re.compile(r"draft model (vocab type|bos tokens|eos tokens) must match target model"),
        "use a draft model with the same tokenizer as the model (server.draft_model)",
    ),
]


def load_warnings(text: str) -> list[LoadWarning]:
    """The known warnings in a llama-server log (the last start's, once each), with their fix."""
    marker = text.rfind("# splitserve:")
    if marker > 0:
        text = text[marker:]
    found: dict[str, LoadWarning] = {}
    for line in text.splitlines():
        for kind, pattern, fix in _WARNINGS:
            if kind not in found and pattern.search(line):
                found[kind] = LoadWarning(kind, line.strip()[:300], fix)
    return list(found.values())
