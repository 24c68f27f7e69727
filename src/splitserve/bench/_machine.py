"""A description of the machine a run was measured from (client side) and, for
local clusters, ran on."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any

import psutil


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
        out = subprocess.run(
            [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
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
        "label": os.environ.get("SPLITSERVE_MACHINE", ""),
    }
