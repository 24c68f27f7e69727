"""``splitserve engine prefill-cache``: fill a worker's ggml-rpc-server ``-c`` cache from its
own copy of the model, so the head's first load finds every big tensor there.
(Registered on the ``engine`` group by :mod:`._engine`.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ._app import make_console, maps_errors

console = make_console()


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
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="instead of --layers: the head's --tensor-split (e.g. 1,3 or the plan's), with --device",
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option("--device", help="with --split: this worker's device index(es) in it, e.g. 1 or 1,2"),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="hashing threads (default: every core)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Hash the model's tensors over 10 MiB (FNV-1a, as the engine does) and write them as the
    worker's cache files, so the head's load sends hashes instead of tensor bytes.

    Example: splitserve engine prefill-cache --model /models/M.gguf --layers 24-48
    (or --split 1,1 --device 1: the layers llama.cpp gives device 1 of that --tensor-split)
    """
    from .._errors import UsageError
    from ..cluster import layers_of_devices, model_layers, parse_layers, prefill_cache

    if split is not None or device is not None:
        if layers is not None or split is None or device is None:
            raise UsageError("give either --layers A-B, or --split and --device together")
        try:
            shares = [float(x) for x in split.split(",")]
            devs = [int(x) for x in device.split(",")]
        except ValueError:
            raise UsageError(f"--split {split!r} / --device {device!r}: numbers separated by commas") from None
        chosen: tuple[int, int] | None = layers_of_devices(model_layers(model), shares, devs)
    else:
        chosen = parse_layers(layers) if layers else None
    report = prefill_cache(model, cache_dir, chosen, jobs)
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
