"""What a run shows, in words: the run, the model, the machine and the engine's version.

The report's header, every plot's caption and the summary a bench command prints all say
it the same way, from what the run file recorded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from ..engine import version_text
from ._records import BenchRun

_BUILD = re.compile(r"b(\d+)-(\S+)")
_SHARD = re.compile(r"-\d{5}-of-\d{5}$")
_PROVENANCE_KEYS = ("key", "server_version", "version", "source", "commit")


def _server(run: BenchRun) -> dict[str, Any]:
    """What the server reported: the run's, or a sweep's first point that reached one."""
    return run.server or next((p.server for p in run.points if p.server), {})


def build_text(build_info: Any) -> str | None:
    """llama-server's ``build_info`` (``b4567-abc1234``) less what it does not know: a build from
    a tree without git says ``b0-unknown``, which is ``None`` here (nothing known)."""
    text = str(build_info or "").strip()
    m = _BUILD.fullmatch(text)
    if not m:
        return text or None
    build, commit = int(m.group(1)), m.group(2)
    if build and commit != "unknown":
        return text
    if build:
        return f"b{build}"
    return f"commit {commit}" if commit != "unknown" else None


def engine_version(run: BenchRun) -> str:
    """The engine's version: the server's build when it knows one, else what the engine's
    provenance says (its own version and source), never ``b0-unknown``."""
    build = build_text(_server(run).get("build_info") or run.engine.get("build_info"))
    known = any(run.engine.get(k) for k in _PROVENANCE_KEYS)
    if build:
        return build + (f" ({run.engine['key']})" if run.engine.get("key") else "")
    if known:
        return version_text(run.engine)
    return "not reported by the server"


def model_text(run: BenchRun) -> str:
    """The model's file name (shard suffix and ``.gguf`` dropped) and its quantization."""
    server = _server(run)
    path = (
        run.target.get("model")
        or server.get("model_path")
        or run.engine.get("model_path")
        or (server.get("models") or [None])[0]
    )
    name = _SHARD.sub("", PurePath(str(path)).name.removesuffix(".gguf")) if path else "model not recorded"
    # llama-bench's model_type ("llama 8B Q4_K - Medium") ends with the quantization too
    quant = server.get("model_ftype") or next(
        (str(r["model_type"]).split()[2] for r in run.engine_rows if len(str(r.get("model_type")).split()) > 2), None
    )
    if quant and str(quant).lower() not in name.lower():
        name += f" ({quant})"
    return name


def machine_text(run: BenchRun) -> str:
    """Where it ran: the machine's label (or host, CPU and GPUs), the backend, the RPC workers."""
    m = run.machine
    where = m.get("label") or ", ".join(x for x in (m.get("hostname"), m.get("cpu"), _gpus(m)) if x)
    parts = [where or "machine not recorded"]
    if run.engine.get("backend"):
        parts.append(f"{run.engine['backend']} backend")
    cluster = run.target.get("cluster") or _server(run).get("cluster") or {}
    workers = run.target.get("rpc") or cluster.get("workers") or []
    if workers:
        parts.append(f"{len(workers)} RPC worker" + ("s" if len(workers) > 1 else ""))
    return ", ".join(parts)


def _gpus(machine: dict[str, Any]) -> str:
    names = [g.get("name", "?") for g in machine.get("gpus", [])]
    counts = {n: names.count(n) for n in dict.fromkeys(names)}
    return ", ".join(f"{c}× {n}" for n, c in counts.items())


def caption(runs: Sequence[BenchRun], limit: int = 4) -> str:
    """Which runs, model and machine a figure shows: two lines for one run (or runs that share
    the model and machine), else a line per run (at most ``limit``)."""
    if not runs:
        return ""
    models = {model_text(r) for r in runs}
    machines = {(machine_text(r), engine_version(r)) for r in runs}
    if len(models) == 1 and len(machines) == 1:
        ((machine, version),) = machines
        names = ", ".join(r.name for r in runs[:limit]) + (
            f" and {len(runs) - limit} more" if len(runs) > limit else ""
        )
        return f"run{'s' if len(runs) > 1 else ''} {names} · model {models.pop()}\n{machine} · engine {version}"
    lines = [f"{r.name}: {model_text(r)} · {machine_text(r)} · engine {engine_version(r)}" for r in runs[:limit]]
    if len(runs) > limit:
        lines.append(f"and {len(runs) - limit} more")
    return "\n".join(lines)
