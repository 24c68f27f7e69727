"""``splitserve eval run|list|report|compare``: agentic tool-use evaluation of any endpoint."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from .._errors import UsageError
from ._app import API_KEY_ENV, API_KEY_HELP, app, make_console, maps_errors

eval_app = typer.Typer(
    help="Agentic tool-use evaluation: Toolery-format or built-in scenarios against any "
    "OpenAI-compatible endpoint, with failure causes and paired comparison.\n\n"
    "Example: splitserve eval run ~/toolery/scenarios --url http://127.0.0.1:8000 --trials 3 -o runs/local",
    no_args_is_help=True,
)
app.add_typer(eval_app, name="eval")
console = make_console()
err = make_console(stderr=True)

SuiteArg = Annotated[
    str,
    typer.Argument(
        help="a folder of scenario files (Toolery format, searched recursively), or the built-in suite: builtin"
    ),
]


def _need_eval_extra() -> None:
    from importlib.util import find_spec

    for module in ("inspect_ai", "jsonschema", "yaml"):
        if find_spec(module) is None:
            raise UsageError(f"eval needs the eval extra ({module} is missing): pip install 'splitserve[eval]'")


def _load(suite: str) -> Any:
    _need_eval_extra()
    from ..eval import load_suite

    return load_suite(suite)


@eval_app.command("list")
@maps_errors
def list_cmd(
    suite: SuiteArg,
    tier: Annotated[str | None, typer.Option(help="only this tier: easy, medium, hard, very_hard")] = None,
    category: Annotated[str | None, typer.Option(help="only this category")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object instead of a table")] = False,
) -> None:
    """What `eval run` would run: id, tier, category, tools, checks; and every file that did not load, with why.

    Exits 1 when any file could not be loaded.

    Example: splitserve eval list ~/toolery/scenarios
    """
    if suite == "bfcl" or suite.startswith("bfcl:"):
        _list_bfcl(suite, as_json)
        return
    loaded = _load(suite)
    chosen = loaded.select(tier, category)
    rows = [
        {
            "id": s.id,
            "tier": s.tier,
            "category": s.category,
            "tools": s.tools,
            "checks": [c.check for c in s.scoring.required],
            "forbidden": [c.check for c in s.scoring.forbidden],
            "source": s.source,
        }
        for s in chosen
    ]
    problems = [{"path": p.path, "reason": p.reason} for p in loaded.problems]
    if as_json:
        console.print_json(json.dumps({"suite": suite, "scenarios": rows, "problems": problems}))
    else:
        from rich.table import Table

        table = Table("id", "tier", "category", "tools", "checks", box=None, pad_edge=False)
        for row in rows:
            table.add_row(row["id"], row["tier"], row["category"], ",".join(row["tools"]), ",".join(row["checks"]))
        console.print(table)
        console.print(f"{len(rows)} scenarios", markup=False)
        for p in problems:
            err.print(f"splitserve: error: {p['path']}: {p['reason']}", markup=False)
    for w in loaded.warnings:
        err.print(f"splitserve: warning: {w.path}: {w.reason}", markup=False)
    if problems:
        raise typer.Exit(1)


def _list_bfcl(suite: str, as_json: bool) -> None:
    """`eval list bfcl[:categories]`: BFCL's categories with their item counts."""
    _need_eval_extra()
    from ..eval import bfcl_categories

    rows = bfcl_categories(suite)
    if as_json:
        console.print_json(json.dumps({"suite": suite, "categories": rows}))
        return
    from rich.table import Table

    table = Table("category", "group", "tier", "items", "graded by", box=None, pad_edge=False)
    for row in rows:
        table.add_row(row["category"], row["group"], row["tier"], str(row["items"]), row["checker"])
    console.print(table)
    console.print(
        f"{sum(r['items'] for r in rows)} items in {len(rows)} categories (bfcl-eval {rows[0]['version']})",
        markup=False,
    )


@eval_app.command("run")
@maps_errors
def run_cmd(
    suite: SuiteArg,
    url: Annotated[
        str | None,
        typer.Option("--url", help="the OpenAI-compatible endpoint, e.g. the gateway's http://127.0.0.1:8000"),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("-c", "--config", help="a cluster spec: its running endpoint (instead of --url)")
    ] = None,
    model: Annotated[str | None, typer.Option(help="model name to send (default: the endpoint's first)")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar=API_KEY_ENV, help=API_KEY_HELP)] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(hidden=True, help="old: name of the environment variable holding the API key (use --api-key)"),
    ] = None,
    trials: Annotated[int, typer.Option(min=1, help="trials per scenario")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="scenarios in flight at once")] = 1,
    tier: Annotated[str | None, typer.Option(help="only this tier")] = None,
    category: Annotated[str | None, typer.Option(help="only this category")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="only the first N scenarios (after the filters)")] = None,
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="run folder; a rerun with the same folder continues it")
    ] = None,
    time_scale: Annotated[
        float | None,
        typer.Option(min=0.01, help="factor on every scenario's timeout (default: from the measured decode speed)"),
    ] = None,
    max_tokens: Annotated[int, typer.Option(min=1, help="completion tokens per model turn")] = 2048,
    label: Annotated[str, typer.Option(help="a name for this run in reports")] = "",
    sandbox: Annotated[
        str,
        typer.Option(
            help="where workspace scenarios run their files, git, shell and tests: local (a fresh temp dir) "
            "or docker (a container without network; recommended for untrusted models)"
        ),
    ] = "local",
    api: Annotated[
        str,
        typer.Option(
            "--api",
            help="the wire API the agent loop speaks: chat (/v1/chat/completions), messages "
            "(/v1/messages, as Claude Code) or responses (/v1/responses, as Codex)",
        ),
    ] = "chat",
    report: Annotated[bool, typer.Option("--report/--no-report", help="write the report when the run ends")] = True,
) -> None:
    """Run every scenario of SUITE against the endpoint through its chat completions API with tools.

    The time budget of each scenario scales with the decode speed measured at the start; timeouts are
    reported apart from quality failures. Ctrl-C keeps every finished trial; rerun to continue.

    Example: splitserve eval run ~/toolery/scenarios --url http://127.0.0.1:8000 --trials 3 --concurrency 4 -o runs/local

    Example: splitserve eval run ~/toolery/scenarios -c cluster.toml --limit 10
    """
    from ..eval import RunOptions, run

    if (url is None) == (config is None):
        raise UsageError("give exactly one of --url URL or -c cluster.toml")
    key = api_key
    if config is not None:
        from ..bench import cluster_target

        target = cluster_target(config)[0]
        url = target.url
        key = key or target.api_key
    assert url is not None  # one of --url and -c, and -c gave its endpoint
    run_dir = out or Path("eval-runs") / _default_name(url, model)
    try:
        if sandbox not in ("local", "docker"):
            raise UsageError(f"--sandbox {sandbox!r}: use local or docker")
        if api not in ("chat", "messages", "responses"):
            raise UsageError(f"--api {api!r}: use chat, messages or responses")
        if tier is not None and tier not in ("easy", "medium", "hard", "very_hard"):
            raise UsageError(f"--tier {tier!r}: use easy, medium, hard or very_hard")
        if api_key_env is not None:
            key = os.environ.get(api_key_env)
            if not key:
                raise UsageError(f"--api-key-env {api_key_env}: that environment variable is not set")
        loaded = _load(suite)
        for p in loaded.problems:
            err.print(f"warning: skipped {p.path}: {p.reason}", markup=False)
        for w in loaded.warnings:
            err.print(f"warning: {w.path}: {w.reason}", markup=False)
        chosen = loaded.select(tier, category, limit)
        if not chosen:
            raise UsageError(f"suite {suite!r}: no scenario matches --tier {tier} --category {category}")
        if sandbox == "docker" and any(s.sandbox is not None for s in chosen):
            from ..eval import docker_problem

            if (problem := docker_problem()) is not None:
                raise UsageError(problem)
        opts = RunOptions(
            suite=suite,
            url=url,
            out=run_dir,
            model=model,
            api_key=key,
            trials=trials,
            concurrency=concurrency,
            tier=tier,
            category=category,
            limit=limit,
            time_scale=time_scale,
            label=label,
            max_tokens=max_tokens,
            sandbox=sandbox,
            api=api,
        )
        with Progress(
            TextColumn("eval"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=err,
        ) as bar:
            task = bar.add_task("eval", total=len(chosen) * trials, rate="")

            def progress(done: int, total: int, passes: int, scored: int) -> None:
                rate = f"pass {100 * passes / scored:.1f}% of {scored}" if scored else ""
                bar.update(task, completed=done, total=total, rate=rate)

            path = run(opts, chosen, progress)
    except KeyboardInterrupt:
        err.print(
            f"splitserve: interrupted; finished trials are kept in {run_dir}; rerun the same command to continue",
            markup=False,
        )
        raise typer.Exit(130) from None
    console.print(f"run written to {path}", markup=False)
    if report:
        from ..eval import write_report

        written = write_report(run_dir, run_dir / "report")
        console.print(f"report written to {written[0]}", markup=False)


def _default_name(url: str, model: str | None) -> str:
    import re
    import time

    host = re.sub(r"^\w+://", "", url).split("/")[0]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{model or host}-{time.strftime('%Y%m%d-%H%M%S')}")


def _run_dir(path: Path, what: str) -> Path:
    from ..eval import run_file

    if not run_file(path).is_file():
        raise UsageError(f"{what} {path}: no run file ({run_file(path)} does not exist)")
    return path


@eval_app.command("report")
@maps_errors
def report_cmd(
    run: Annotated[Path, typer.Argument(help="a run folder written by `eval run`")],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="folder for report.md, summary.json, PNGs (default RUN/report)")
    ] = None,
) -> None:
    """Markdown + JSON + PNG report of one run: pass rates per tier and category with 95% intervals, failure causes.

    Example: splitserve eval report runs/local
    """
    from ..eval import write_report

    _need_eval_extra()
    written = write_report(_run_dir(run, "RUN"), out or run / "report")
    for path in written:
        console.print(f"wrote {path}", markup=False)


@eval_app.command("compare")
@maps_errors
def compare_cmd(
    run_a: Annotated[Path, typer.Argument(help="run A (the reference, e.g. the API)")],
    run_b: Annotated[Path, typer.Argument(help="run B (e.g. the local quant)")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="folder for compare.md, compare.json, PNGs")] = None,
) -> None:
    """Paired comparison of two runs by scenario: per-tier deltas with bootstrap intervals, exact McNemar,
    the minimum detectable difference, the scenarios that flipped each way, failure causes side by side.

    Example: splitserve eval compare runs/api runs/local -o runs/api-vs-local
    """
    from ..eval import write_compare

    _need_eval_extra()
    written = write_compare(
        _run_dir(run_a, "RUN_A"), _run_dir(run_b, "RUN_B"), out or Path(f"compare-{run_a.name}-vs-{run_b.name}")
    )
    for path in written:
        console.print(f"wrote {path}", markup=False)
