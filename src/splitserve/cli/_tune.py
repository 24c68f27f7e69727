"""``splitserve tune``: search the server settings for one workload, restarting through `up`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import UsageError
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
    from ..bench import SpeedOptions, prepare_tune, rewrite_tune_report, tune, tune_request
    from ..cluster import load_spec
    from ._bench import ints, workload_options

    path = [Path()]
    cluster = renamed(config, old_cluster, "-c", "--cluster")
    try:
        if report_of is not None:
            console.print(f"report written to {rewrite_tune_report(report_of, compare_with)}", markup=False)
            return
        if cluster is None:
            raise UsageError("give -c cluster.toml (the cluster to tune), or --report RUN.json")
        spec = load_spec(cluster)
        opts = SpeedOptions(
            prompt_tokens=ints(prompt_tokens, "--prompt-tokens"),
            concurrency=[c for c in ints(concurrency, "--concurrency") if c > 0] or [1],
            repeat=repeat,
        )
        plan = workload_options(opts, workload, workload_file, recording, drop_reasoning, gen_tokens, ignore_eos)
        req = tune_request(
            spec,
            opts,
            plan,
            workload=workload,
            metric=metric,
            axes=set_,
            budget_runs=budget_runs,
            grid=grid,
            min_gain=min_gain,
            confirm=confirm,
            compare_with=compare_with,
            out=out,
            label=label,
            ignore_eos=ignore_eos,
            api_key=api_key,
        )
        on_event = _renderer(grid, path)
        prepared = prepare_tune(req, on_event)
        if dry_run:
            _dry_run(prepared)
            return
        result = tune(req, on_event, plan=prepared)
        if result.interrupted:
            err.print(
                f"splitserve: interrupted; what was measured is kept in {result.path} (marked interrupted)",
                markup=False,
            )
            raise typer.Exit(130)
    except KeyboardInterrupt:
        err.print(f"splitserve: interrupted; what was measured is kept in {path[0]}", markup=False)
        raise typer.Exit(130) from None


def _renderer(grid: bool, path: list[Path]) -> Callable[[Any], None]:
    """Prints tune's events: progress on stderr, what was written and the best point on stdout
    (with ``grid``, the first 20 ruled-out points); keeps the run file's path in ``path[0]`` for an
    interrupt."""
    from ..bench import (
        BestFound,
        BestSpecWritten,
        NodeNote,
        PointFailed,
        PointMeasured,
        PointRuledOut,
        PointStarted,
        ReportWritten,
        TuneEvent,
        TuneStarted,
        TuneWarning,
    )

    def on_event(ev: TuneEvent) -> None:
        match ev:
            case TuneWarning(text=text):
                err.print(f"note: {text}", markup=False)
            case TuneStarted():
                path[0] = ev.path
                for n in ev.notes:
                    err.print(f"note: {n}", markup=False)
                err.print(
                    f"tune: {'every point of ' if ev.grid else ''}a grid of {ev.size} points over "
                    + ", ".join(f"{a.name} ({len(a.values)})" for a in ev.axes)
                    + (f"; at most {ev.budget} runs" if ev.budget else "")
                    + f"; metric {ev.metric.label}, workload {ev.workload}",
                    markup=False,
                )
            case PointRuledOut(label=label, why=why, n=n):
                if not grid or n <= 20:
                    err.print(f"  ruled out: {label}: {why}", markup=False)
            case PointStarted(run=run, budget=budget, label=label):
                err.print(f"run {run}{f'/{budget}' if budget else ''}: {label}: restarting", markup=False)
            case PointMeasured(step=step, unit=unit):
                ms = step.measurement
                err.print(
                    f"  {ms.score:,.2f} {unit} ({min(ms.samples):,.2f}–{max(ms.samples):,.2f}, "
                    f"n={len(ms.samples)}): {step.verdict}",
                    markup=False,
                )
            case PointFailed(error=error):
                err.print(f"  failed: {error}", markup=False)
            case NodeNote(node=node, message=message):
                err.print(f"  {node}: {message}", markup=False)
            case ReportWritten(run_path=run_path, report=report):
                console.print(f"run written to {run_path}", markup=False)
                console.print(f"report written to {report}", markup=False)
            case BestFound():
                vs = f" (start {ev.start_score:,.2f})" if ev.start_score is not None else ""
                console.print(
                    f"best: {ev.label}: {ev.score:,.2f} {ev.unit}{vs}; {ev.runs} run(s), "
                    f"grid of {ev.size} points, {ev.excluded} ruled out; stopped: {ev.stopped}",
                    markup=False,
                )
            case BestSpecWritten(path=best, changes=changes):
                changed = ", ".join(f"{k} = {v if v is not None else '(default)'}" for k, v in changes.items())
                console.print(
                    f"best spec written to {best}" + (f" ({changed})" if changed else " (the spec's own settings won)"),
                    markup=False,
                )

    return on_event


def _dry_run(plan: Any) -> None:
    """Prints a :class:`~splitserve.bench.TunePlan`: the axes, the grid, the start, the points the
    first pass may try (every point with --grid) and what the planner rules out."""
    from ..bench import point_label

    grid = plan.request.grid
    for n in plan.notes:
        console.print(f"note: {n}", markup=False)
    console.print(
        "axes (in search order): "
        + "; ".join(f"{a.name} = {', '.join('auto' if v is None else str(v) for v in a.values)}" for a in plan.axes),
        markup=False,
    )
    allowed = plan.allowed()
    console.print(
        f"grid: {plan.size} points, {allowed} allowed by the planner, {plan.size - allowed} ruled out"
        + ("" if grid else f"; tune measures at most {plan.budget}"),
        markup=False,
    )
    console.print(f"start: {point_label(plan.start)}", markup=False)
    console.print(
        "points "
        + (
            "the grid measures:"
            if grid
            else "the first pass may try (later passes vary the axes again around a new best):"
        ),
        markup=False,
    )
    for p, why in plan.rows():
        console.print(
            f"  {'ruled out' if why else 'try':9}  {point_label(p)}" + (f"  ({why})" if why else ""), markup=False
        )
    by_reason = plan.ruled_elsewhere()
    if by_reason:
        console.print(
            f"also ruled out elsewhere in the grid: {sum(map(len, by_reason.values()))} point(s)", markup=False
        )
        for why, ps in list(by_reason.items())[:12]:
            console.print(f"  {len(ps):4} × {why}  (e.g. {point_label(ps[0])})", markup=False)
        if len(by_reason) > 12:
            console.print(f"  … and {len(by_reason) - 12} other reason(s)", markup=False)
