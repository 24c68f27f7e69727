"""`up`'s cache pre-fill step: fill each worker's ``-c`` tensor cache from its own copy of the
model before the worker starts, so the head's first load finds every big tensor there (cache
hits: a hash crosses the link instead of the tensor).

    prefill_steps(spec, split) -> [Step]          # pure, for the plan and `up --dry-run`
    run_prefill(spec, step, node, emit)           # carries one step out on the worker's node

Which workers: those with ``cache = true`` and a local copy — the worker's ``model`` key (its
path on that node), else the head's ``model`` path when that file is on the worker's node too
(checked there; without it the step is skipped with a one-line note). Which tensors: those over
the engine's 10 MiB threshold in the layers llama.cpp gives the worker's devices of the
``--tensor-split`` (:func:`~._prefill.layers_of_devices`), or every such tensor when the split is
not known (no split, or one whose length is not the spec's device count). The head reads the
GGUF's tensor table; the node hashes and writes (:mod:`._prefill_node`, run by the worker's
``python3`` over its :class:`~splitserve._node.Node`, in batches so `up` shows progress).
"""

from __future__ import annotations

import functools
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from .._errors import ClusterError, SplitserveError
from .._node import Node
from ._commands import Step
from ._down import Event, OnEvent
from ._prefill import CacheEntry, cached_tensors, layers_of_devices, model_layers
from ._prefill_node import NODE_ARGV_CODE, source
from ._spec import ClusterSpec, WorkerSpec

BATCHES = 10
"""At most this many node runs per worker (a progress line after each)."""
MIN_BATCH = 16
"""Tensors per node run, at least."""


def worker_device_indexes(spec: ClusterSpec) -> dict[str, list[int]]:
    """Each worker's device indexes in llama.cpp's order (workers' devices, then the head's)."""
    out: dict[str, list[int]] = {}
    i = 0
    for w in spec.workers:
        n = len(w.devices) or 1  # a worker without `devices` counts as one (the spec's rule)
        out[w.name] = list(range(i, i + n))
        i += n
    return out


def _n_devices(spec: ClusterSpec) -> int:
    return sum(len(v) for v in worker_device_indexes(spec).values()) + len(spec.head.devices)


def local_model(spec: ClusterSpec, w: WorkerSpec) -> tuple[str, bool]:
    """The worker's copy of the model (its ``model`` key, else the head's path) and whether it was given."""
    return (w.model, True) if w.model else (str(spec.model), False)


@functools.lru_cache(maxsize=8)
def _layers(model: str, mtime: float) -> int | None:
    try:
        return model_layers(Path(model))
    except (SplitserveError, OSError, ValueError):
        return None


def worker_layers(spec: ClusterSpec, w: WorkerSpec, split: list[float] | None) -> tuple[int, int] | None:
    """The layers (inclusive; ``n_layer`` is the output layer) the worker holds under ``split``;
    None when that is not known (then every tensor over the threshold is filled)."""
    if not split or len(split) != _n_devices(spec):
        return None
    try:
        n_layer = _layers(str(spec.model), spec.model.stat().st_mtime)
    except OSError:
        return None
    if not n_layer:
        return None
    try:
        return layers_of_devices(n_layer, split, worker_device_indexes(spec)[w.name])
    except SplitserveError:
        return None  # its devices get no layer: llama.cpp gives them nothing


def prefill_steps(spec: ClusterSpec, split: list[float] | None) -> list[Step]:
    """One ``prefill`` step per worker with ``cache = true`` (pure but for the model's header)."""
    steps = []
    for w in spec.workers:
        if not w.cache:
            continue
        path, given = local_model(spec, w)
        layers = worker_layers(spec, w, split)
        what = f"layers {layers[0]}-{layers[1]}" if layers else "every layer (the split is not known here)"
        threads = f"{w.threads} threads (its `threads`)" if w.threads else "a thread per core of that node"
        where = "" if not w.remote else f" on {w.host}"
        src = path if given else f"{path} (the head's path; skipped if the file is not there)"
        steps.append(
            Step(
                "prefill",
                w.name,
                f"fill its -c tensor cache{where} from {src}: the tensors over 10 MiB of {what}, "
                f"hashed (FNV-1a, native) by {threads}",
                args={
                    "model": path,
                    "given": given,
                    "layers": list(layers) if layers else None,
                    "python": "python3" if w.remote else sys.executable,
                },
            )
        )
    return steps


def _shard_paths(head_shards: list[Path], head_model: Path, node_model: str) -> list[str]:
    """The node's path of each of the head's shards: the node's file for the head's ``model``,
    the others beside it under the head's file names."""
    base = node_model.rsplit("/", 1)[0] if "/" in node_model else "."
    out = []
    for p in head_shards:
        if p.resolve() == head_model.resolve():
            out.append(node_model)
        else:
            out.append(f"{base}/{p.name}")
    return out


def _batches(entries: list[CacheEntry]) -> list[list[CacheEntry]]:
    if not entries:
        return []
    size = max(MIN_BATCH, -(-len(entries) // BATCHES))
    order = sorted(entries, key=lambda e: -e.nbytes)
    # interleave so that every batch has big and small tensors: even progress steps
    n = -(-len(order) // size)
    return [order[i::n] for i in range(n)]


def run_on_node(node: Node, python: str, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run :func:`._prefill_node.main` on ``node``; its report."""
    script = f"{shlex.quote(python)} -c {shlex.quote(NODE_ARGV_CODE)}"
    data = json.dumps({"code": source(), "job": job}).encode()
    try:
        res = node.run(script, input=data, timeout=timeout, check=False)
    except ClusterError as exc:
        return {"status": "failed", "reason": str(exc)}
    if res.returncode == 127:
        return {"status": "skipped", "reason": f"no {python} on that node (the pre-fill runs in its Python)"}
    out = res.stdout.decode("utf-8", "replace").strip().splitlines()
    if res.returncode != 0 or not out:
        err = (res.stderr or res.stdout).decode("utf-8", "replace").strip().splitlines()
        return {"status": "failed", "reason": err[-1] if err else f"exit {res.returncode}"}
    try:
        rep: dict[str, Any] = json.loads(out[-1])
    except ValueError:
        return {"status": "failed", "reason": f"unreadable answer: {out[-1][:120]}"}
    return rep


def run_prefill(spec: ClusterSpec, step: Step, node: Node, emit: OnEvent) -> dict[str, Any]:
    """Carry out one ``prefill`` step; returns the summed report (``status``: ok / skipped).

    A copy that is not there, or differs from the head's, or a node without Python or a C
    compiler: skipped with a one-line ``prefill`` event (the load then sends the tensors). A
    failure while filling (disk full, permissions, an unreachable node) is a ``warning`` event,
    not fatal: the load works without the cache, only slower."""
    w = next(x for x in spec.workers if x.name == step.node)
    layers = tuple(step.args["layers"]) if step.args.get("layers") else None
    try:
        entries, _ = cached_tensors(spec.model, layers)
    except (SplitserveError, OSError, ValueError) as exc:
        emit(Event("prefill", w.name, f"cache pre-fill skipped: cannot read the tensor table of {spec.model} ({exc})"))
        return {"status": "skipped", "reason": str(exc)}
    if not entries:
        emit(Event("prefill", w.name, "cache pre-fill: no tensor over 10 MiB, nothing to do"))
        return {"status": "skipped", "reason": "no tensor over the threshold"}
    from ..model import read_gguf

    shards = read_gguf(spec.model).shards
    index = {p: i for i, p in enumerate(shards)}
    base_job: dict[str, Any] = {
        "shards": _shard_paths(shards, spec.model, str(step.args["model"])),
        "sizes": [p.stat().st_size for p in shards],
        "env": dict(w.env),
        "cache_dir": None,
        "jobs": w.threads,
    }
    total = sum(e.nbytes for e in entries)
    done = 0
    started = time.perf_counter()
    summed: dict[str, Any] = {"status": "ok", "tensors": 0, "written": 0, "present": 0, "bytes": 0}
    summed.update({"bytes_written": 0, "hash_seconds": 0.0, "seconds": 0.0, "files": []})
    batches = _batches(entries)
    for k, batch in enumerate(batches, 1):
        job = dict(base_job, entries=[[index[e.shard], e.offset, e.nbytes] for e in batch])
        nbytes = sum(e.nbytes for e in batch)
        rep = run_on_node(node, str(step.args["python"]), job, timeout=120.0 + nbytes / 20e6)
        if rep.get("status") == "skipped":
            emit(Event("prefill", w.name, f"cache pre-fill skipped: {rep.get('reason')}; the head sends its tensors"))
            return rep
        if rep.get("status") != "ok":
            # not fatal: the load works without the cache, only slower
            emit(
                Event(
                    "warning",
                    w.name,
                    f"cache pre-fill failed ({rep.get('reason')}); the head sends its tensors",
                )
            )
            return rep
        for key in ("tensors", "written", "present", "bytes", "bytes_written", "hash_seconds"):
            summed[key] += rep.get(key, 0)
        summed["files"] += rep.get("files", [])
        summed["cache_dir"] = rep.get("cache_dir")
        summed["jobs"] = rep.get("jobs")
        done += nbytes
        summed["seconds"] = time.perf_counter() - started
        if k < len(batches):
            emit(
                Event(
                    "prefill",
                    w.name,
                    f"cache pre-fill {100 * done / total:.0f}% ({done / 2**30:.2f} of {total / 2**30:.2f} GiB), {summed['seconds']:.1f} s",
                )
            )
    rate = summed["bytes"] / summed["hash_seconds"] / 1e9 if summed["hash_seconds"] else 0.0
    emit(
        Event(
            "prefill",
            w.name,
            f"cache pre-fill done: {summed['cache_dir']}: {summed['tensors']} tensors ({summed['bytes'] / 2**30:.2f} GiB), "
            f"{summed['written']} written, {summed['present']} already there, in {summed['seconds']:.1f} s "
            f"({summed['jobs']} threads, {rate:.2f} GB/s per thread)",
        )
    )
    return summed


__all__ = ["prefill_steps", "run_on_node", "run_prefill", "worker_device_indexes", "worker_layers"]
