"""A description of the machine a run was measured from (client side) and, for
local clusters, ran on."""

from __future__ import annotations

import os
import platform
import shutil
from typing import Any

import psutil

from .._errors import SplitserveError
from .._node import run_command


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict[str, str]]:
    """NVIDIA GPUs as nvidia-smi names them; empty without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = run_command([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"], timeout=10)
    except SplitserveError:  # it did not answer in time
        return []
    if out.returncode != 0:
        return []
    rows = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            rows.append({"name": parts[0], "memory": parts[1], "driver": parts[2]})
    return rows


def machine_info() -> dict[str, Any]:
    """Host name, OS, CPU, memory and GPUs of this machine."""
    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_cores": psutil.cpu_count(logical=True),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": gpus(),
        "gpu_state": gpu_state(),
        "label": os.environ.get("SPLITSERVE_MACHINE", ""),
    }


def gpu_state() -> dict[str, Any]:
    """Each GPU's clocks and power state when the run starts (``gpus`` empty and a ``note`` on a
    machine without NVIDIA GPUs), with the throttle / low-power warnings."""
    from ..cluster import local_gpu_state

    return local_gpu_state().as_dict()


def gpu_clocks_text(machine: dict[str, Any]) -> str:
    """The run header's line: each GPU's pstate, SM clock and power, or why there are none."""
    state = machine.get("gpu_state")
    if not isinstance(state, dict):
        return "not recorded"
    rows = state.get("gpus") or []
    if not rows:
        return f"none ({state.get('note') or 'no GPU'})"
    parts = []
    for g in rows:
        sm = g.get("sm_mhz")
        top = g.get("max_sm_mhz")
        clock = f"SM {sm:.0f}" + (f"/{top:.0f}" if top else "") + " MHz" if sm is not None else "SM n/a"
        power = f", {g['power_w']:.0f} W" if g.get("power_w") is not None else ""
        reasons = f" ({', '.join(g['reason_names'])})" if g.get("reason_names") else ""
        parts.append(f"GPU{g.get('index')} {g.get('name')} {g.get('pstate') or 'P?'}, {clock}{power}{reasons}")
    return "; ".join(parts)
