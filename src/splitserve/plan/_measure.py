"""``plan --measure``, the pure half: read llama.cpp's own memory breakdown and set it beside the plan.

The cluster layer (``cluster.measure_spec``) starts the head's llama-server with the spec's flags
plus ``--fit on``: before loading any weights, llama.cpp's fit step loads the model with
``no_alloc`` and prints its memory breakdown per device (model, context, compute, in MiB). Here:

    parse_breakdown(text) -> {device_label: {"model", "context", "compute"} bytes}
    compare_breakdown(plan, text) -> rows of {node, what, planned, measured}
"""

from __future__ import annotations

import re
from typing import Any

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


def _endpoint(label: str) -> str | None:
    m = re.search(r"\(([^()]+:\d+)\)", label)
    return m.group(1) if m else None


MEASURE_MARKERS = _DONE
"""Lines after which llama-server's fit step has printed its table (it is stopped there)."""


def compare_breakdown(plan: Plan, text: str) -> list[dict[str, Any]] | None:
    """The plan's bytes per node beside llama.cpp's breakdown in ``text`` (its log); None when the
    log holds no breakdown table."""
    table = parse_breakdown(text)
    if not table:
        return None
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
