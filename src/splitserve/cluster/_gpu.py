"""Each NVIDIA GPU's clocks and power state, and a warning when one is throttled or held low.

Read with ``nvidia-smi --query-gpu=... --format=csv`` (one script, run on any node). Drivers
since 535 name the clock-limit bitmask ``clocks_event_reasons.active``; older ones only know
``clocks_throttle_reasons.active``, so the script falls back to it. The bits are NVML's
``nvmlClocksEventReasons``: 0x1 GPU idle, 0x2 application clocks setting, 0x4 SW power cap,
0x8 HW slowdown, 0x10 sync boost, 0x20 SW thermal slowdown, 0x40 HW thermal slowdown,
0x80 HW power brake slowdown, 0x100 display clock setting.

What the warnings are for: a GPU held at a fraction of its clock gives benchmark figures that
say nothing about the model or the link (a DGX Spark in the USB-PD power-degraded state runs at
500-850 MHz instead of ~2,400, -60 to -80 %, until power-cycled; some GX10 units stay at ~30 W).
An idle GPU lowering its clock is normal and is not warned about.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._node import Node

BASE_FIELDS = ("index", "name", "pstate", "clocks.sm", "clocks.max.sm", "power.draw", "power.limit")
EVENT_FIELD = "clocks_event_reasons.active"
THROTTLE_FIELD = "clocks_throttle_reasons.active"
NO_SMI = "__splitserve_no_nvidia_smi__"

GPU_QUERY_SCRIPT = (
    f"command -v nvidia-smi >/dev/null 2>&1 || {{ echo {NO_SMI}; exit 0; }}\n"
    f"F={','.join(BASE_FIELDS)}\n"
    f'out=$(nvidia-smi --query-gpu="$F,{EVENT_FIELD}" --format=csv 2>&1) && printf "%s\\n" "$out" || '
    f'nvidia-smi --query-gpu="$F,{THROTTLE_FIELD}" --format=csv 2>&1\n'
    "true\n"
)
"""Prints nvidia-smi's CSV (header first), or :data:`NO_SMI` on a node without it."""

REASONS = {
    0x1: "GPU idle",
    0x2: "application clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
}
IDLE = 0x1
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
"""The reasons that mean the GPU runs slower than it could under load."""
LOW_CLOCK_SHARE = 0.5
"""A busy (not idle) GPU below this share of its top SM clock is held in a low power state."""
LOW_PSTATE = 8
"""P8 and above: the idle-level performance states."""


@dataclass
class GpuState:
    """One GPU as nvidia-smi reports it (None: ``[N/A]`` / ``[Not Supported]``)."""

    index: int
    name: str
    pstate: str | None = None
    sm_mhz: float | None = None
    max_sm_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    reasons: int | None = None
    reasons_field: str = EVENT_FIELD

    @property
    def reason_names(self) -> list[str]:
        if not self.reasons:
            return []
        return [name for bit, name in REASONS.items() if self.reasons & bit] or [f"0x{self.reasons:x}"]

    @property
    def idle(self) -> bool:
        return bool(self.reasons and self.reasons & IDLE)

    def clocks_text(self) -> str:
        sm = _num(self.sm_mhz)
        top = f"/{_num(self.max_sm_mhz)}" if self.max_sm_mhz is not None else ""
        return f"SM {sm}{top} MHz" if self.sm_mhz is not None else "SM clock n/a"

    def text(self) -> str:
        """``GPU0 NVIDIA H200: P0, SM 1980/1980 MHz, 115.3 W (idle)``."""
        parts = [p for p in (self.pstate, self.clocks_text()) if p]
        if self.power_w is not None:
            parts.append(f"{self.power_w:.1f} W")
        reasons = ", ".join(self.reason_names)
        return f"GPU{self.index} {self.name}: {', '.join(parts)}" + (f" ({reasons})" if reasons else "")

    def warnings(self) -> list[str]:
        """Throttled (a throttling reason is active), or held low while not idle."""
        out: list[str] = []
        who = f"GPU{self.index} ({self.name})"
        if self.reasons and self.reasons & THROTTLING:
            names = [REASONS[b] for b in REASONS if self.reasons & b & THROTTLING]
            out.append(f"{who} is throttled: {', '.join(names)} ({self.clocks_text()}); {_fix(self.reasons)}")
        if not self.idle:
            level = _pstate_level(self.pstate)
            share = self.sm_mhz / self.max_sm_mhz if self.sm_mhz and self.max_sm_mhz else None
            if (level is not None and level >= LOW_PSTATE) or (share is not None and share < LOW_CLOCK_SHARE):
                why = f"{self.pstate or 'P?'}, {self.clocks_text()}"
                out.append(
                    f"{who} is in a low power state while not idle ({why}): check the power supply and "
                    "power limit (nvidia-smi -q -d PERFORMANCE,POWER); a DGX Spark in the USB-PD degraded "
                    "state needs a power-cycle"
                )
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "pstate": self.pstate,
            "sm_mhz": self.sm_mhz,
            "max_sm_mhz": self.max_sm_mhz,
            "power_w": self.power_w,
            "power_limit_w": self.power_limit_w,
            "reasons": f"0x{self.reasons:016x}" if self.reasons is not None else None,
            "reason_names": self.reason_names,
            "warnings": self.warnings(),
        }


def _fix(reasons: int) -> str:
    if reasons & (0x20 | 0x40):
        return "cool it down (airflow, fans, ambient temperature) before measuring"
    if reasons & (0x8 | 0x80):
        return (
            "check its power supply (a DGX Spark: the supplied 240 W adapter; the USB-PD degraded "
            "state stays until a power-cycle)"
        )
    return "it hit its power limit (nvidia-smi -q -d POWER; raise it with nvidia-smi -pl if intended)"


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def _pstate_level(pstate: str | None) -> int | None:
    m = re.fullmatch(r"P(\d+)", pstate or "")
    return int(m.group(1)) if m else None


@dataclass
class GpuReport:
    """The GPUs of one node, or why there are none to show."""

    gpus: list[GpuState] = field(default_factory=list)
    note: str | None = None
    """``no NVIDIA GPU (nvidia-smi not found)``, or nvidia-smi's own error."""

    def warnings(self) -> list[str]:
        return [w for g in self.gpus for w in g.warnings()]

    def as_dict(self) -> dict[str, Any]:
        return {"gpus": [g.as_dict() for g in self.gpus], "note": self.note, "warnings": self.warnings()}


def _field(header: str) -> str:
    """``clocks.current.sm [MHz]`` -> ``clocks.sm``: nvidia-smi's header names, without units."""
    name = re.sub(r"\s*\[[^\]]*\]\s*$", "", header.strip())
    return {"clocks.current.sm": "clocks.sm", "clocks.max.sm": "clocks.max.sm"}.get(name, name)


def _value(text: str | None) -> str | None:
    text = (text or "").strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    return text


def _float(text: str | None) -> float | None:
    v = _value(text)
    if v is None:
        return None
    m = re.match(r"-?\d+(?:\.\d+)?", v)
    return float(m.group(0)) if m else None


def parse_nvidia_smi(text: str) -> GpuReport:
    """nvidia-smi's ``--format=csv`` output (with or without ``nounits``) as a report."""
    if NO_SMI in text:
        return GpuReport(note="no NVIDIA GPU (nvidia-smi not found)")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("index,")), None)
    if start is None:
        first = lines[-1].strip() if lines else "no output"
        return GpuReport(note=f"nvidia-smi failed: {first[:200]}")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:])), skipinitialspace=True))
    names = [_field(h) for h in rows[0]]
    gpus: list[GpuState] = []
    for row in rows[1:]:
        if len(row) != len(names):
            continue
        r = dict(zip(names, row, strict=True))
        reasons_field = EVENT_FIELD if EVENT_FIELD in r else THROTTLE_FIELD
        raw = _value(r.get(reasons_field))
        try:
            reasons = int(raw, 16) if raw else None
            index = int(r.get("index", "").strip())
        except ValueError:
            continue
        gpus.append(
            GpuState(
                index=index,
                name=(r.get("name") or "").strip(),
                pstate=_value(r.get("pstate")),
                sm_mhz=_float(r.get("clocks.sm")),
                max_sm_mhz=_float(r.get("clocks.max.sm")),
                power_w=_float(r.get("power.draw")),
                power_limit_w=_float(r.get("power.limit")),
                reasons=reasons,
                reasons_field=reasons_field,
            )
        )
    if not gpus:
        return GpuReport(note="nvidia-smi listed no GPU")
    return GpuReport(gpus=gpus)


def read_gpu_state(node: Node) -> GpuReport:
    """The node's GPUs (a node without nvidia-smi: none, with a note saying so)."""
    res = node.run(GPU_QUERY_SCRIPT, check=False, timeout=30.0)
    return parse_nvidia_smi(res.stdout.decode("utf-8", "replace"))


def gpu_rows(reports: dict[str, GpuReport], nodes_of: dict[str, list[str]]) -> list[Any]:
    """Preflight's ``gpu-state`` rows: per node, pass (the clocks, or a node without
    nvidia-smi), warn (throttled or held low, or nvidia-smi failing)."""
    from ._checks import CheckRow

    rows: list[CheckRow] = []
    for host, report in reports.items():
        for node in nodes_of.get(host, [host]):
            if not report.gpus:
                note = report.note or "no GPU"
                if note.startswith("nvidia-smi failed"):  # a GPU node whose driver does not answer
                    rows.append(CheckRow("gpu-state", node, "warn", note, "check the NVIDIA driver (nvidia-smi)"))
                else:  # a CPU node: nothing to check (and nothing for `up` to print)
                    rows.append(CheckRow("gpu-state", node, "pass", f"{note}: no GPU clocks to check"))
                continue
            warnings = report.warnings()
            summary = "; ".join(g.text() for g in report.gpus)
            if warnings:
                fix = f"look at `nvidia-smi -q -d PERFORMANCE,POWER` on {node} ({summary})"
                rows.append(CheckRow("gpu-state", node, "warn", " ".join(warnings), fix))
            else:
                rows.append(CheckRow("gpu-state", node, "pass", summary))
    return rows


def local_gpu_state() -> GpuReport:
    """This machine's GPUs (what ``bench`` records in its run header)."""
    from .._node import LocalNode

    return read_gpu_state(LocalNode())
