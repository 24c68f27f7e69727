"""``splitserve demo``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .._assets import smollm2_path
from .._demo import DEFAULT_PROMPT, run_demo
from ..cluster import Event
from ..engine import BuildOptions
from ._app import app, make_console, maps_errors
from ._cluster import print_event
from ._engine import build_with_progress


@app.command("demo")
@maps_errors
def demo_cmd(
    keep: Annotated[bool, typer.Option("--keep", help="leave the cluster running and print its URL")] = False,
    prompt: Annotated[str, typer.Option(help="the chat message to send")] = DEFAULT_PROMPT,
    port: Annotated[
        int | None, typer.Option(help="the gateway's port, the endpoint clients use (default: a free one)")
    ] = None,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="also write the figures to this JSON file")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the figures as JSON on stdout (the rest goes to stderr)")
    ] = False,
) -> None:
    """SmolLM2-135M split over two local RPC workers: build or reuse the CPU engine, start
    the cluster, stream one chat reply, print speeds and per-worker memory, stop.

    Example: splitserve demo --keep
    """
    console = make_console(stderr=as_json)
    t0 = time.monotonic()
    smollm2_path()  # the model first: a missing package says its install command before a long build
    engine, _ = build_with_progress(BuildOptions(backend="cpu"))
    console.print(f"engine: {engine.key}")
    console.print("starting 2 RPC workers, llama-server (SmolLM2-135M-Instruct, layers split 1:1) and the gateway")

    text_out = sys.stderr if as_json else sys.stdout

    def on_text(piece: str) -> None:
        text_out.write(piece)
        text_out.flush()

    def on_event(event: Event) -> None:
        print_event(event)
        if event.kind == "ready":
            console.print(f"\nuser: {prompt}\nassistant: ", end="", markup=False)

    result = run_demo(
        engine,
        prompt=prompt,
        keep=keep,
        port=port,
        on_event=on_event,
        on_text=on_text,
    )
    print(file=text_out)
    pp = f"{result.prompt_per_second:.1f}" if result.prompt_per_second else "-"
    tg = f"{result.predicted_per_second:.1f}" if result.predicted_per_second else "-"
    console.print(
        f"\nprompt: {result.prompt_tokens} tokens at {pp} t/s (pp)   "
        f"generation: {result.completion_tokens} tokens at {tg} t/s (tg)"
    )
    table = Table("node", "device", "model MiB", "KV MiB", "compute MiB", title="memory per device")
    for d in result.memory:
        table.add_row(
            d["node"],
            d["device"],
            f"{d['model_bytes'] / 1048576:.2f}",
            f"{d['kv_bytes'] / 1048576:.2f}",
            f"{d['compute_bytes'] / 1048576:.2f}",
        )
    console.print(table)
    wall = time.monotonic() - t0
    console.print(f"model load {result.load_seconds:.2f} s, up {result.up_seconds:.2f} s, demo wall {wall:.1f} s")
    data = json.dumps(dict(vars(result), demo_wall_seconds=round(wall, 2)), indent=2) + "\n"
    if out:
        out.write_text(data)
    if as_json:
        sys.stdout.write(data)
    if keep:
        console.print(
            f"still running: {result.endpoint}  (OpenAI base URL {result.endpoint}/v1; "
            "stop with: splitserve down --name demo)",
            markup=False,
        )
    else:
        console.print("stopped everything")
