"""The bench runs as functions: each writes its run file as it goes and returns the run.

A run interrupted by Ctrl-C is closed with ``interrupted = true`` and what was
measured so far, then the ``KeyboardInterrupt`` goes on to the caller.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .._errors import UsageError
from ._client import BenchClient, Target
from ._context import ContextOptions, context_cells
from ._llamabench import EngineBenchOptions, bench_test_label, llama_bench_argv, run_llama_bench
from ._machine import machine_info
from ._records import BenchRun, RequestRecord, RunKind, RunWriter, SweepPoint, load_run, new_run_id
from ._speed import Session, SpeedOptions, speed_notes, workload_cells
from ._tables import (
    agent_turn_rows,
    context_rows,
    engine_rows,
    headline,
    speed_rows,
    sweep_rows,
    sweep_workload_rows,
    workload_rows,
)
from ._workloads import WorkloadPlan, apply_baselines, apply_reference, build_plan, is_baseline, with_baseline

Progress = Callable[[RequestRecord], None]


def _new_run(kind: RunKind, label: str, settings: dict[str, Any], out: Path | None = None) -> BenchRun:
    # a file named with a run id (the CLI names them before the run starts): the run keeps that id
    stem = out.stem if out is not None and out.suffix == ".json" else ""
    run_id = stem if re.fullmatch(rf"{re.escape(kind)}-\d{{8}}T\d{{6}}Z-[0-9a-f]{{4}}", stem) else new_run_id(kind)
    return BenchRun(
        kind=kind,
        id=run_id,
        label=label,
        settings=settings,
        machine=machine_info(),
    )


def _out_path(run: BenchRun, out: Path | None) -> Path:
    if out is None:
        return Path("bench-runs") / f"{run.id}.json"
    if out.suffix == ".json":
        return out
    return out / f"{run.id}.json"


def _engine_from_server(server: dict[str, Any]) -> dict[str, Any]:
    return {k: server[k] for k in ("build_info", "model_path") if k in server}


def summarize_run(run: BenchRun) -> dict[str, Any]:
    """The per-cell figures of ``run`` (one row per cell, as in the report) and its headline."""
    cells: list[dict[str, Any]]
    extra: dict[str, Any] = {}
    if run.kind == "speed":
        cells = speed_rows(run.records)
        extra = {"workloads": workload_rows(run.records), "agent_turns": agent_turn_rows(run.records)}
        extra = {k: v for k, v in extra.items() if v}
    elif run.kind == "context":
        cells = context_rows(run.records)
    elif run.kind == "sweep":
        cells = sweep_rows(run)
        workloads = sweep_workload_rows(run)
        extra = {"workloads": workloads} if workloads else {}
    else:
        cells = engine_rows(run)
    return {"headline": headline(run), "cells": cells, **extra}


def _close(writer: RunWriter, interrupted: bool = False) -> None:
    try:
        writer.run.summary = summarize_run(writer.run)
    except Exception as exc:  # noqa: BLE001  (a summary must never cost the measured records)
        writer.run.notes.append(f"no summary: {type(exc).__name__}: {exc}")
    writer.close(interrupted=interrupted)


def _finish(writer: RunWriter, body: Callable[[], object]) -> BenchRun:
    try:
        body()
    except KeyboardInterrupt:
        _close(writer, interrupted=True)
        raise
    except BaseException:
        run = writer.run
        if not (run.records or run.points or run.engine_rows):
            writer.path.unlink(missing_ok=True)  # nothing measured: leave no empty run behind
            raise
        run.notes.append("the run stopped on an error; the records up to it are kept")
        _close(writer, interrupted=True)
        raise
    _close(writer)
    return writer.run


def _http_run(
    kind: RunKind,
    label: str,
    settings: dict[str, Any],
    target: Target,
    out: Path | None,
    cluster: dict[str, Any] | None,
    progress: Progress | None,
) -> tuple[BenchRun, Path, RunWriter, Callable[[RequestRecord], None]]:
    """A new run against an HTTP target: the run, its file, its writer, and the record sink."""
    run = _new_run(kind, label, settings, out)
    run.target = target.describe() | ({"cluster": cluster} if cluster else {})
    path = _out_path(run, out)
    writer = RunWriter(run, path)

    def emit(rec: RequestRecord) -> None:
        writer.add(rec)
        if progress:
            progress(rec)

    return run, path, writer, emit


def plan_for(opts: SpeedOptions) -> WorkloadPlan:
    """The workloads' items (files read, recording checked) for ``opts``."""
    return build_plan(
        opts.workloads,
        [Path(f) for f in opts.workload_files],
        Path(opts.recording) if opts.recording else None,
        opts.drop_reasoning,
    )


def check_workload_target(target: Target, opts: SpeedOptions) -> None:
    others = [w for w in opts.workloads if w != "chat"]
    if others and target.api == "completions":
        raise UsageError(
            f"--workload {others[0]} sends chat messages (with tools for agent); use --api chat, messages or responses"
        )


def load_reference(path: Path) -> tuple[list[RequestRecord], str]:
    """The records of a reference run: a speed run's, or a sweep's point without speculation
    (else its first point)."""
    ref = load_run(path)
    if ref.kind == "speed":
        return ref.records, ref.name
    if ref.kind == "sweep" and ref.points:
        base = [p for p in ref.points if is_baseline(p.values)] or ref.points[:1]
        return base[0].records, f"{ref.name} {base[0].values}"
    raise UsageError(
        f"--reference {path}: a {ref.kind} run holds no outputs to compare with; give a speed or sweep run"
    )


async def _probe(
    client: BenchClient, run: BenchRun, target: Target, engine: dict[str, Any] | None, writer: RunWriter
) -> None:
    """The server's facts into the run (its model, its engine with ``engine``'s provenance over
    what the server reports), written at once."""
    run.server = await client.probe()
    run.target["model"] = target.model
    run.engine = _engine_from_server(run.server) | (engine or {})
    writer.flush()


def run_speed(
    target: Target,
    opts: SpeedOptions,
    out: Path | None = None,
    label: str = "",
    progress: Progress | None = None,
    engine: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
    transport: Any = None,
    plan: WorkloadPlan | None = None,
) -> tuple[BenchRun, Path]:
    """``bench speed`` against ``target``; returns the run and the file it is in.

    With ``opts.reference`` each output is compared with the reference run's output of the same
    request id (agreement); without, agreement stays ``None``.
    """
    check_workload_target(target, opts)
    plan = plan or plan_for(opts)
    reference = load_reference(Path(opts.reference)) if opts.reference else None
    run, path, writer, emit = _http_run(
        "speed", label, opts.as_dict() | {"workload_items": plan.describe()}, target, out, cluster, progress
    )

    async def main() -> None:
        async with BenchClient(target, transport=transport, max_connections=max(opts.concurrency) + 2) as client:
            await _probe(client, run, target, engine, writer)
            # with a reference, the chat prompts of the reference run cannot be rebuilt (their nonce was
            # random); only the fixed workloads compare
            session = Session(client, emit)
            run.calibration = (await session.calibrate()).as_dict()
            try:
                await workload_cells(session, opts, plan)
            finally:
                run.notes.extend(speed_notes(session, run.records, run.server, opts))
                if reference is not None:
                    n = apply_reference(run.records, reference[0], reference[1])
                    run.notes.append(
                        f"agreement: {n} output(s) compared with {reference[1]}"
                        if n
                        else f"agreement: no request matches one of {reference[1]} "
                        "(the same workloads, concurrency and repeats give the same ids)"
                    )
                    writer.flush()

    return _finish(writer, lambda: asyncio.run(main())), path


def run_context(
    target: Target,
    opts: ContextOptions,
    out: Path | None = None,
    label: str = "",
    progress: Progress | None = None,
    engine: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
    transport: Any = None,
) -> tuple[BenchRun, Path]:
    """``bench context``: prefill at each length and the needle grid."""
    run, path, writer, emit = _http_run("context", label, opts.as_dict(), target, out, cluster, progress)

    async def main() -> None:
        async with BenchClient(target, transport=transport) as client:
            await _probe(client, run, target, engine, writer)
            session = Session(client, emit)
            n_ctx = run.server.get("n_ctx")
            n_ctx = n_ctx if isinstance(n_ctx, int) else None
            if n_ctx is None or any(n + opts.max_tokens <= n_ctx for n in opts.lengths):
                run.calibration = (await session.calibrate()).as_dict()
            try:
                await context_cells(session, opts, n_ctx)
            finally:
                if not session.saw_cache_counts:
                    run.notes.append("the server reported no cached-token counts: cache hits cannot be detected")
                hits = [r.id for r in run.records if r.cache_hit]
                if hits:
                    run.notes.append(f"{len(hits)} request(s) hit the prompt cache: {', '.join(hits[:5])}")

    return _finish(writer, lambda: asyncio.run(main())), path


def parse_set(items: list[str]) -> list[dict[str, Any]]:
    """``["ubatch=512,1024", "ctx=4096"]`` -> every combination, in order."""
    axes: list[tuple[str, list[Any]]] = []
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name.strip() or not values.strip():
            raise UsageError(f"--set {item!r}: expected NAME=V1,V2,... (e.g. ubatch=512,1024,2048)")
        axes.append((name.strip(), [_value(v) for v in values.split(",") if v.strip()]))
    if not axes:
        raise UsageError("bench sweep needs at least one --set NAME=V1,V2,...")
    names = [a[0] for a in axes]
    return [dict(zip(names, combo)) for combo in itertools.product(*(a[1] for a in axes))]


def _value(text: str) -> Any:
    """A --set value: a whole number (``8k`` = 8192, as in ``--lengths``), else the text."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    if text[-1:] in "kK" and text[:-1].isdigit():
        return int(text[:-1]) * 1024
    return text


class Restarter(Protocol):
    """Starts the server with some settings; the cluster implementation goes through `up`."""

    def start(self, values: dict[str, Any]) -> tuple[Target, dict[str, Any]]: ...

    def finish(self) -> str: ...


def run_sweep(
    restarter: Restarter,
    points: list[dict[str, Any]],
    opts: SpeedOptions,
    out: Path | None = None,
    label: str = "",
    progress: Progress | None = None,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    engine: dict[str, Any] | None = None,
    transport: Any = None,
    plan: WorkloadPlan | None = None,
) -> tuple[BenchRun, Path]:
    """``bench sweep``: for each point restart, then the speed bench; one run file for all.

    Every point sends the same prompts (one nonce for the whole sweep; the server restarts in
    between, so nothing is cached across points).  With a speculation axis, the
    ``speculation=none`` point of each combination is run first (added when missing) and is the
    reference of the others' agreement.
    """
    points = with_baseline(points)
    plan = plan or plan_for(opts)
    nonce = secrets.token_hex(3)
    run = _new_run("sweep", label, opts.as_dict() | {"points": points, "workload_items": plan.describe()}, out)
    path = _out_path(run, out)
    writer = RunWriter(run, path)
    run.engine = engine or {}

    def body() -> None:
        try:
            for values in points:
                if on_point:
                    on_point(values)
                point = SweepPoint(values=values)
                run.points.append(point)
                try:
                    target, facts = restarter.start(values)
                except Exception as exc:  # noqa: BLE001 - one point failing to start is a result, not the end
                    point.error = str(exc)
                    writer.flush()
                    continue
                check_workload_target(target, opts)
                run.target = target.describe()

                def emit(rec: RequestRecord, point: SweepPoint = point) -> None:
                    writer.add(rec, point)
                    if progress:
                        progress(rec)

                async def main(
                    target: Target = target,
                    point: SweepPoint = point,
                    facts: dict[str, Any] = facts,
                    values: dict[str, Any] = values,
                ) -> None:
                    async with BenchClient(
                        target, transport=transport, max_connections=max(opts.concurrency) + 2
                    ) as client:
                        point.server = (await client.probe()) | {"cluster": facts}
                        writer.flush()
                        session = Session(client, emit, nonce=nonce)
                        await session.calibrate()
                        try:
                            await workload_cells(session, opts, plan, extra_cell=dict(values))
                        finally:
                            run.notes.extend(
                                f"{values}: {n}" for n in speed_notes(session, point.records, point.server, opts)
                            )

                asyncio.run(main())
                apply_baselines(run)
                writer.flush()
        finally:
            apply_baselines(run)
            run.notes.append(restarter.finish())

    return _finish(writer, body), path


def run_engine_bench(
    bench: Path,
    model: Path,
    rpc: list[str],
    opts: EngineBenchOptions,
    out: Path | None = None,
    label: str = "",
    engine: dict[str, Any] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    cluster: dict[str, Any] | None = None,
) -> tuple[BenchRun, Path]:
    """``bench engine``: llama-bench with the given RPC workers."""
    argv = llama_bench_argv(bench, model, rpc, opts)
    run = _new_run("engine", label, opts.as_dict() | {"argv": argv}, out)
    run.target = {"model": str(model), "rpc": rpc, "bench": str(bench)} | ({"cluster": cluster} if cluster else {})
    run.engine = engine or {}
    path = _out_path(run, out)
    writer = RunWriter(run, path)

    def row(r: dict[str, Any]) -> None:
        r["test"] = bench_test_label(r)
        run.engine_rows.append(r)
        writer.flush()
        if on_row:
            on_row(r)

    return _finish(writer, lambda: run_llama_bench(argv, row, log=path.with_suffix(".log"))), path
