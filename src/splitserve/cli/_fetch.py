"""``splitserve fetch REPO`` and ``splitserve fetch --verify DIR``."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from .._errors import UsageError
from ..fetch import (
    FetchEvents,
    FetchFailed,
    FetchOptions,
    FetchPlan,
    fetch_repo,
    plan_line,
    size_label,
    verify_dir,
)
from ._app import app, make_console, maps_errors

console = make_console()


class _RichEvents(FetchEvents):
    """Prints the plan; then per-file bars (while a file is in flight) and a total bar, on stderr."""

    def __init__(self, stack: contextlib.ExitStack[bool | None], *, as_json: bool, quiet: bool) -> None:
        self.stack, self.as_json, self.quiet = stack, as_json, quiet
        self._progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        self.lock = threading.Lock()
        self.pending: dict[str, int] = {}
        self.flushed = 0.0

    @property
    def progress(self) -> Progress:
        assert self._progress is not None, "transfer events come after planned()"
        return self._progress

    def planned(self, plan: FetchPlan, dry_run: bool) -> None:
        if not self.as_json:
            console.print(plan_line(plan))
            for w in plan.warnings:
                console.print(f"[yellow]warning:[/yellow] {w}")
        if dry_run:
            return
        self._progress = self.stack.enter_context(
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=make_console(stderr=True),
                disable=self.quiet,
                transient=False,
                refresh_per_second=4,
            )
        )
        self.total = self.progress.add_task("total", total=plan.total, completed=plan.total - plan.todo)

    def file_started(self, path: str, size: int, resumed: int) -> None:
        with self.lock:
            if path not in self.tasks:
                label = path if len(path) <= 48 else "…" + path[-47:]
                self.tasks[path] = self.progress.add_task(label, total=size, completed=resumed)
        if resumed:
            self.note(f"{path}: resuming, {size_label(resumed)} already on disk")

    def advance(self, path: str, nbytes: int) -> None:
        # called per socket read from every connection: add up, hand rich a sum now and then
        with self.lock:
            self.pending[path] = self.pending.get(path, 0) + nbytes
            now = time.monotonic()
            if now - self.flushed < 0.1:
                return
            self.flushed = now
            pending, self.pending = self.pending, {}
        for p, n in pending.items():
            task = self.tasks.get(p)
            if task is not None:
                self.progress.advance(task, n)
            self.progress.advance(self.total, n)

    def flush(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, {}
        for p, n in pending.items():
            if (task := self.tasks.get(p)) is not None:
                self.progress.advance(task, n)
            self.progress.advance(self.total, n)

    def file_state(self, path: str, state: str, detail: str = "") -> None:
        self.flush()
        task = self.tasks.get(path)
        if state == "done":
            if task is not None:
                self.progress.remove_task(task)
                self.tasks.pop(path, None)
            self.progress.console.print(f"[green]✓[/green] {path} verified", highlight=False)
        elif state == "refetch" and task is not None:
            t = next(t for t in self.progress.tasks if t.id == task)
            done = t.completed
            self.progress.reset(task, total=t.total, completed=0)
            self.progress.advance(self.total, -done)
        elif state == "failed":
            self.progress.console.print(f"[red]✗[/red] {detail}", markup=True, highlight=False)
        elif state == "checking":
            self.progress.console.print(f"[dim]{path}: already on disk, checking its hash[/dim]")

    def note(self, message: str) -> None:
        self.progress.console.print(f"[dim]{message}[/dim]", highlight=False)


def _verify(directory: Path, as_json: bool) -> None:
    err = make_console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("verifying", total=None)
        report = verify_dir(directory, lambda path, n: bar.advance(task, n))
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        table = Table("file", "size", "status", "detail")
        for i in report.items:
            style = "green" if i.status == "ok" else "red"
            table.add_row(i.path, size_label(i.size), f"[{style}]{i.status}[/{style}]", i.detail)
        console.print(table)
        for p in report.problems:
            console.print(f"[red]problem:[/red] {p}")
        bad = sum(1 for i in report.items if i.status != "ok")
        console.print(
            f"{len(report.items) - bad} of {len(report.items)} files verified"
            + ("" if report.ok else "; run `splitserve fetch REPO --dir DIR` again to re-fetch what is wrong")
        )
    if not report.ok:
        raise typer.Exit(1)


@app.command("fetch")
@maps_errors
def fetch_cmd(
    repo: Annotated[str | None, typer.Argument(help="repository, e.g. unsloth/MiniMax-M2-GGUF")] = None,
    files: Annotated[
        list[str] | None,
        typer.Argument(
            help="files to fetch (paths or globs, like --include), as in `huggingface-cli download REPO FILE...`",
            show_default=False,
        ),
    ] = None,
    revision: Annotated[str | None, typer.Option(help="branch, tag or commit (default main)")] = None,
    include: Annotated[
        list[str] | None, typer.Option("--include", help="glob of files to fetch (path or file name); repeatable")
    ] = None,
    quant: Annotated[
        list[str] | None,
        typer.Option("--quant", help="quant whose GGUF shard set to fetch, e.g. UD-IQ4_XS; repeatable"),
    ] = None,
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir", "--local-dir", help="target folder (default ./NAME); shards keep the repository's layout"
        ),
    ] = None,
    connections: Annotated[int, typer.Option("--connections", "-n", help="parallel range requests")] = 16,
    token: Annotated[
        str | None,
        typer.Option("--token", help="hub token (default: HF_TOKEN or the stored login)", show_default=False),
    ] = None,
    stall_timeout: Annotated[
        float, typer.Option(help="seconds without a byte before a connection is dropped and retried")
    ] = 60.0,
    retries: Annotated[int, typer.Option(help="failed attempts in a row before a file fails")] = 10,
    backoff: Annotated[float, typer.Option(help="first retry delay in seconds", hidden=True)] = 1.0,
    part_size: Annotated[int, typer.Option(help="part size in MiB (resume unit)", hidden=True)] = 64,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would be fetched")] = False,
    verify: Annotated[
        Path | None, typer.Option("--verify", help="re-check a finished download folder instead of fetching")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress display")] = False,
) -> None:
    """Download a model repository's files (e.g. one quant's GGUF shards) reliably.

    Lists the files through the hub API (HF_TOKEN and HF_ENDPOINT are honoured), then pulls
    each one with parallel HTTP range requests from its storage URL, resumable after any
    interruption (state file next to each partial), and renames it into place only once its
    size and SHA-256 match the hub's.

    Example: splitserve fetch unsloth/MiniMax-M2-GGUF --quant UD-IQ4_XS --dir /models/m2
    """
    try:
        if verify is not None:
            if repo is not None or files:
                raise UsageError("--verify DIR checks a folder against its manifest; leave out REPO")
            _verify(verify, as_json)
            return
        if repo is None:
            raise UsageError("name a repository (e.g. splitserve fetch org/NAME-GGUF) or --verify DIR")
        options = FetchOptions(
            repo_id=repo,
            revision=revision,
            includes=list(include or []) + list(files or []),
            quants=list(quant or []),
            dir=directory,
            connections=connections,
            stall_timeout=stall_timeout,
            retries=retries,
            backoff=backoff,
            part_size=part_size << 20,
            token=token,
        )
        with contextlib.ExitStack() as stack:
            run = fetch_repo(options, dry_run=dry_run, on_event=_RichEvents(stack, as_json=as_json, quiet=quiet))
    except KeyboardInterrupt:
        make_console(stderr=True).print("interrupted; run the same command again to resume")
        raise typer.Exit(130) from None
    except FetchFailed as exc:
        if as_json:
            print(json.dumps(exc.result.as_dict(), indent=2))
        raise  # @maps_errors prints it
    if as_json:
        print(json.dumps(run.as_dict(), indent=2))
    elif run.result is None:
        table = Table("file", "size", "action")
        for f in run.plan.files:
            table.add_row(f.remote.path, size_label(f.remote.size), f.action)
        console.print(table)
    else:
        console.print(run.summary())
        for o in run.refetched:
            console.print(f"[yellow]note:[/yellow] {o.path}: {o.message}")
        if run.spec_lines:
            console.print("for a cluster spec (splitserve up -c FILE), paste:")
        for line in run.spec_lines:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
