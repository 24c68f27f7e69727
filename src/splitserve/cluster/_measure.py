"""``plan --measure``: ask llama.cpp itself, next to the prediction.

With the spec's workers up, the head's llama-server starts with the spec's flags plus
``--fit on`` on a free port, as a one-step plan run through the head's node: before loading any
weights, llama.cpp's fit step prints its memory breakdown per device, and the server is stopped
as soon as the table is out, so nothing is uploaded to the workers. The table is read and set
beside the plan by the pure :func:`splitserve.plan.compare_breakdown`.
"""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import Any

from .._errors import ClusterError
from ..plan import MEASURE_MARKERS, Plan, compare_breakdown
from ._commands import launch_plan
from ._down import resolve_engines
from ._edges import REAL_EDGES, Edges
from ._runner import run_until_log
from ._spec import ClusterSpec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_spec(
    spec: ClusterSpec, plan: Plan, timeout: float = 600.0, edges: Edges = REAL_EDGES
) -> list[dict[str, Any]]:
    """Run llama.cpp's fit pass for ``spec`` and return prediction and measurement side by side."""
    engines = resolve_engines(spec)
    lp = launch_plan(spec, engines, plan.tensor_split if spec.server.tensor_split is None else None)
    head = replace(
        lp.head,
        argv=[*lp.head.argv, "--port", str(_free_port()), "--fit", "on", "--verbosity", "4"],
        log=lp.head.log.with_name("measure.log"),
    )
    text = run_until_log(edges.node(head.host, spec.ssh), head, MEASURE_MARKERS, timeout, edges.clock)
    rows = compare_breakdown(plan, text)
    if rows is None:
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("# splitserve:")]
        tail = " ".join(x.strip() for x in lines[-3:])[:300]
        raise ClusterError(
            f"llama-server printed no memory breakdown within {timeout:.0f} s (are the workers up "
            f"and free?): {tail or 'no output'}"
        )
    return rows


__all__ = ["measure_spec"]
