"""``plan --measure``: ask llama.cpp itself, next to the prediction.

The one part of ``plan`` that runs a process.  With the spec's workers up, it starts the head's
llama-server with the spec's flags plus ``--fit on``: before loading any weights, llama.cpp's fit
step loads the model with ``no_alloc`` and prints its memory breakdown per device (model,
context, compute, in MiB).  The server is stopped as soon as the table is out, so nothing is
uploaded to the workers.

    parse_breakdown(text) -> {device_label: {"model", "context", "compute"} bytes}
    measure_spec(spec, plan) -> rows of {node, what, planned, measured}
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
from typing import Any

from .._errors import ClusterError
from ._plan import Plan

MIB = 1 << 20
_ROW = re.compile(
    r"\|\s+-\s+(?P<dev>.+?)\s+\|\s+(?:(?P<total>\d+)\s+=\s+(?P<free>\d+)\s+\+\s+)?\(?\s*(?P<self>\d+)\s+=\s+"
    r"(?P<model>\d+)\s+\+\s+(?P<context>\d+)\s+\+\s+(?P<compute>\d+)\s*\)?"
)
_DONE = ("fitting params to free memory took", "successfully fit params", "failed to fit params", "common_fit_params:")


def parse_breakdown(text: str) -> dict[str, dict[str, int]]:
    """The first ``memory breakdown [MiB]`` table in a llama.cpp log, by device label.

    Labels are as llama.cpp prints them: ``RPC0 (127.0.0.1:50052)``, ``CUDA0 (NVIDIA H200)``, ``Host``.
    """
    start = text.find("memory breakdown [MiB]")
    if start < 0:
        return {}
    out: dict[str, dict[str, int]] = {}
    for line in text[start:].splitlines()[1:]:
        if "memory_breakdown" not in line and "|" not in line:
            break
        m = _ROW.search(line)
        if not m:
            if out:
                break
            continue
        out[m.group("dev").strip()] = {k: int(m.group(k)) * MIB for k in ("model", "context", "compute")}
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _endpoint(label: str) -> str | None:
    m = re.search(r"\(([^()]+:\d+)\)", label)
    return m.group(1) if m else None


def measure_spec(spec: Any, plan: Plan, timeout: float = 600.0) -> list[dict[str, Any]]:
    """Run llama.cpp's fit pass for ``spec`` and return prediction and measurement side by side."""
    from ..cluster import launch_plan, resolve_engines

    engines = resolve_engines(spec)
    lp = launch_plan(spec, engines, plan.tensor_split if spec.server.tensor_split is None else None)
    argv = list(lp.head.argv) + ["--port", str(_free_port()), "--fit", "on", "--verbosity", "4"]
    env = dict(os.environ, **lp.head.env)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    done = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if any(marker in line for marker in _DONE):
                break
        done.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        done.wait(timeout)
    finally:
        proc.kill()
        proc.wait()
    text = "".join(lines)
    table = parse_breakdown(text)
    if not table:
        tail = " ".join(x.strip() for x in lines[-3:])[:300]
        raise ClusterError(
            f"llama-server printed no memory breakdown within {timeout:.0f} s (are the workers up "
            f"and free?): {tail or 'no output'}"
        )
    rpc_labels = [k for k in table if _endpoint(k)]
    other = [k for k in table if not _endpoint(k) and k != "Host"]
    labels = rpc_labels + other
    rows: list[dict[str, Any]] = []
    for node, label in zip(plan.nodes, labels):
        got = table[label]
        for what, planned, measured in (
            ("weights", node.weights_bytes, got["model"]),
            ("kv", node.kv_bytes, got["context"]),
            ("compute", node.compute_bytes, got["compute"]),
        ):
            rows.append({"node": node.name, "device": label, "what": what, "planned": planned, "measured": measured})
    if "Host" in table:
        rows.append(
            {
                "node": "host",
                "device": "Host",
                "what": "weights",
                "planned": plan.host_weights_bytes,
                "measured": table["Host"]["model"],
            }
        )
        rows.append(
            {
                "node": "host",
                "device": "Host",
                "what": "compute",
                "planned": plan.host_compute_bytes,
                "measured": table["Host"]["compute"],
            }
        )
    return rows
