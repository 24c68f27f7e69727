"""``splitserve inspect`` and ``splitserve plan``: know before you launch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from .._errors import UsageError
from ..chat import NO_FORMAT_HINT, detect_format
from ..model import ModelInfo, inspect_model
from ..plan import CACHE_TYPES, GIB, Plan
from ._app import app, make_console, maps_errors

console = make_console()


def _gib(n: float) -> str:
    return f"{n / GIB:,.2f} GiB"


def _size(n: float) -> str:
    for unit, div in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= div:
            return f"{n / div:,.2f} {unit}"
    return f"{int(n)} B"


@app.command("inspect")
@maps_errors
def inspect_cmd(
    model: Annotated[Path, typer.Argument(help="a GGUF file (any shard of a split model)")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    layers: Annotated[bool, typer.Option("--layers", help="show the per-layer table")] = False,
) -> None:
    """Read a GGUF model's headers (all shards, never tensor data): shape, quant mix, KV geometry, experts.

    Example: splitserve inspect ~/models/MiniMax-M3-UD-IQ4_XS-00001-of-00006.gguf
    """
    info = inspect_model(model, tool_format=detect_format)
    if as_json:
        print(json.dumps(info.to_dict(), indent=2))
        return
    _print_inspect(info, layers)


def _print_inspect(m: ModelInfo, show_layers: bool) -> None:
    p = console.print
    p(f"{m.path}" + (f"  ({len(m.shards)} shards)" if len(m.shards) > 1 else ""), markup=False)
    p(f"  architecture   {m.architecture}" + ("" if m.known_architecture else "  (not known to splitserve: estimated)"))
    if m.name:
        p(f"  name           {m.name}", markup=False)
    p("  parameters     " + (f"{m.n_params / 1e9:,.2f} B" if m.n_params >= 1e9 else f"{m.n_params / 1e6:,.1f} M"))
    p(f"  file size      {_size(m.file_bytes)} ({m.file_bytes:,} bytes)")
    p(
        f"  layers         {m.n_layer} × (embd {m.n_embd}, heads {m.n_head}), vocab {m.n_vocab:,}, "
        f"context {m.n_ctx_train:,}"
    )
    kv = m.layers[0] if m.layers else None
    if kv:
        heads = sorted({layer.n_head_kv for layer in m.layers})
        swa = sum(1 for layer in m.layers if layer.swa)
        line = f"  KV             {'/'.join(map(str, heads))} KV heads × K {kv.k_dim} / V {kv.v_dim}"
        if m.mla:
            line += " (MLA: latent K, no V cache)"
        if swa:
            line += f"; {swa} sliding-window layers, window {m.n_swa}"
        if any(layer.extra_kv for layer in m.layers):
            line += f"; indexer cache on {sum(1 for layer in m.layers if layer.extra_kv)} layers"
        p(line)
    if m.n_expert:
        p(
            f"  experts        {m.n_expert} routed, {m.n_expert_used} used per token, {m.n_expert_shared} shared; "
            f"expert weights {_gib(m.expert_bytes)} of {_gib(m.weights_bytes)}"
        )
    p(
        f"  host tensors   {_size(sum(m.input_tensor_bytes))} (token embeddings stay on the head)"
        + ("; output tied to the embeddings" if m.tied_embeddings else "")
    )
    t = "embedded" if m.chat_template else "none embedded"
    if m.chat_template:
        t += f", tool calls: {m.tool_call_format or NO_FORMAT_HINT}"
    p(f"  chat template  {t}")
    if m.has_mtp:
        mtp = (
            f"{len(m.mtp_layers)} layer{'s' if len(m.mtp_layers) != 1 else ''} (blk.{m.mtp_layers[0]}.nextn.*): "
            'speculation = "draft-mtp" drafts with them'
        )
    elif not m.mtp_layers and m.nextn_predict_layers <= 0:
        mtp = 'none (speculation = "draft-mtp" needs MTP layers; the ngram-* types need nothing)'
    else:
        mtp = f"not usable: {m.mtp_problem}"
    p(f"  MTP            {mtp}", markup=False)
    table = Table("type", "tensors", "bytes", "share", title="quantisation mix", title_justify="left")
    total = sum(v["bytes"] for v in m.quant_mix.values()) or 1
    for name, v in m.quant_mix.items():
        table.add_row(name, str(v["tensors"]), _size(v["bytes"]), f"{v['bytes'] / total * 100:.1f}%")
    console.print(table)
    if show_layers:
        lt = Table("layer", "bytes", "experts", "KV heads", "K/V dim", "SWA", title="layers", title_justify="left")
        for layer in m.layers:
            lt.add_row(
                str(layer.index),
                _size(layer.weights_bytes),
                _size(layer.expert_bytes) if layer.moe else "",
                str(layer.n_head_kv),
                f"{layer.k_dim}/{layer.v_dim}",
                "yes" if layer.swa else "",
            )
        console.print(lt)
    for note in m.estimated:
        p(f"  estimated: {note}", markup=False)


def _flash(value: str) -> bool:
    v = value.lower()
    if v in ("on", "auto", "1", "true"):
        return True
    if v in ("off", "0", "false"):
        return False
    raise UsageError(f"--flash-attn {value!r}: use on, off or auto")


def _cache_type(flag: str, value: str | None) -> str | None:
    """A KV cache type as llama-server spells it (lower case), or a UsageError naming the flag."""
    if value is None:
        return None
    v = value.strip().lower()
    if v not in CACHE_TYPES:
        raise UsageError(f"{flag} {value!r}: not a KV cache type llama.cpp takes; use one of {', '.join(CACHE_TYPES)}")
    return v


def _split(value: str | None) -> tuple[float, ...] | None:
    if not value:
        return None
    try:
        return tuple(float(x) for x in value.replace("/", ",").split(","))
    except ValueError:
        raise UsageError(f"--tensor-split {value!r}: expected numbers separated by commas, e.g. 30,31") from None


@app.command("plan")
@maps_errors
def plan_cmd(
    model: Annotated[Path | None, typer.Argument(help="a GGUF file (any shard); default: the spec's model")] = None,
    node: Annotated[
        list[str] | None,
        typer.Option("--node", help="NAME=GIB[,device=KIND][,bw=GBPS], in llama.cpp's device order; repeatable"),
    ] = None,
    config: Annotated[Path | None, typer.Option("-c", "--config", help="a cluster spec (TOML)")] = None,
    ctx: Annotated[
        int | None,
        typer.Option(
            "--ctx",
            "--ctx-size",
            help="context size, all slots together (llama-server -c; default or 0: the model's training context)",
        ),
    ] = None,
    parallel: Annotated[int | None, typer.Option("--parallel", "-np", help="server slots (-np)  [default: 1]")] = None,
    kv_unified: Annotated[
        bool | None, typer.Option("--kv-unified/--no-kv-unified", "-kvu", help="one KV pool shared by all slots")
    ] = None,
    cache_type_k: Annotated[
        str | None, typer.Option("--cache-type-k", "-ctk", help="f16, q8_0, q4_0, ...  [default: f16]")
    ] = None,
    cache_type_v: Annotated[
        str | None, typer.Option("--cache-type-v", "-ctv", help="f16, q8_0, q4_0, ...  [default: f16]")
    ] = None,
    ubatch: Annotated[
        int | None, typer.Option("--ubatch", "--ubatch-size", "-ub", help="physical batch (-ub)  [default: 512]")
    ] = None,
    flash_attn: Annotated[
        str | None, typer.Option("--flash-attn", "-fa", help="on, off or auto  [default: on]")
    ] = None,
    tensor_split: Annotated[str | None, typer.Option("--tensor-split", "-ts", help="fix the split, e.g. 30,31")] = None,
    margin: Annotated[
        float | None, typer.Option("--margin", help="headroom to keep per node, GiB  [default: 1.0]")
    ] = None,
    host_node: Annotated[
        str | None,
        typer.Option(
            "--host-node",
            help="node whose memory also holds the head's host-side bytes (default: the first; "
            "'none' to leave them out)",
        ),
    ] = None,
    link_gbps: Annotated[float | None, typer.Option("--link-gbps", help="link bandwidth between nodes, Gbit/s")] = None,
    link_latency_us: Annotated[float | None, typer.Option("--link-latency-us", help="one hop's latency, µs")] = None,
    measure: Annotated[bool, typer.Option("--measure", help="with -c and the workers up: ask llama.cpp too")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Plan memory per node (weights, KV, compute), the layer split and --tensor-split, max context, decode bound.

    Example: splitserve plan MiniMax-M3-UD-IQ4_XS-00001-of-00006.gguf --node spark1=121,device=gb10 --node spark2=121,device=gb10 --ctx 65536 --cache-type-k q8_0 --cache-type-v q8_0
    """
    from ..cluster import PlanRequest, plan_report

    given: dict[str, Any] = {
        "ctx": ctx,
        "parallel": parallel,
        "unified": kv_unified,
        "cache_type_k": _cache_type("--cache-type-k", cache_type_k),
        "cache_type_v": _cache_type("--cache-type-v", cache_type_v),
        "ubatch": ubatch,
        "flash_attn": None if flash_attn is None else _flash(flash_attn),
        "tensor_split": _split(tensor_split),
        "margin_bytes": None if margin is None else int(margin * GIB),
        "link_gbps": link_gbps,
        "link_latency_us": link_latency_us,
    }
    request = PlanRequest(
        model=model,
        nodes=tuple(node or ()),
        config=config,
        overrides={k: v for k, v in given.items() if v is not None},
        host_node=host_node,
        measure=measure,
    )
    report = plan_report(request)
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        _print_plan(report.plan)
        if report.measured is not None:
            _print_measure(report.measured)
        elif report.topology is not None:
            for line in report.topology.lines():
                console.print(line, markup=False, soft_wrap=True)
    if report.refused:
        raise typer.Exit(3)


def _print_plan(plan: Plan) -> None:
    m, o = plan.model, plan.options
    p = console.print
    p(f"{m.path.name}: {m.architecture}, {m.n_layer} layers, weights {_gib(m.weights_bytes)}", markup=False)
    p(
        f"ctx {plan.ctx:,} × parallel {o.parallel}, KV {o.cache_type_k}/{o.cache_type_v}, ubatch {o.ubatch}, "
        f"flash attention {'on' if o.flash_attn else 'off'}"
    )
    t = Table(
        "node",
        "layers",
        "weights",
        "KV",
        "compute",
        "host",
        "total",
        "memory",
        "headroom",
        title="GiB per node",
        title_justify="left",
    )
    for n in plan.nodes:
        layers = f"{n.layers[0]}-{n.layers[1]}" if n.layers else "-"
        if n.has_output:
            layers += " +out"
        head = f"{n.headroom_bytes / GIB:,.2f}"
        if n.headroom_bytes < 0:
            head = f"[red]{head}[/red]"
        elif n.headroom_bytes < o.margin_bytes:
            head = f"[yellow]{head}[/yellow]"
        g = [
            f"{x / GIB:,.2f}"
            for x in (n.weights_bytes, n.kv_bytes, n.compute_bytes, n.host_bytes, n.total_bytes, n.memory_bytes)
        ]
        t.add_row(n.name, layers, g[0], g[1], g[2], g[3] if n.host_bytes else "", g[4], g[5], head)
    console.print(t)
    p(f"host side (head process): weights {_size(plan.host_weights_bytes)}, compute {_size(plan.host_compute_bytes)}")
    kvpt = plan.kv_bytes_per_token
    p(
        "KV per token: "
        + ", ".join(f"{k.split('/')[0]} {_size(v)}" for k, v in kvpt.items() if k.split("/")[0] == k.split("/")[1])
    )
    p(f"--tensor-split {','.join(f'{x:g}' for x in plan.tensor_split)}")
    p(f"llama-server flags: {' '.join(plan.server_args())}", markup=False)
    mc = ", ".join(
        f"{k} {v['ctx']:,}" + (" (training limit)" if v.get("limited_by_training_context") else "")
        if v.get("ctx") is not None
        else f"{k} n/a"
        for k, v in plan.max_ctx.items()
    )
    p(f"max context (margin {_gib(o.margin_bytes)}/node): {mc}")
    p(
        "parallel: "
        + ", ".join(f"{x['parallel']}×{x['ctx_per_slot']:,}" for x in plan.parallel)
        + " (slots × context per slot)"
    )
    if plan.decode_tps_upper_bound is not None:
        full = plan.decode_tps_upper_bound_full_ctx or 0.0
        p(
            f"decode upper bound: {plan.decode_tps_upper_bound:.1f} tok/s ({_size(plan.bytes_per_token)} read per token; "
            f"{full:.1f} tok/s with a full KV cache)"
        )
    if plan.hop_seconds is not None:
        p(f"link: {plan.hop_seconds * 1e6:.1f} µs per hop")
    if plan.speculation:
        from ..plan import speculation_summary as summary

        asked = f" (spec: {','.join(o.speculation)})" if o.speculation else ""
        p(f"speculation{asked}: {summary(plan.speculation)}", markup=False)
    for w in plan.warnings:
        p(f"[yellow]warning:[/yellow] {w}")
    for e in plan.estimated:
        p(f"estimated: {e}", markup=False)
    if not plan.fits:
        short = [n.name for n in plan.nodes if n.headroom_bytes < 0]
        p(f"[red]does not fit[/red] on {', '.join(short)}: lower --ctx, use a smaller KV type or quant, or add a node")


def _print_measure(rows: list[dict[str, object]]) -> None:
    t = Table("node", "what", "planned", "measured", "error")
    for r in rows:
        planned, measured = int(r["planned"]), int(r["measured"])  # type: ignore[call-overload]
        err = f"{(planned - measured) / measured * 100:+.1f}%" if measured else ""
        t.add_row(str(r["node"]), str(r["what"]), _size(planned), _size(measured), err)
    console.print(t)
