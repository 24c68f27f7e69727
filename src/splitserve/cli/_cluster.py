"""``splitserve up|down|status|logs|preflight|run|systemd``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from .._errors import ClusterError, SplitserveError
from ..cluster import (
    STATUS_EXIT,
    ClusterSpec,
    Event,
    check_startable,
    cluster_state_dir,
    cluster_status,
    down,
    find_state_root,
    format_plan,
    gather_facts,
    load_spec,
    lock_holder,
    node_for,
    plan_launch,
    read_state,
    resolve_engines,
    serving_now,
    supervised_message,
    up,
    worker_transports,
)
from ._app import SPEC_HELP, app, make_console, maps_errors

console = make_console()
err = make_console(stderr=True)

SpecOpt = Annotated[Path | None, typer.Option("-c", "--config", help="cluster spec (TOML)")]
NameOpt = Annotated[str | None, typer.Option("--name", help="cluster name (instead of -c)")]


def _mib(n: Any) -> str:
    return f"{n / 1048576:.2f} MiB" if isinstance(n, (int, float)) else "-"


def print_event(e: Event) -> None:
    if e.kind == "warning":
        err.print(
            f"[dim]{time.strftime('%H:%M:%S')}[/dim] {escape(e.node)}: [yellow]warning:[/yellow] {escape(e.message)}"
        )
        return
    err.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {escape(e.node)}: {escape(e.message)}")


def _root(config: Path | None, name: str | None) -> Path:
    spec_root = cluster_state_dir(load_spec(config)) if config else None
    return find_state_root(name, spec_root)


@app.command("up")
@maps_errors
def up_cmd(
    config: Annotated[Path, typer.Option("-c", "--config", help=SPEC_HELP)],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the commands, start nothing")] = False,
    supervise: Annotated[
        bool,
        typer.Option(
            "--supervise/--no-supervise",
            help="leave a supervisor in the background that restarts the cluster when a process dies "
            "(`splitserve down` stops it too); --no-supervise: a dead process stays dead",
        ),
    ] = True,
    foreground: Annotated[
        bool,
        typer.Option(
            "--foreground",
            help="supervise in this terminal instead: restart the whole cluster in order when a process dies; "
            "Ctrl-C stops it",
        ),
    ] = False,
    restart: Annotated[
        bool, typer.Option("--restart", help="stop a cluster that is up and healthy and start it again (reload)")
    ] = False,
    skip_preflight: Annotated[bool, typer.Option("--skip-preflight", help="do not run the preflight checks")] = False,
) -> None:
    """Start the RPC workers, llama-server and the gateway of a cluster and wait until it serves.

    A supervisor stays in the background and restarts the cluster in order when a process dies
    (`splitserve status` shows the restart and its cause; `splitserve down` stops it all). A cluster
    that is already up and healthy is left as it is (exit 0); `--restart` reloads it.

    Clients use the gateway's OpenAI-compatible endpoint (tool calls and reasoning parsed by
    splitserve; `[gateway] enabled = false` in the spec serves llama-server's own instead).

    Example: splitserve up -c cluster.toml
    """
    spec = load_spec(config)
    if dry_run:
        # The same plan `up` carries out (any backend), from the same facts (read only: nothing starts).
        facts = gather_facts(spec, plan_split=spec.model.is_file())
        plan = plan_launch(spec, facts, preflight=not skip_preflight)
        if facts.model_missing:
            err.print(f"[yellow]warning:[/yellow] {escape(str(spec.model))} is not here: `up` would refuse")
        console.print(format_plan(plan), markup=False, soft_wrap=True)
        return
    root = cluster_state_dir(spec)
    check_startable(spec)  # refused here, in one line, before any process (or supervisor) starts
    if restart:
        stopped = down(root)
        if stopped:
            err.print(f"{time.strftime('%H:%M:%S')} cluster: --restart: stopped {', '.join(stopped)}", markup=False)
    else:
        running = serving_now(root)
        if running is not None:
            holder = lock_holder(root)
            how = f"supervised by pid {holder.pid}" if holder is not None else "not supervised"
            console.print(
                f"cluster {spec.name} is already up and healthy: {running.endpoint} "
                f"({len(running.processes)} processes, {how}); nothing restarted. "
                f"Reload it with: splitserve up -c {config} --restart",
                markup=False,
            )
            return
        holder = lock_holder(root)
        if holder is not None:
            raise ClusterError(
                f"{supervised_message(spec.name, holder)}; `splitserve status -c {config}` shows what it is doing"
            )
    if foreground:
        _supervise(spec, not skip_preflight)
        return
    if supervise:
        _up_in_background(spec, config, root, not skip_preflight)
        return
    state = up(spec, on_event=print_event, preflight=not skip_preflight)
    _print_ready(spec, state, config)
    console.print("not supervised (--no-supervise): a process that dies stays dead", markup=False)


def _print_ready(spec: ClusterSpec, state: Any, config: Path) -> None:
    if not state.endpoint:  # the Ray probe: a Ray cluster, no engine
        console.print(f"ready: Ray cluster up (report: {state.extra.get('probe_out')})", markup=False)
        console.print(f"stop with: splitserve down -c {config}", markup=False)
        return
    console.print(
        f"ready: {state.endpoint}  (OpenAI base URL {state.endpoint}/v1; model load "
        f"{state.load_seconds or 0:.1f} s, up {state.up_seconds or 0:.1f} s)",
        markup=False,
    )
    replicas = state.extra.get("replicas") or []
    if replicas:  # topology = "replicas": the gateway routes across them
        rows = ", ".join(f"{r['name']} {r['url']}" for r in replicas)
        server = "llama-server" if state.extra.get("backend") in (None, "llama.cpp") else state.extra["backend"]
        console.print(f"{len(replicas)} replicas ({server} each): {rows}", markup=False)
    elif state.gateway is not None:
        engine_name = "llama-server" if spec.backend == "llama.cpp" else spec.backend
        console.print(f"{engine_name} itself: {state.engine_url.split('+', 1)[-1]}", markup=False)
    for node, reading in worker_transports(state).items():  # RDMA or TCP, from each worker's own lines
        console.print(f"{node} transport: {reading.text()}", markup=False)
        for w in reading.warnings:
            console.print(f"  warning: {w}", markup=False)
    console.print(f"stop with: splitserve down -c {config}", markup=False)


def _up_in_background(spec: ClusterSpec, config: Path, root: Path, preflight: bool) -> None:
    """Start the supervisor in the background (it launches the cluster), relay its output until
    the cluster serves, then leave it running."""
    from ..cluster import start_background

    bg = start_background(config, root, preflight=preflight)
    try:
        state = bg.follow(lambda line: err.print(line, markup=False, highlight=False))
    except KeyboardInterrupt:
        err.print("interrupted: stopping the supervisor and what it started", markup=False)
        bg.stop()
        raise typer.Exit(130) from None
    if state is None:  # it said why (its last line, relayed above)
        raise typer.Exit(bg.process.returncode or 1)
    _print_ready(spec, state, config)
    console.print(
        f"supervised by pid {bg.process.pid} in the background: a process that dies is restarted "
        f"(its output: {bg.out})",
        markup=False,
    )


def _supervise(spec: ClusterSpec, preflight: bool, background: bool = False) -> None:
    import signal

    from ..cluster import supervise

    sup = supervise(spec, on_event=print_event, preflight=preflight)

    def on_signal(signum: int, _frame: object) -> None:
        err.print(f"{time.strftime('%H:%M:%S')} cluster: {signal.Signals(signum).name}: stopping")
        sup.stop()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    how = "`splitserve down` stops it" if background else "Ctrl-C or SIGTERM stops it"
    try:
        sup.run(
            on_ready=lambda st: err.print(
                f"{time.strftime('%H:%M:%S')} cluster: serving {st.endpoint} (supervised; {how})", markup=False
            )
        )
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@app.command("run")
@maps_errors
def run_cmd(
    config: Annotated[Path, typer.Option("-c", "--config", help=SPEC_HELP)],
    skip_preflight: Annotated[bool, typer.Option("--skip-preflight", help="do not run the preflight checks")] = False,
    background: Annotated[bool, typer.Option("--background", hidden=True, help="started by plain `up`")] = False,
) -> None:
    """Run a cluster in the foreground under supervision, for a service manager (systemd):
    restarts everything in order with backoff when a process dies, stops it all on SIGTERM.

    Example: splitserve run -c cluster.toml
    """
    _supervise(load_spec(config), not skip_preflight, background)


@app.command("preflight")
@maps_errors
def preflight_cmd(
    config: Annotated[Path, typer.Option("-c", "--config", help="cluster spec (TOML)")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Check every node before a launch: ssh, engine, memory, OOM killers, link (round trip, and a
    2-second transfer to each remote worker: Gb/s against the NIC's rated speed, MTU at both ends,
    the route), ports, disk, bind address, page-cache drop. One row per check and node; exit 1 when
    any fails.

    Example: splitserve preflight -c cluster.toml
    """
    from ..cluster import preflight

    rows = preflight(load_spec(config))
    if as_json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        table = Table("check", "node", "result", "detail", "fix")
        colour = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim"}
        for r in rows:
            table.add_row(
                r.check, escape(r.node), f"[{colour.get(r.status, '')}]{r.status}[/]", escape(r.message), escape(r.fix)
            )
        console.print(table)
        fails = sum(r.status == "fail" for r in rows)
        warns = sum(r.status == "warn" for r in rows)
        console.print(f"{len(rows)} checks: {fails} failed, {warns} warnings")
        for r in rows:  # each failure once more on one line, whatever the terminal's width
            if r.status == "fail":
                line = f"fail: {r.check} ({r.node}): {r.message}" + (f" -> {r.fix}" if r.fix else "")
                console.print(line, markup=False, soft_wrap=True)
    if any(r.status == "fail" for r in rows):
        raise typer.Exit(1)


@app.command("systemd")
@maps_errors
def systemd_cmd(
    config: Annotated[Path, typer.Option("-c", "--config", help="cluster spec (TOML)")],
    out: Annotated[Path, typer.Option("-o", "--out", help="folder to write the unit files to")] = Path("systemd"),
) -> None:
    """Write systemd unit files: one for the head (`splitserve run`, supervising every node) and one
    per worker (ggml-rpc-server alone, for boxes that manage their RPC server themselves).

    Example: splitserve systemd -c cluster.toml -o /etc/systemd/system
    """
    from ..cluster import systemd_units

    try:
        spec = load_spec(config)
        units = systemd_units(spec, resolve_engines(spec), config)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in units.items():
            (out / name).write_text(text)
    except OSError as exc:
        raise SplitserveError(f"{out}: cannot write unit files: {exc.strerror}") from None
    for name in units:
        console.print(f"wrote {out / name}", markup=False)
    console.print(
        f"install on the head: sudo cp {out}/splitserve-{spec.name}.service /etc/systemd/system/ && "
        f"sudo systemctl daemon-reload && sudo systemctl enable --now splitserve-{spec.name}",
        markup=False,
    )


@app.command("down")
@maps_errors
def down_cmd(config: SpecOpt = None, name: NameOpt = None) -> None:
    """Stop exactly the processes `up` started (from the cluster's state folder). A cluster under
    `up --foreground` / `splitserve run` is stopped by its supervisor: down sends it SIGTERM and
    waits until it has stopped everything and exited.

    Example: splitserve down -c cluster.toml
    """
    root = _root(config, name)
    stopped = down(root)
    console.print(f"stopped: {', '.join(stopped)}" if stopped else f"{root.name}: nothing was running")


def print_status(data: dict[str, Any]) -> None:
    phase = data["phase"]
    restart = data.get("restart")
    if phase == "restarting" and restart:
        cause = restart.get("cause") or "a process died"
        phase = f"restarting (attempt {restart.get('attempt')}, cause: {cause})"
    console.print(f"cluster {data['name']}: {phase}  endpoint {data['endpoint'] or '-'}", markup=False)
    console.print(f"restarts: {data.get('restarts') or 0}", markup=False)  # as the page counts them
    if restart and restart.get("detail"):
        console.print(f"  {restart['detail']}", markup=False)
    cause = data.get("cause")
    if cause:
        console.print(f"cause: {cause['node']}: {cause['message']}", markup=False)
        for other in cause.get("others") or []:
            console.print(f"  then {other['node']}: {other['message']}", markup=False)
    if data.get("next"):
        console.print(f"bring it back with: {data['next']}", markup=False)
    if data["model"] is None:  # between a restart's stop and start: nothing more to show
        sup = data.get("supervisor") or {}
        console.print(f"supervised by pid {sup.get('pid')}; its processes are being started again", markup=False)
        return
    if data.get("gateway"):
        engine = (data.get("engine_backend") or {}).get("backend") or "llama-server"
        console.print(f"gateway in front of {engine} {data['engine_endpoint'].split('+', 1)[-1]}", markup=False)
    console.print(f"model: {data['model']}", markup=False)
    sup = data.get("supervisor")
    if sup:
        console.print(
            f"supervised by pid {sup['pid']} ({sup['command']}); `splitserve down` asks it to stop", markup=False
        )
    if data.get("load_seconds") is not None:
        console.print(f"load: {data['load_seconds']:.2f} s (up: {data['up_seconds']} s)")
    table = Table("node", "role", "pid", "alive", "address", "RSS")
    for p in data["processes"]:
        table.add_row(
            p["node"],
            p["role"],
            str(p["pid"]),
            "yes" if p["alive"] else "NO",
            f"{p['bind']}:{p['port']}",
            _mib(p["rss_bytes"]),
        )
    console.print(table)
    if data.get("replicas"):  # topology = "replicas"
        reps = Table("replica", "nodes", "processes", "url", "health", title="replicas behind the gateway")
        for r in data["replicas"]:
            reps.add_row(r["name"], "+".join(r["boxes"]), ", ".join(r["nodes"]), r["url"] or "-", r["health"])
        console.print(reps)
    for p in data["processes"]:
        if p.get("transport"):
            t = p["transport"]
            console.print(f"{p['node']} transport: {t['text']}", markup=False)
            for w in t["warnings"]:
                console.print(f"  warning: {w}", markup=False)
    if data["memory"]:
        mem = Table("node", "device", "model", "KV", "compute", "total", title="memory at load")
        for d in data["memory"]:
            mem.add_row(
                d["node"],
                escape(d["device"]),
                _mib(d["model_bytes"]),
                _mib(d["kv_bytes"]),
                _mib(d["compute_bytes"]),
                _mib(d["total_bytes"]),
            )
        console.print(mem)
    if data.get("slots") is not None:
        busy = sum(1 for s in data["slots"] if s.get("is_processing"))
        ctx = data["slots"][0].get("n_ctx") if data["slots"] else None
        console.print(f"slots: {len(data['slots'])} ({busy} busy), context per slot {ctx}")
    elif data.get("slots_error"):
        console.print(f"slots: unavailable ({data['slots_error']})", markup=False)
    spec = data.get("speculation")
    if spec:
        line = f"speculation: {', '.join(spec['types'])}"
        if spec.get("drafted") is not None:
            rate = spec.get("acceptance_rate")
            line += (
                f": drafted {spec['drafted']:,}, accepted {spec['accepted']:,}"
                + (f" ({rate * 100:.1f}%)" if rate is not None else "")
                + f" in {spec['drafts']:,} drafts"
            )
        elif data.get("speculation_error"):
            line += f" (counters unavailable: {data['speculation_error']})"
        console.print(line, markup=False)
    eb = data.get("engine_backend")
    if eb:  # vLLM / SGLang: the launcher, the fixes written, the Ray cluster
        console.print(f"backend: {eb['backend']}" + (f" (launcher {eb['launcher']})" if eb.get("launcher") else ""))
        for note in eb.get("notes") or []:
            console.print(f"  {note}", markup=False)
        probe = eb.get("probe")
        if probe:
            console.print(f"ray probe: {probe.get('alive_nodes')} of {probe.get('expected_nodes')} nodes", markup=False)
        if eb.get("ray_status"):
            console.print(eb["ray_status"], markup=False)
    for w in data.get("warnings") or []:
        console.print(f"[yellow]warning:[/yellow] {escape(w['text'])} [bold]fix:[/bold] {escape(w['fix'])}")


@app.command("status")
@maps_errors
def status_cmd(
    config: SpecOpt = None,
    name: NameOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Show each process (alive, pid, port, RSS), the model, per-device memory, the slots, the
    engine's drafted/accepted tokens when speculation is on, and load-log warnings with their fix.

    `phase` is ready; restarting (its supervisor saw a process die and is starting the cluster
    again: the attempt and the cause are shown) or starting (the first start, under the supervisor
    `up` left); degraded (a process died) or stopped (all died) when nothing restarts it, with the
    cause from the logs and the command that brings it back. `restarts` counts the supervisor's
    restarts, as the page does.

    Exit code (the output is printed first, JSON included): 0 ready; 3, as `systemctl status`,
    degraded or stopped; 4 restarting or starting; 1 no such cluster.

    Example: splitserve status -c cluster.toml --json
    """
    data = cluster_status(_root(config, name))
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        print_status(data)
    code = STATUS_EXIT.get(data["phase"], 3)
    if code == 0 and not all(p["alive"] for p in data["processes"]):
        code = 3
    if code:
        raise typer.Exit(code)


@app.command("logs")
@maps_errors
def logs_cmd(
    node: Annotated[str | None, typer.Argument(help="head or a worker name (default: all)")] = None,
    config: SpecOpt = None,
    name: NameOpt = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="keep printing new lines")] = False,
    lines: Annotated[int, typer.Option("-n", "--lines", help="lines from the end of each log")] = 50,
) -> None:
    """Print the logs of a cluster's processes.

    Example: splitserve logs w1 -c cluster.toml -f
    """
    try:
        root = _root(config, name)
        state = read_state(root)
        logs_dir = root / "logs"
        ssh = state.ssh if state is not None else None
        if state is not None:
            files = {}
            for p in state.processes:  # a node with several processes (Ray head and probe): NODE/ROLE
                files[p.node if p.node not in files else f"{p.node}/{p.role}"] = (
                    node_for(p.host, ssh),
                    Path(p.log),
                )
        else:
            files = {p.stem: (node_for("local"), p) for p in sorted(logs_dir.glob("*.log"))}
        if node is not None:
            chosen = {k: v for k, v in files.items() if k == node or k.startswith(node + "/")}
            if not chosen:
                raise SplitserveError(f"no node {node!r} in cluster {root.name}; nodes: {', '.join(files) or 'none'}")
            files = chosen
        prefix = len(files) > 1
        offsets = {}
        for n, (transport, path) in files.items():
            text, offsets[n] = transport.read_log_since(path, 0, max_bytes=64 << 20)
            for line in text.splitlines()[-lines:]:
                sys.stdout.write((f"{n} | " if prefix else "") + line + "\n")
        sys.stdout.flush()
        while follow:
            time.sleep(0.5)
            for n, (transport, path) in files.items():
                text, offsets[n] = transport.read_log_since(path, offsets[n])
                for line in text.splitlines():
                    sys.stdout.write((f"{n} | " if prefix else "") + line + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass


__all__ = ["ClusterSpec", "print_event", "print_status"]
