"""``splitserve tune``: search the server settings for one workload, restarting through `up`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import ClusterError, UsageError
from ._app import API_KEY_ENV, API_KEY_HELP, app, make_console, maps_errors, renamed

console = make_console()
err = make_console(stderr=True)


@app.command("tune")
@maps_errors
def tune_cmd(
    config: Annotated[
        Path | None, typer.Option("-c", "--config", help="the cluster spec to tune (restarted per point)")
    ] = None,
    workload: Annotated[
        str, typer.Option("--workload", help="what to be fast at: chat (random words), copy, edit, json, agent")
    ] = "chat",
    metric: Annotated[
        str, typer.Option("--metric", help="decode, prefill (t/s, server timings), ttft, e2e (ms), throughput (t/s)")
    ] = "decode",
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="NAME=V1,V2,... an axis to search (ubatch, batch, threads, speculation, kv, ctk, ctv, "
            "any speed option); repeat per axis. Default: speculation, threads, kv, ubatch, "
            "batch",
        ),
    ] = None,
    budget_runs: Annotated[
        int | None,
        typer.Option(
            "--budget-runs",
            min=1,
            help="most restarts (default: a third of the grid's allowed points, at least one full pass)",
        ),
    ] = None,
    grid: Annotated[
        bool, typer.Option("--grid", help="measure every allowed point of the grid (to check the search against)")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="list the points and what the planner rules out; start nothing")
    ] = False,
    prompt_tokens: Annotated[str, typer.Option(help="chat prompt sizes in server tokens")] = "512",
    gen_tokens: Annotated[
        int | None,
        typer.Option(min=1, help="tokens per chat request (default 128); the output cap of the other workloads"),
    ] = None,
    concurrency: Annotated[str, typer.Option(help="requests in flight together, e.g. 1 or 4")] = "1",
    repeat: Annotated[int, typer.Option(min=1, help="requests (batches) per point: its samples")] = 2,
    ignore_eos: Annotated[
        bool | None,
        typer.Option(
            "--ignore-eos/--no-ignore-eos",
            help="generate exactly --gen-tokens (default: on for chat, off for the other workloads)",
        ),
    ] = None,
    workload_file: Annotated[
        list[Path] | None,
        typer.Option("--workload-file", help="a source file for copy/edit instead of the shipped ones (repeatable)"),
    ] = None,
    recording: Annotated[Path | None, typer.Option("--recording", help="an agent recording to replay")] = None,
    drop_reasoning: Annotated[
        bool, typer.Option("--drop-reasoning", help="agent: send earlier turns without reasoning_content")
    ] = False,
    min_gain: Annotated[
        float,
        typer.Option(
            "--min-gain", min=0.0, max=1.0, help="the least relative gain a point needs to win, on top of the noise"
        ),
    ] = 0.02,
    confirm: Annotated[
        bool,
        typer.Option(
            "--confirm/--no-confirm",
            help="measure the start twice (the noise floor) and a winning point "
            "again (a second restart) before it is taken",
        ),
    ] = True,
    compare_with: Annotated[
        Path | None,
        typer.Option(
            "--compare",
            help="a grid run (tune --grid, or bench sweep) of the same cluster: the report adds "
            "runs and best points side by side",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="run file (.json) or folder (default ./tune-runs); the best spec (.toml) and the "
            "report folder go next to it",
        ),
    ] = None,
    label: Annotated[str, typer.Option("--label", help="a name for this run in reports")] = "",
    report_of: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="only (re)write the report of an earlier tune run file (with --compare: against a "
            "grid run made after it); starts nothing",
        ),
    ] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar=API_KEY_ENV, help=API_KEY_HELP)] = None,
    old_cluster: Annotated[Path | None, typer.Option("--cluster", hidden=True, help="old name of -c/--config")] = None,
) -> None:
    """Find the fastest server settings for a workload: ubatch, batch, threads, speculation type and
    KV cache type, within what the planner says fits, each point restarted through `up` and measured
    like `bench sweep`.  Writes the best spec (your spec with the winning [server] values) and a
    report of every point.

    Example: splitserve tune -c cluster.toml --workload copy

    Example: splitserve tune -c cluster.toml --set ubatch=128,512 --set speculation=none,ngram-mod --dry-run

    Example: splitserve tune --report tune-runs/tune-A.json --compare tune-runs/tune-B.json
    """
    import psutil

    from ..bench import (
        ClusterRestarter,
        PlannerCheck,
        SpeedOptions,
        TuneOptions,
        default_axes,
        default_budget,
        engine_provenance,
        first_pass_points,
        grid_points,
        grid_size,
        load_run,
        metric_for,
        order_axes,
        parse_axes,
        point_label,
        run_tune,
        server_values,
        start_point,
        tune_out_path,
        with_server,
        write_best_spec,
        write_tune_report,
    )
    from ..cluster import load_spec
    from ._bench import ints, workload_options

    path = Path()
    cluster = renamed(config, old_cluster, "-c", "--cluster")
    try:
        if report_of is not None:
            _report_only(report_of, compare_with)
            return
        if cluster is None:
            raise UsageError("give -c cluster.toml (the cluster to tune), or --report RUN.json")
        spec = load_spec(cluster)
        m = metric_for(metric)
        opts = SpeedOptions(
            prompt_tokens=ints(prompt_tokens, "--prompt-tokens"),
            concurrency=[c for c in ints(concurrency, "--concurrency") if c > 0] or [1],
            repeat=repeat,
        )
        plan = workload_options(opts, workload, workload_file, recording, drop_reasoning, gen_tokens, ignore_eos)
        if len(opts.workloads) != 1:
            raise UsageError(f"--workload {workload}: tune optimizes for one workload; give one of them")
        chosen = opts.workloads[0]
        if m.name == "prefill" and chosen == "agent":
            err.print(
                "note: agent turns after the first are served from the prompt cache; their prefill "
                "figures are few tokens",
                markup=False,
            )
        cores = (psutil.cpu_count(logical=False) or 1, psutil.cpu_count() or 1)
        check = PlannerCheck(spec)
        axes = parse_axes(set_) if set_ else default_axes(spec.server, check.supported_types(), cores)
        for a in axes:
            for v in a.values:
                with_server(spec, server_values({a.name: v}))  # every value is valid before anything starts
        axes = order_axes(axes, m)
        start, start_notes = start_point(spec.server, axes, cores)
        allowed = sum(1 for p in grid_points(axes) if not check(p))
        budget = budget_runs if budget_runs is not None else (None if grid else default_budget(axes, allowed, confirm))
        compare_run = load_run(compare_with) if compare_with is not None else None
        size = grid_size(axes)
        if dry_run:
            _dry_run(
                axes,
                start,
                start_notes + check.notes,
                check,
                grid,
                budget,
                size,
                first_pass_points,
                grid_points,
                point_label,
            )
            return
        path = tune_out_path(out)
        for n in start_notes + check.notes:
            err.print(f"note: {n}", markup=False)
        err.print(
            f"tune: {'every point of ' if grid else ''}a grid of {size} points over "
            + ", ".join(f"{a.name} ({len(a.values)})" for a in axes)
            + (f"; at most {budget} runs" if budget else "")
            + f"; metric {m.label}, workload {chosen}",
            markup=False,
        )
        seen: set[str] = set()

        def feasible(point: dict[str, Any]) -> str | None:
            why = check(point)
            label_ = point_label(point)
            if why and label_ not in seen:
                seen.add(label_)
                if not grid or len(seen) <= 20:
                    err.print(f"  ruled out: {label_}: {why}", markup=False)
            return why

        count = {"n": 0}

        def on_point(point: dict[str, Any]) -> None:
            count["n"] += 1
            err.print(
                f"run {count['n']}{f'/{budget}' if budget else ''}: {point_label(point)}: restarting", markup=False
            )

        def on_step(step: Any) -> None:
            ms = step.measurement
            if ms.ok:
                err.print(
                    f"  {ms.score:,.2f} {m.unit} ({min(ms.samples):,.2f}–{max(ms.samples):,.2f}, "
                    f"n={len(ms.samples)}): {step.verdict}",
                    markup=False,
                )
            else:
                err.print(f"  failed: {ms.error}", markup=False)

        def on_event(ev: Any) -> None:
            if ev.kind == "stale":
                err.print(f"  {ev.node}: {ev.message}", markup=False)

        restarter = ClusterRestarter(spec, on_event=on_event, ignore_eos=ignore_eos, api_key=api_key)
        topts = TuneOptions(
            metric=m.name, workload=chosen, budget=budget, grid=grid, min_gain=min_gain, confirm=confirm
        )
        run, path, result = run_tune(
            restarter,
            spec,
            axes,
            start,
            opts,
            topts,
            feasible,
            path,
            label,
            plan,
            engine_provenance(spec),
            on_point=on_point,
            on_step=on_step,
            notes=start_notes + check.notes,
        )
        best_path = None
        if result.best is not None and result.stopped not in ("interrupted", "failed"):
            best_path, changes = write_best_spec(spec, result, path.with_suffix(".toml"), path, chosen)
        md, _pngs = write_tune_report(run, path.with_suffix(""), compare_run, best_path)
        console.print(f"run written to {path}", markup=False)
        console.print(f"report written to {md}", markup=False)
        if result.stopped == "interrupted":
            err.print(
                f"splitserve: interrupted; what was measured is kept in {path} (marked interrupted)", markup=False
            )
            raise typer.Exit(130)
        if result.stopped == "failed" or result.best is None:
            raise ClusterError(f"tune: no point could be measured: {(result.notes or ['see ' + str(path)])[-1]}")
        bm, sm = result.best_measurement, result.start_measurement()
        assert bm is not None
        vs = f" (start {sm.score:,.2f})" if sm is not None and sm.score is not None else ""
        console.print(
            f"best: {point_label(result.best)}: {bm.score:,.2f} {m.unit}{vs}; {result.runs} run(s), "
            f"grid of {size} points, {len(result.excluded)} ruled out; stopped: {result.stopped}",
            markup=False,
        )
        if best_path is not None:
            changed = ", ".join(f"{k} = {v if v is not None else '(default)'}" for k, v in changes.items())
            console.print(
                f"best spec written to {best_path}"
                + (f" ({changed})" if changed else " (the spec's own settings won)"),
                markup=False,
            )
    except KeyboardInterrupt:
        err.print(f"splitserve: interrupted; what was measured is kept in {path}", markup=False)
        raise typer.Exit(130) from None


def _report_only(run_path: Path, compare_with: Path | None) -> None:
    from ..bench import load_run, write_tune_report

    run = load_run(run_path)
    if "tune" not in run.summary:
        raise UsageError(f"--report {run_path}: not a tune run (no tune summary); `bench report` renders other runs")
    grid = load_run(compare_with) if compare_with is not None else None
    best = run_path.with_suffix(".toml")
    md, _ = write_tune_report(run, run_path.with_suffix(""), grid, best if best.is_file() else None)
    console.print(f"report written to {md}", markup=False)


def _dry_run(
    axes: Any,
    start: dict[str, Any],
    notes: list[str],
    check: Any,
    grid: bool,
    budget: int | None,
    size: int,
    first_pass_points: Any,
    grid_points: Any,
    point_label: Any,
) -> None:
    for n in notes:
        console.print(f"note: {n}", markup=False)
    console.print(
        "axes (in search order): "
        + "; ".join(f"{a.name} = {', '.join('auto' if v is None else str(v) for v in a.values)}" for a in axes),
        markup=False,
    )
    everything = grid_points(axes)
    ruled = [(p, check(p)) for p in everything]
    allowed = sum(1 for _, why in ruled if not why)
    console.print(
        f"grid: {size} points, {allowed} allowed by the planner, {size - allowed} ruled out"
        + ("" if grid else f"; tune measures at most {budget}"),
        markup=False,
    )
    console.print(f"start: {point_label(start)}", markup=False)
    shown = everything if grid else first_pass_points(axes, start)
    console.print(
        "points "
        + (
            "the grid measures:"
            if grid
            else "the first pass may try (later passes vary the axes again around a new best):"
        ),
        markup=False,
    )
    for p in shown:
        why = check(p)
        console.print(
            f"  {'ruled out' if why else 'try':9}  {point_label(p)}" + (f"  ({why})" if why else ""), markup=False
        )
    if not grid:
        others = [(p, why) for p, why in ruled if why and p not in shown]
        if others:
            console.print(f"also ruled out elsewhere in the grid: {len(others)} point(s)", markup=False)
            by_reason: dict[str, list[dict[str, Any]]] = {}
            for p, why in others:
                by_reason.setdefault(why, []).append(p)
            for why, ps in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))[:12]:
                console.print(f"  {len(ps):4} × {why}  (e.g. {point_label(ps[0])})", markup=False)
            if len(by_reason) > 12:
                console.print(f"  … and {len(by_reason) - 12} other reason(s)", markup=False)
