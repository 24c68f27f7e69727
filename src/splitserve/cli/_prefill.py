"""``splitserve engine prefill-cache``: fill a worker's ggml-rpc-server ``-c`` cache from its
own copy of the model, so the head's first load finds every big tensor there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ._app import make_console, maps_errors
from ._engine import engine_app

console = make_console()


@engine_app.command("prefill-cache")
@maps_errors
def prefill_cache_cmd(
    model: Annotated[
        Path, typer.Option("--model", "-m", help="this node's copy of the GGUF (any shard of a split one)")
    ],
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="the worker's cache (default: the one `ggml-rpc-server -c` uses here: $LLAMA_CACHE/rpc, "
            "else ~/.cache/llama.cpp/rpc)",
        ),
    ] = None,
    layers: Annotated[
        str | None,
        typer.Option(
            "--layers",
            help="the layers this worker holds, A-B inclusive; the model's n_layer is the output layer "
            "(default: every layer and the output)",
        ),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="hashing threads (default: every core)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Hash the model's tensors over 10 MiB (FNV-1a, as the engine does) and write them as the
    worker's cache files, so the head's load sends hashes instead of tensor bytes.

    Example: splitserve engine prefill-cache --model /models/M.gguf --layers 24-48
    """
    from ..cluster import parse_layers, prefill_cache

    report = prefill_cache(model, cache_dir, parse_layers(layers) if layers else None, jobs)
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
        return
    gib = report.bytes_hashed / 2**30
    how = "native" if report.native else f"pure Python ({report.native_reason})"
    console.print(
        f"cache {report.cache_dir}: {report.tensors} tensors ({gib:.2f} GiB), {report.written} written, "
        f"{report.present} already there; {report.seconds:.1f} s, hashing {report.hash_gbps_per_core():.2f} GB/s "
        f"per core ({how}, {report.jobs} threads)",
        markup=False,
        highlight=False,
    )
