"""``splitserve demo``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .._demo import DEFAULT_PROMPT, run_demo
from ..cluster import Event
from ..engine import BuildOptions
from ._app import app, make_console, maps_errors
from ._cluster import print_event
from ._engine import build_with_progress

console = make_console()


@app.command("demo")
@maps_errors
def demo_cmd(
    keep: Annotated[bool, typer.Option("--keep", help="leave the cluster running and print its URL")] = False,
    prompt: Annotated[str, typer.Option(help="the chat message to send")] = DEFAULT_PROMPT,
    port: Annotated[
        int | None, typer.Option(help="the gateway's port, the endpoint clients use (default: a free one)")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the figures to this JSON file")] = None,
) -> None:
    """SmolLM2-135M split over two local RPC workers: build or reuse the CPU engine, start
    the cluster, stream one chat reply, print speeds and per-worker memory, stop.

    Example: splitserve demo --keep
    """
    t0 = time.monotonic()
    engine, _ = build_with_progress(BuildOptions(backend="cpu"))
    console.print(f"engine: {engine.key}")
    console.print("starting 2 RPC workers, llama-server (SmolLM2-135M-Instruct, layers split 1:1) and the gateway")

    def on_text(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

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
    print()
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
    if json_out:
        data = dict(vars(result), demo_wall_seconds=round(wall, 2))
        json_out.write_text(json.dumps(data, indent=2) + "\n")
    if keep:
        console.print(
            f"still running: {result.endpoint}  (OpenAI base URL {result.endpoint}/v1; "
            "stop with: splitserve down --name demo)",
            markup=False,
        )
    else:
        console.print("stopped everything")
