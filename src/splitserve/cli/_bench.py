"""``splitserve bench speed|context|sweep|engine|report``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .._errors import UsageError
from ._app import API_KEY_ENV, API_KEY_HELP, app, make_console, maps_errors, renamed

if TYPE_CHECKING:
    from ..bench import Target

PROBES = 3  # calibration requests before the cells (splitserve.bench._speed.PROBE_WORDS)

bench_app = typer.Typer(
    help="Measure a served model: speed, concurrency, long context, sweeps, llama-bench, reports.\n\n"
    "Example: splitserve bench speed --url http://127.0.0.1:8000 --concurrency 1,4",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")
console = make_console()
err = make_console(stderr=True)

UrlOpt = Annotated[
    str | None, typer.Option("--url", help="an OpenAI-compatible endpoint, e.g. the gateway's http://127.0.0.1:8000")
]
SpecOpt = Annotated[Path | None, typer.Option("-c", "--config", help="a cluster spec (the cluster `up` started)")]
OldSpecOpt = Annotated[Path | None, typer.Option("--cluster", hidden=True, help="old name of -c/--config")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="model name to send (default: the server's first)")]
KeyOpt = Annotated[str | None, typer.Option("--api-key", envvar=API_KEY_ENV, help=API_KEY_HELP)]
ApiOpt = Annotated[
    str,
    typer.Option(
        "--api",
        help="chat (/v1/chat/completions), completions (/v1/completions), or an agent's own API: "
        "messages (/v1/messages, Claude Code) or responses (/v1/responses, Codex)",
    ),
]
OutOpt = Annotated[Path | None, typer.Option("--out", "-o", help="run file (.json) or folder (default ./bench-runs)")]
LabelOpt = Annotated[str, typer.Option("--label", help="a name for this run in reports")]
ReportOpt = Annotated[bool, typer.Option("--report/--no-report", help="also write the Markdown report and plots")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=1, help="seconds to wait for one response")]
WorkloadOpt = Annotated[
    str, typer.Option("--workload", help="chat (random words), copy, edit, json, agent; a comma list runs several")
]
WorkloadFileOpt = Annotated[
    list[Path] | None,
    typer.Option("--workload-file", help="a source file for copy/edit instead of the shipped ones (repeatable)"),
]
RecordingOpt = Annotated[
    Path | None,
    typer.Option(
        "--recording", help="an agent recording (JSON: messages + tools, OpenAI format) instead of the shipped one"
    ),
]
DropReasoningOpt = Annotated[
    bool,
    typer.Option(
        "--drop-reasoning", help="agent: send earlier assistant turns without reasoning_content, as the OpenAI SDK does"
    ),
]
GenTokensOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="tokens per chat request (default 128); for the other workloads the output cap "
        "(default copy/edit 1024, json 512, agent 256)",
    ),
]
IgnoreEosOpt = Annotated[
    bool | None,
    typer.Option(
        "--ignore-eos/--no-ignore-eos",
        help="ask the server to generate exactly --gen-tokens (default: on for chat, off for the other workloads)",
    ),
]


def ints(text: str, what: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        mult = 1024 if part.endswith("k") else 1
        try:
            value = int(float(part.rstrip("k")) * mult)
        except ValueError:
            raise UsageError(f"{what}: {part!r} is not a whole number") from None
        if value < 0:
            raise UsageError(f"{what}: {value} is negative")
        out.append(value)
    if not out:
        raise UsageError(f"{what}: give at least one value")
    return out


def speed_options(prompt_tokens: str, concurrency: str, repeat: int, **more: Any) -> Any:
    """The speed bench's options from the command's ``--prompt-tokens``, ``--concurrency`` (0s
    dropped; none left: 1) and ``--repeat``."""
    from ..bench import SpeedOptions

    return SpeedOptions(
        prompt_tokens=ints(prompt_tokens, "--prompt-tokens"),
        concurrency=[c for c in ints(concurrency, "--concurrency") if c > 0] or [1],
        repeat=repeat,
        **more,
    )


def resolve_target(
    url: str | None, spec: Path | None, model: str | None, api_key: str | None, api: str
) -> tuple[Target, dict[str, Any], dict[str, Any] | None]:
    """(Target, engine provenance, cluster facts) for ``--url`` or ``-c``."""
    from ..bench import Target

    if api not in ("chat", "completions", "messages", "responses"):
        raise UsageError(f"--api {api!r}: use chat, completions, messages or responses")
    if (url is None) == (spec is None):
        raise UsageError("give exactly one of --url URL or -c cluster.toml")
    gpu_warnings()
    if url is not None:
        kind = cast(Literal["chat", "completions", "messages", "responses"], api)  # checked above
        return Target(url=url, model=model, api_key=api_key, api=kind), {}, None
    from ..bench import cluster_facts, cluster_target

    assert spec is not None  # exactly one of url and spec, and url is None
    target, engine, cluster = cluster_target(spec, api=api)
    target.model = model
    if api_key:
        target.api_key = api_key
    return target, engine, cluster_facts(cluster)


def gpu_warnings() -> None:
    """Before a benchmark: a GPU here that is throttled or held in a low power state is said
    (the run header records every GPU's clocks)."""
    from ..cluster import local_gpu_state

    for w in local_gpu_state().warnings():
        err.print(f"warning: {w}", markup=False)


@contextmanager
def progress_bar(total: int, what: str) -> Iterator[Callable[[Any], None]]:
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=err,
        transient=False,
    ) as bar:
        task = bar.add_task(what, total=total, last="")

        def step(rec: Any) -> None:
            cell = ", ".join(f"{k}={v}" for k, v in rec.cell.items() if k not in ("kind", "repeat", "words"))
            status = "cache HIT" if rec.cache_hit else ("error" if rec.error else "")
            verdict = rec.extra.get("verdict", "")
            bar.update(task, advance=1, last=f"{rec.kind} {cell} {verdict} {status}".strip())

        yield step


def workload_options(
    opts: Any,
    workload: str,
    files: list[Path] | None,
    recording: Path | None,
    drop_reasoning: bool,
    gen_tokens: int | None,
    ignore_eos: bool | None,
) -> Any:
    """Fill the workload fields of ``opts`` and resolve the workloads' files (errors before any
    request); returns the plan."""
    from ..bench import parse_workloads, plan_for

    opts.workloads = parse_workloads(workload)
    opts.workload_files = [str(f) for f in files or []]
    opts.recording = str(recording) if recording else None
    opts.drop_reasoning = drop_reasoning
    opts.gen_tokens = gen_tokens or 128
    opts.max_tokens = gen_tokens
    opts.workload_ignore_eos = bool(ignore_eos)
    if files and not {"copy", "edit"} & set(opts.workloads):
        raise UsageError("--workload-file is for the copy and edit workloads; add --workload copy or edit")
    if recording and "agent" not in opts.workloads:
        raise UsageError("--recording is for the agent workload; add --workload agent")
    return plan_for(opts)


def summary_renderables(run: Any) -> list[Any]:
    """What a bench command prints when it ends: which run, model and machine, the headline
    and the cells, as rich renderables (the tables of :mod:`splitserve.bench._summary`)."""
    from rich.table import Table
    from rich.text import Text

    from ..bench import caption, summary_tables

    out: list[Any] = [Text(caption([run]), style="bold")]
    for title, head, rows in summary_tables(run):
        table = Table(title=title, title_justify="left", title_style="bold")
        for i, h in enumerate(head):
            table.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
        for row in rows:
            table.add_row(*row)
        out.append(table)
    return out


def finish(run: Any, path: Path, report: bool) -> None:
    """Notes to stderr; the summary tables, then the files written, to stdout."""
    for note in run.notes:
        err.print(f"note: {note}", markup=False)
    for item in summary_renderables(run):
        console.print(item)
    console.print(f"run written to {path}", markup=False)
    if report:
        from ..bench import load_run, write_report

        md, _plots = write_report([load_run(path)], path.with_suffix(""))
        console.print(f"report written to {md}", markup=False)


def interrupted(path: Path) -> typer.Exit:
    err.print(f"splitserve: interrupted; what was measured is kept in {path} (marked interrupted)", markup=False)
    return typer.Exit(130)


@bench_app.command("speed")
@maps_errors
def speed_cmd(
    url: UrlOpt = None,
    config: SpecOpt = None,
    model: ModelOpt = None,
    api_key: KeyOpt = None,
    api: ApiOpt = "chat",
    prompt_tokens: Annotated[str, typer.Option(help="prompt sizes in server tokens, e.g. 512,4096")] = "512",
    gen_tokens: GenTokensOpt = None,
    concurrency: Annotated[str, typer.Option(help="requests in flight together, e.g. 1,2,4,8")] = "1",
    repeat: Annotated[int, typer.Option(min=1, help="batches per cell")] = 3,
    ignore_eos: IgnoreEosOpt = None,
    reuse_prompt: Annotated[
        bool, typer.Option(help="send one prompt again and again (to see the cache-hit detector work)")
    ] = False,
    workload: WorkloadOpt = "chat",
    workload_file: WorkloadFileOpt = None,
    recording: RecordingOpt = None,
    drop_reasoning: DropReasoningOpt = False,
    reference: Annotated[
        Path | None,
        typer.Option(
            "--reference",
            help="a run of the same workloads without speculation: each output's agreement with it is recorded",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="run file (.json) or folder (default bench-runs/ beside the -c spec, else ./bench-runs)"
        ),
    ] = None,
    label: LabelOpt = "",
    report: ReportOpt = True,
    timeout: TimeoutOpt = 600.0,
    old_cluster: OldSpecOpt = None,
) -> None:
    """Prefill and decode speed, TTFT / ITL / end-to-end latency and throughput per concurrency level.

    Every chat prompt is unique; requests the server served from its prompt cache are flagged.
    The copy/edit/json/agent workloads send fixed prompts (greedy, fixed seed) and record decode
    speed, draft acceptance and, with --reference, agreement with the reference run's outputs.

    Example: splitserve bench speed --url http://127.0.0.1:8000 --prompt-tokens 512,4096 --concurrency 1,2,4,8

    Example: splitserve bench speed --url http://127.0.0.1:8000 --workload copy,edit,json,agent --reference base.json
    """
    from ..bench import run_path, run_speed

    path = Path()
    try:
        spec_file = renamed(config, old_cluster, "-c", "--cluster")
        target, engine, facts = resolve_target(url, spec_file, model, api_key, api)
        target.ignore_eos = True if ignore_eos is None else ignore_eos
        target.timeout_s = timeout
        opts = speed_options(prompt_tokens, concurrency, repeat, reuse_prompt=reuse_prompt)
        plan = workload_options(opts, workload, workload_file, recording, drop_reasoning, gen_tokens, ignore_eos)
        if reference is not None:
            if not reference.is_file():
                raise UsageError(f"--reference {reference}: no such run file")
            opts.reference = str(reference)
        path = run_path(out, "speed", spec_file)  # the report too (--no-report: none): the live page shows both
        with progress_bar(opts.total_requests(plan) + PROBES, "bench speed") as step:
            run, path = run_speed(target, opts, path, label, step, engine or None, facts, plan=plan)
        finish(run, path, report)
    except KeyboardInterrupt:
        raise interrupted(path) from None


@bench_app.command("context")
@maps_errors
def context_cmd(
    url: UrlOpt = None,
    config: SpecOpt = None,
    model: ModelOpt = None,
    api_key: KeyOpt = None,
    api: ApiOpt = "chat",
    lengths: Annotated[str, typer.Option(help="prompt lengths in tokens (k = 1024), e.g. 8k,64k,128k")] = "8k",
    needle: Annotated[bool, typer.Option(help="hide a needle and grade its retrieval")] = True,
    depths: Annotated[str, typer.Option(help="needle depths, 0 = start, 1 = end")] = "0.1,0.5,0.9",
    control: Annotated[
        bool,
        typer.Option(help="add an unanswerable cell per length (asks for a needle never inserted; must be a miss)"),
    ] = False,
    max_tokens: Annotated[int, typer.Option(min=1, help="answer budget per request")] = 32,
    repeat: Annotated[int, typer.Option(min=1)] = 1,
    out: OutOpt = None,
    label: LabelOpt = "",
    report: ReportOpt = False,
    timeout: TimeoutOpt = 3600.0,
    old_cluster: OldSpecOpt = None,
) -> None:
    """Long-prompt prefill speed and needle-in-a-haystack retrieval, graded by string match.

    Example: splitserve bench context --url http://127.0.0.1:8000 --lengths 8k,64k --depths 0.1,0.5,0.9
    """
    from ..bench import ContextOptions, parse_depths, parse_lengths, run_context, run_path

    path = Path()
    try:
        target, engine, facts = resolve_target(
            url, renamed(config, old_cluster, "-c", "--cluster"), model, api_key, api
        )
        target.timeout_s = timeout
        opts = ContextOptions(
            lengths=parse_lengths(lengths),
            depths=parse_depths(depths),
            needle=needle,
            control=control,
            max_tokens=max_tokens,
            repeat=repeat,
        )
        path = run_path(out, "context")
        with progress_bar(len(opts.cells()) + PROBES, "bench context") as step:
            run, path = run_context(target, opts, path, label, step, engine or None, facts)
        finish(run, path, report)
    except KeyboardInterrupt:
        raise interrupted(path) from None


@bench_app.command("sweep")
@maps_errors
def sweep_cmd(
    set_: Annotated[
        list[str],
        typer.Option(
            "--set",
            help="NAME=V1,V2,... (ubatch, batch, ctx, parallel, fa, "
            "ctk, ctv, threads, speculation, spec_* fields; the spec's topology and replica_nodes: "
            "topology=split,replicas compares the two on the same nodes); "
            "repeat for a grid",
        ),
    ],
    prompt_tokens: Annotated[str, typer.Option(help="prompt sizes in server tokens")] = "512",
    gen_tokens: GenTokensOpt = None,
    concurrency: Annotated[str, typer.Option(help="requests in flight together, e.g. 1,4")] = "1",
    repeat: Annotated[int, typer.Option(min=1)] = 3,
    ignore_eos: IgnoreEosOpt = None,
    workload: WorkloadOpt = "chat",
    workload_file: WorkloadFileOpt = None,
    recording: RecordingOpt = None,
    drop_reasoning: DropReasoningOpt = False,
    out: OutOpt = None,
    label: LabelOpt = "",
    report: ReportOpt = False,
    config: Annotated[Path | None, typer.Option("-c", "--config", help="the cluster spec to restart per point")] = None,
    api_key: KeyOpt = None,
    old_cluster: OldSpecOpt = None,
) -> None:
    """Restart the cluster (through `up`) for each setting and run the speed bench at each point.

    Every point sends the same prompts.  With --set speculation=..., a speculation=none point runs
    first (added when missing) and is the reference of the others' agreement; the report has decode
    t/s per speculation type and workload next to that baseline.

    Example: splitserve bench sweep -c cluster.toml --set ubatch=512,1024,2048 --prompt-tokens 4096

    Example: splitserve bench sweep -c cluster.toml --set speculation=none,ngram-simple,ngram-mod --workload copy,edit,agent

    Example: splitserve bench sweep -c cluster.toml --set topology=split,replicas --concurrency 1,4,16
    """
    from ..bench import ClusterRestarter, engine_provenance, run_path, run_sweep

    path = Path()
    try:
        spec, points = sweep_points(renamed(config, old_cluster, "-c", "--cluster"), set_)
        opts = speed_options(prompt_tokens, concurrency, repeat)
        plan = workload_options(opts, workload, workload_file, recording, drop_reasoning, gen_tokens, ignore_eos)
        path = run_path(out, "sweep")
        restarter = ClusterRestarter(spec, on_event=restart_events, ignore_eos=ignore_eos, api_key=api_key)
        with progress_bar(len(points) * (opts.total_requests(plan) + PROBES), "bench sweep") as step:
            run, path = run_sweep(
                restarter,
                points,
                opts,
                path,
                label,
                step,
                on_point=lambda v: err.print(f"sweep point {v}: restarting", markup=False),
                engine=engine_provenance(spec),
                plan=plan,
            )
        finish(run, path, report)
    except KeyboardInterrupt:
        raise interrupted(path) from None


def sweep_points(cluster: Path | None, set_: list[str]) -> tuple[Any, list[dict[str, Any]]]:
    """The spec a sweep restarts and its points (``--set``, with the speculation baseline), each
    checked as a spec before anything restarts."""
    from ..bench import parse_set, with_baseline, with_server
    from ..cluster import load_spec

    if cluster is None:
        raise UsageError("give -c cluster.toml (the cluster to restart per point)")
    spec = load_spec(cluster)
    points = with_baseline(parse_set(set_))
    for values in points:
        with_server(spec, values)  # every point is a valid spec before anything restarts
    return spec, points


def restart_events(ev: Any) -> None:
    """A sweep's restarts: a node that is ready, or stale, is said (dim) on stderr."""
    if ev.kind in ("ready", "stale"):
        err.print(f"[dim]{ev.node}: {ev.message}[/dim]")


@bench_app.command("engine")
@maps_errors
def engine_cmd(
    cluster: SpecOpt = None,
    model: Annotated[Path | None, typer.Option("-m", "--model", help="GGUF (without -c)")] = None,
    rpc: Annotated[str | None, typer.Option(help="RPC workers host:port,... (without -c)")] = None,
    engine: Annotated[
        str | None, typer.Option(help="engine key or folder (default: the newest / the cluster's)")
    ] = None,
    prompt_tokens: Annotated[str, typer.Option("-p", "--prompt-tokens", help="pp sizes")] = "512",
    gen_tokens: Annotated[str, typer.Option("-n", "--gen-tokens", help="tg sizes")] = "128",
    depth: Annotated[str | None, typer.Option("-d", "--depth", help="context depths, e.g. 0,4096")] = None,
    ubatch: Annotated[
        str | None, typer.Option("--ubatch", "-ub", "--ubatch-size", help="ubatch sizes, e.g. 512,1024,2048")
    ] = None,
    repetitions: Annotated[int, typer.Option("-r", "--repetitions", min=1)] = 3,
    flash_attn: Annotated[str | None, typer.Option("--fa", "-fa", "--flash-attn", help="on or off")] = None,
    out: OutOpt = None,
    label: LabelOpt = "",
    report: ReportOpt = False,
    old_cluster: OldSpecOpt = None,
) -> None:
    """llama-bench (in-process pp/tg, no HTTP) with the cluster's --rpc workers.

    With -c the cluster's head is stopped for the duration (an RPC worker serves one client at a
    time) and brought back afterwards.

    Example: splitserve bench engine -c cluster.toml -p 512,4096 -n 128
    """
    from ..bench import run_path

    path = Path()
    cluster = renamed(cluster, old_cluster, "-c", "--cluster")
    try:
        opts = engine_options(prompt_tokens, gen_tokens, depth, ubatch, repetitions, flash_attn)
        if cluster is None and model is not None and not model.is_file():
            raise UsageError(f"-m {model}: no such model file")
        path = run_path(out, "engine")
        with engine_bar(opts) as on_row:
            if cluster is not None:
                if model or rpc:
                    raise UsageError("with -c the model and workers come from the spec; drop -m/--rpc")
                run, path = engine_on_cluster(cluster, engine, opts, path, label, on_row)
            else:
                if model is None:
                    raise UsageError("give -c cluster.toml, or -m MODEL.gguf [--rpc host:port,...]")
                run, path = engine_on_workers(model, rpc, engine, opts, path, label, on_row)
        finish(run, path, report)
    except KeyboardInterrupt:
        raise interrupted(path) from None


def engine_options(
    prompt_tokens: str, gen_tokens: str, depth: str | None, ubatch: str | None, repetitions: int, fa: str | None
) -> Any:
    """llama-bench's options from ``bench engine``'s flags."""
    from ..bench import EngineBenchOptions

    if fa is not None and fa.lower() not in ("on", "off", "1", "0"):
        raise UsageError(f"--flash-attn {fa!r}: use on or off")
    return EngineBenchOptions(
        prompt_tokens=ints(prompt_tokens, "-p"),
        gen_tokens=ints(gen_tokens, "-n"),
        depths=ints(depth, "-d") if depth else [],
        ubatch=ints(ubatch, "--ubatch") if ubatch else [],
        repetitions=repetitions,
        flash_attn=fa.lower() if fa else None,
    )


OnRow = Callable[[dict[str, Any]], None]
"""Told each llama-bench row as it comes."""


@contextmanager
def engine_bar(opts: Any) -> Iterator[OnRow]:
    """A progress bar of llama-bench's tests; yields the callback that counts a row and prints it."""
    total = len(opts.prompt_tokens) + len(opts.gen_tokens)
    total *= max(1, len(opts.depths)) * max(1, len(opts.ubatch))
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    ) as bar:
        task = bar.add_task("bench engine (llama-bench)", total=total)

        def on_row(row: dict[str, Any]) -> None:
            bar.update(task, advance=1)
            bar.console.print(
                f"{row['test']}: {row.get('avg_ts', 0):.2f} ± {row.get('stddev_ts', 0):.2f} t/s", markup=False
            )

        yield on_row


def engine_on_cluster(
    cluster: Path, engine: str | None, opts: Any, path: Path, label: str, on_row: OnRow
) -> tuple[Any, Path]:
    """llama-bench with the spec's model and workers, its head stopped meanwhile."""
    from ..bench import cluster_facts, run_engine_bench, workers_only
    from ..cluster import load_spec
    from ..engine import get_engine

    spec = load_spec(cluster)
    eng = get_engine(engine) if engine else None
    if spec.server.ubatch and not opts.ubatch:
        opts.ubatch = [spec.server.ubatch]
    with workers_only(spec, eng) as (endpoints, head_engine):
        return run_engine_bench(
            head_engine.bench,
            spec.model,
            endpoints,
            opts,
            path,
            label,
            head_engine.provenance,
            on_row,
            cluster_facts(spec),
        )


def engine_on_workers(
    model: Path, rpc: str | None, engine: str | None, opts: Any, path: Path, label: str, on_row: OnRow
) -> tuple[Any, Path]:
    """llama-bench with ``-m`` and the ``--rpc`` workers given."""
    from ..bench import run_engine_bench
    from ..engine import get_engine

    eng = get_engine(engine)
    return run_engine_bench(
        eng.bench, model, [r for r in (rpc or "").split(",") if r], opts, path, label, eng.provenance, on_row
    )


@bench_app.command("report")
@maps_errors
def report_cmd(
    runs: Annotated[list[Path], typer.Argument(help="run files; two or more are compared with ratios")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="folder for report.md and the PNGs")] = None,
    plots: Annotated[bool, typer.Option(help="draw PNG plots")] = True,
    decode_bound: Annotated[
        float | None,
        typer.Option(help="decode upper bound in t/s (bandwidth / bytes per token) to state the efficiency"),
    ] = None,
) -> None:
    """Render run files as Markdown tables and PNG plots; several runs side by side with ratios.

    Example: splitserve bench report bench-runs/speed-a.json bench-runs/speed-b.json -o report/
    """
    from ..bench import load_run, write_report

    loaded = [load_run(p) for p in runs]
    folder = out or (runs[0].with_suffix("") if len(runs) == 1 else Path("bench-report"))
    md, pngs = write_report(loaded, folder, decode_bound, with_plots=plots)
    print(md.read_text())
    err.print(f"report written to {md}" + (f" with {len(pngs)} plot(s)" if pngs else ""), markup=False)
