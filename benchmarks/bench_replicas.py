"""Replicas against a split on this box's two cores, and what session affinity keeps of the cache.

    .venv/bin/python benchmarks/bench_replicas.py [--concurrency 1,4,16] [--sessions 8 --turns 5]

(a) Aggregate throughput (completion tokens/s of all requests together, from the first sent to the
    last answered) at each concurrency, with the same model (SmolLM2-135M) served two ways:
    - ``replicas``: two llama-servers, each pinned with ``taskset`` to one core (``-t 1``), behind
      ``splitserve serve --engine r1=URL,r2=URL`` (affinity routing);
    - ``split``: one llama-server whose layers are on two ggml-rpc-server workers, each pinned to
      one core (``-t 1``), behind ``splitserve serve``.
    Each request is a ~70-token prompt and ``--gen`` tokens (``ignore_eos``), through the
    gateway's ``/v1/completions``; every request has its own prompt (no cache across requests).
(b) The cached fraction per turn (cached prompt tokens / prompt tokens, from each answer's
    ``usage.prompt_tokens_details.cached_tokens``) of ``--sessions`` concurrent replayed agent
    sessions (chat, each turn the previous prompt + the answer + a new user message, each
    session named by ``X-Session-Id``, up to ``--think`` seconds of seeded "tool time" before
    each turn so that the sessions do not move in lockstep) over the two replicas, with ``--route affinity`` and with
    ``--route round-robin`` (a fresh gateway each, prompts made unique per run).

What the two cores limit: both setups have the same two cores, one per llama-server or per RPC
worker; the gateway, the split's head llama-server (sampling, the layer hand-offs) and this
script's client are not pinned and share them, so every figure includes their CPU time, and so
does the load of whatever else runs on the machine (the load average is recorded before and after
each part). Two cores cap the replicas at twice one core; the split's two workers hold half the
layers each, so one token passes through both in turn (at concurrency 1 one core waits while the
other works, plus a loopback RPC hop per worker per step).

Writes ``--out`` (default benchmarks/results/replicas.json) and the same figures as Markdown
beside it (``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

from _procs import died, spawn  # noqa: E402

from helpers import free_ports  # noqa: E402
from splitserve._assets import smollm2_path  # noqa: E402
from splitserve.engine import Engine, get_engine  # noqa: E402

CTX = 16384
SLOTS = 16
SYSTEM = (
    "You are a careful coding agent working in a repository. You read files, run commands and "
    "edit code in small steps. Tools: read_file(path), run(cmd), edit(path, old, new). Answer "
    "with one tool call or a short summary. Keep every answer brief and precise. "
) * 3


def wait_http(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise SystemExit(died(proc, what))
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not answer {url} in {timeout:.0f} s")
        time.sleep(0.2)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def engine_env(engine: Engine) -> dict[str, str]:
    return {**os.environ, "LD_LIBRARY_PATH": str(engine.bin_dir)}


def server_argv(engine: Engine, model: Path, port: int, rpc: list[str] | None = None) -> list[str]:
    argv = [str(engine.server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", str(CTX), "-np", str(SLOTS), "-t", "1", "-ngl", "999", "--metrics"]
    if rpc:
        argv += ["--rpc", ",".join(rpc)]
    return argv


@contextmanager
def gateway(engines: str, route: str = "affinity") -> Iterator[str]:
    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "splitserve", "serve", "--engine", engines, "--port", str(port)]
    argv += ["--route", route, "--no-access-log"]
    proc = spawn(argv, "gateway")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", proc, "the gateway")
        yield url
    finally:
        stop([proc])


@contextmanager
def replicas(engine: Engine, model: Path) -> Iterator[str]:
    """Two llama-servers, one per core; yields the --engine value."""
    p1, p2 = free_ports(2)
    procs = []
    try:
        for core, port in ((0, p1), (1, p2)):
            argv = ["taskset", "-c", str(core), *server_argv(engine, model, port)]
            procs.append(spawn(argv, f"replica-core{core}", env=engine_env(engine)))
        for proc, port in zip(procs, (p1, p2), strict=True):
            wait_http(f"http://127.0.0.1:{port}/health", proc, f"llama-server on :{port}")
        yield f"r1=http://127.0.0.1:{p1},r2=http://127.0.0.1:{p2}"
    finally:
        stop(procs)


@contextmanager
def split(engine: Engine, model: Path) -> Iterator[str]:
    """One llama-server over two ggml-rpc-servers, one per core; yields the --engine value."""
    w1, w2, head = free_ports(3)
    procs = []
    try:
        for core, port in ((0, w1), (1, w2)):
            argv = ["taskset", "-c", str(core), str(engine.rpc_server), "-H", "127.0.0.1", "-p", str(port), "-t", "1"]
            procs.append(spawn(argv, f"rpc-core{core}", env=engine_env(engine)))
        time.sleep(1.0)
        for proc, port in zip(procs, (w1, w2), strict=True):
            if proc.poll() is not None:
                raise SystemExit(died(proc, f"ggml-rpc-server on :{port}"))
        rpc = [f"127.0.0.1:{w1}", f"127.0.0.1:{w2}"]
        procs.append(spawn(server_argv(engine, model, head, rpc), "split-head", env=engine_env(engine)))
        wait_http(f"http://127.0.0.1:{head}/health", procs[-1], "the split's llama-server")
        yield f"http://127.0.0.1:{head}"
    finally:
        stop(procs[::-1])


# -- (a) throughput ------------------------------------------------------------------------------


def completion(client: httpx.Client, url: str, prompt: str, gen: int) -> int:
    body = {"prompt": prompt, "max_tokens": gen, "temperature": 0, "ignore_eos": True}
    r = client.post(f"{url}/v1/completions", json=body, timeout=600)
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"])


def throughput(url: str, concurrency: int, per_worker: int, gen: int) -> dict[str, Any]:
    nonce = secrets.token_hex(4)

    def worker(w: int) -> int:
        done = 0
        with httpx.Client() as client:
            for i in range(per_worker):
                prompt = (
                    f"[{nonce}-{w}-{i}] "
                    + SYSTEM[:300]
                    + f" Task {w}.{i}: list three facts about the number {w * 97 + i}."
                )
                done += completion(client, url, prompt, gen)
        return done

    with httpx.Client() as client:  # warm-up: the first request of a fresh server is slower
        completion(client, url, f"[{nonce}-warm] hello", 4)
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(worker, range(concurrency)))
    wall = time.perf_counter() - start
    return {
        "concurrency": concurrency,
        "requests": concurrency * per_worker,
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
    }


def part_a(engine: Engine, model: Path, levels: list[int], gen: int, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, setup in (("replicas", replicas), ("split", split)):
        with setup(engine, model) as engines, gateway(engines) as url:
            load0 = os.getloadavg()[0]
            rows = [throughput(url, c, rounds if c > 1 else 2 * rounds, gen) for c in levels]
            out[name] = {"engine_arg": engines, "rows": rows, "load_before": load0, "load_after": os.getloadavg()[0]}
            for r in rows:
                print(
                    f"{name:8s} c={r['concurrency']:2d}: {r['tokens_per_s']:7.2f} tok/s ({r['completion_tokens']} tokens in {r['wall_s']} s)",
                    flush=True,
                )
    return out


# -- (b) cached fraction per turn ----------------------------------------------------------------


def session(
    url: str, sid: str, nonce: str, turns: int, gen: int, think: float, results: list[list[dict[str, int]]]
) -> None:
    pause = random.Random(sid).uniform  # the same "tool time" before each turn under either route
    messages: list[dict[str, str]] = [
        {"role": "system", "content": f"[{nonce}] {SYSTEM}"},
        {"role": "user", "content": f"Session {sid}: the tests in module {sid} fail; find out why."},
    ]
    with httpx.Client() as client:
        for t in range(turns):
            time.sleep(pause(0, think))  # the agent's tool runs: sessions do not move in lockstep
            r = client.post(
                f"{url}/v1/chat/completions",
                headers={"X-Session-Id": sid},
                json={"messages": messages, "max_tokens": gen, "temperature": 0},
                timeout=600,
            )
            r.raise_for_status()
            data = r.json()
            usage = data["usage"]
            cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            results[t].append({"prompt": int(usage["prompt_tokens"]), "cached": cached})
            messages.append({"role": "assistant", "content": data["choices"][0]["message"]["content"] or "ok"})
            messages.append(
                {"role": "user", "content": f"Turn {t + 2}: the tool printed line {t * 13 + 7} of {sid}.py; go on."}
            )


def part_b(engine: Engine, model: Path, sessions: int, turns: int, gen: int, think: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with replicas(engine, model) as engines:
        for route in ("affinity", "round-robin"):
            with gateway(engines, route) as url:
                nonce = secrets.token_hex(4)
                results: list[list[dict[str, int]]] = [[] for _ in range(turns)]
                load0 = os.getloadavg()[0]
                threads = [
                    threading.Thread(target=session, args=(url, f"agent-{i}", nonce, turns, gen, think, results))
                    for i in range(sessions)
                ]
                start = time.perf_counter()
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                wall = time.perf_counter() - start
                per_turn = []
                for t, rows in enumerate(results):
                    prompt, cached = sum(r["prompt"] for r in rows), sum(r["cached"] for r in rows)
                    per_turn.append(
                        {
                            "turn": t + 1,
                            "answers": len(rows),
                            "prompt_tokens": prompt,
                            "cached_tokens": cached,
                            "cached_fraction": round(cached / prompt, 4) if prompt else None,
                        }
                    )
                out[route] = {
                    "per_turn": per_turn,
                    "wall_s": round(wall, 2),
                    "load_before": load0,
                    "load_after": os.getloadavg()[0],
                }
                print(
                    f"{route:11s} cached fraction per turn: "
                    + ", ".join(f"{p['cached_fraction']:.3f}" for p in per_turn if p["cached_fraction"] is not None),
                    flush=True,
                )
    return out


def markdown(result: dict[str, Any]) -> str:
    a, b, cfg = result["throughput"], result["cache"], result["config"]
    lines = ["# Replicas vs split, and session affinity (SmolLM2-135M, CPU engine, 2 cores)", ""]
    lines += [f"Command: `{cfg['command']}`", "", f"Machine: {cfg['machine']}", ""]
    lines += ["## Aggregate throughput (completion tokens/s)", ""]
    lines += [
        "| concurrency | replicas (2 × llama-server, 1 core each) | split (llama-server + 2 RPC workers, 1 core each) | replicas / split |",
        "|---|---|---|---|",
    ]
    for r, s in zip(a["replicas"]["rows"], a["split"]["rows"], strict=True):
        lines.append(
            f"| {r['concurrency']} | {r['tokens_per_s']:.1f} | {s['tokens_per_s']:.1f} | {r['tokens_per_s'] / s['tokens_per_s']:.2f}× |"
        )
    lines += [
        "",
        f"Load average (1 min) before/after: replicas {a['replicas']['load_before']:.1f}/{a['replicas']['load_after']:.1f}, "
        f"split {a['split']['load_before']:.1f}/{a['split']['load_after']:.1f}.",
        "",
    ]
    lines += [
        f"## Cached fraction of the prompt per turn, {cfg['sessions']} concurrent agent sessions over 2 replicas",
        "",
    ]
    turns = len(b["affinity"]["per_turn"])
    lines += ["| route | " + " | ".join(f"turn {t + 1}" for t in range(turns)) + " |", "|---|" + "---|" * turns]
    for route in ("affinity", "round-robin"):
        cells = [
            f"{p['cached_fraction'] * 100:.1f} %" if p["cached_fraction"] is not None else "–"
            for p in b[route]["per_turn"]
        ]
        lines.append(f"| {route} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Turn 1 is every session's first request (nothing of it cached on either replica). The sessions share "
        "their system prompt (about 190 of the first prompt's tokens), so a request that meets a replica "
        "without its own history still finds that prefix there: what round-robin loses is each session's own "
        "turns. With affinity the uncached part is the new turn alone (the answer and the next user message).",
    ]
    lines += ["", "## What the 2 cores limit", "", cfg["cores_note"], ""]
    loads = [a[k][w] for k in ("replicas", "split") for w in ("load_before", "load_after")]
    if max(loads) > 2 * 2:
        lines += [
            f"On this run the machine's load average was {min(loads):.1f}-{max(loads):.1f} on its 2 cores (other "
            "people's test runs): each pinned process got a fraction of its core, so the throughput figures "
            "measure the machine's load more than the topology, and their ratio is not a finding. Run it on an "
            "otherwise idle machine (load under 1) to compare the topologies.",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--gen", type=int, default=32, help="completion tokens per throughput request")
    ap.add_argument("--rounds", type=int, default=2, help="requests per client at concurrency > 1 (twice at 1)")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--turn-gen", type=int, default=16, help="completion tokens per agent turn")
    ap.add_argument("--think", type=float, default=2.0, help="most seconds of tool time before a turn")
    ap.add_argument("--engine", default=None, help="engine key or folder (default: the newest built)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "replicas.json")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--markdown-only", action="store_true", help="rewrite the .md from --out's JSON, run nothing")
    args = ap.parse_args()
    if args.markdown_only:
        args.out.with_suffix(".md").write_text(markdown(json.loads(args.out.read_text())))
        return
    engine = get_engine(args.engine)
    model = smollm2_path()
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    cores_note = __doc__.split("What the two cores limit: ", 1)[1].split("\n\nWrites", 1)[0].replace("\n", " ")
    config = {
        "command": "python benchmarks/bench_replicas.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "engine": engine.key,
        "model": model.name,
        "ctx": CTX,
        "slots_per_server": SLOTS,
        "threads_per_process": 1,
        "gen": args.gen,
        "sessions": args.sessions,
        "turns": args.turns,
        "turn_gen": args.turn_gen,
        "think_s": args.think,
        "cores_note": "Both setups have the same two cores, " + cores_note.split("same two cores, ", 1)[1],
    }
    result: dict[str, Any] = {"config": config}
    old = json.loads(args.out.read_text()) if args.skip_throughput and args.out.exists() else {}
    result["throughput"] = (
        old.get("throughput") if args.skip_throughput else part_a(engine, model, levels, args.gen, args.rounds)
    )
    result["cache"] = part_b(engine, model, args.sessions, args.turns, args.turn_gen, args.think)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    md = args.out.with_suffix(".md")
    md.write_text(markdown(result))
    print(f"wrote {args.out} and {md}")


if __name__ == "__main__":
    main()
