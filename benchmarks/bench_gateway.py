"""What the gateway costs: tokens/s through it vs straight from llama-server, and added TTFT.

Starts one llama-server (CPU build from the engine cache, SmolLM2 by default, ``--parallel``
slots) and ``splitserve serve`` in front of it as its own process (so the gateway does not
share the client's interpreter). Then, alternating direct and gateway rounds so drift in
the machine's load hits both alike:

- throughput: at each concurrency, ``--rounds`` rounds of that many simultaneous streamed
  chat requests (same messages, ``max_tokens`` with ``ignore_eos``, temperature 0);
  tokens/s of a round = completion tokens (from usage) / round wall time; the figure is
  sum(gateway tokens/s) / sum(direct tokens/s); target >= 0.98;
- ``--api messages``: the gateway side is asked in the Anthropic Messages API (streamed
  ``/v1/messages``), the direct side in chat completions as always: the ratio is then the
  Messages path's per-token cost against the engine's own tokens/s;
- ``--api responses``: likewise in the OpenAI Responses API (streamed ``/v1/responses``);
- TTFT: ``--ttft-pairs`` sequential pairs of one-token streamed requests (prompt cached);
  TTFT = request sent to the first content chunk; reported p50/p99 of each side and of
  the paired differences (gateway - direct); target < 2 ms p50. The gateway's own
  measurement of what it adds (``splitserve_gateway_added_seconds`` from /metrics: time
  before the engine call plus first-chunk relay) is reported next to it.

    .venv/bin/python benchmarks/bench_gateway.py --out benchmarks/results/gateway.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from _procs import died, spawn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = [{"role": "system", "content": "You are a storyteller."},
            {"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]


def free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: {died(proc, 'the process')}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url}: not ready after {timeout}s")


async def one(http: httpx.AsyncClient, url: str, model: str, max_tokens: int, api: str = "chat"
              ) -> tuple[float | None, int]:
    """(TTFT seconds, completion tokens) of one streamed request in ``api``'s wire format.

    llama-server now and then closes a kept-alive connection as it is reused ("server
    disconnected without sending a response"); such a request is sent again, once.
    """
    send = STREAMS[api]
    try:
        return await send(http, url, model, max_tokens)
    except httpx.RemoteProtocolError:
        return await send(http, url, model, max_tokens)


async def _one_messages(http: httpx.AsyncClient, url: str, model: str, max_tokens: int
                        ) -> tuple[float | None, int]:
    """One streamed Anthropic Messages request (``--api messages``): TTFT at the first
    ``text_delta``, tokens from the last ``message_delta``'s usage."""
    body = {"model": model, "system": MESSAGES[0]["content"], "messages": MESSAGES[1:],
            "max_tokens": max_tokens, "stream": True, "temperature": 0, "ignore_eos": True}
    start = time.perf_counter()
    ttft = None
    tokens = 0
    async with http.stream("POST", f"{url}/v1/messages", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if ttft is None and event["type"] == "content_block_delta" and event["delta"].get("text"):
                ttft = time.perf_counter() - start
            elif event["type"] == "message_delta":
                tokens = int(event["usage"]["output_tokens"])
    return ttft, tokens


async def _one_responses(http: httpx.AsyncClient, url: str, model: str, max_tokens: int
                         ) -> tuple[float | None, int]:
    """One streamed OpenAI Responses request (``--api responses``): TTFT at the first
    ``response.output_text.delta``, tokens from ``response.completed``'s (or ``incomplete``'s) usage."""
    body = {"model": model, "instructions": MESSAGES[0]["content"], "input": MESSAGES[1]["content"],
            "max_output_tokens": max_tokens, "stream": True, "temperature": 0, "ignore_eos": True,
            "store": False}
    start = time.perf_counter()
    ttft = None
    tokens = 0
    async with http.stream("POST", f"{url}/v1/responses", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])  # every event decoded, as the chat side decodes every chunk
            if ttft is None and event["type"] == "response.output_text.delta":
                ttft = time.perf_counter() - start
            elif event["type"] in ("response.completed", "response.incomplete"):
                tokens = int(event["response"]["usage"]["output_tokens"])
    return ttft, tokens


async def _one(http: httpx.AsyncClient, url: str, model: str, max_tokens: int
               ) -> tuple[float | None, int]:
    body = {"model": model, "messages": MESSAGES, "max_tokens": max_tokens, "stream": True,
            "temperature": 0, "ignore_eos": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft = None
    tokens = 0
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                if ttft is None and (choice.get("delta") or {}).get("content"):
                    ttft = time.perf_counter() - start
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
    return ttft, tokens


async def round_tps(url: str, model: str, concurrency: int, max_tokens: int, api: str = "chat") -> float:
    async with httpx.AsyncClient(timeout=None) as http:
        start = time.perf_counter()
        results = await asyncio.gather(*[one(http, url, model, max_tokens, api)
                                         for _ in range(concurrency)])
        wall = time.perf_counter() - start
    return sum(t for _, t in results) / wall


async def ttft_pairs(direct: str, gateway: str, models: dict[str, str], pairs: int, api: str = "chat"
                     ) -> tuple[list[float], list[float]]:
    d, g = [], []
    async with httpx.AsyncClient(timeout=None) as http:
        for url in (direct, gateway):  # warm the prompt cache and the connections
            await one(http, url, models[url], 1, "chat" if url == direct else api)
        for i in range(pairs):
            order = (direct, gateway) if i % 2 == 0 else (gateway, direct)
            for url in order:
                ttft, _ = await one(http, url, models[url], 1, "chat" if url == direct else api)
                if ttft is not None:
                    (d if url == direct else g).append(ttft)
    return d, g


STREAMS = {"chat": _one, "messages": _one_messages, "responses": _one_responses}
"""``--api``: how one streamed request is sent to the gateway (the engine is always asked in
chat completions, its own format)."""


def cpu_seconds(proc: subprocess.Popen[bytes]) -> float:
    """User + system CPU time of a child process so far (from /proc)."""
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def runtime() -> dict[str, Any]:
    """What the gateway process runs on (it has this interpreter and path): uvicorn picks
    uvloop and httptools when they are importable, else asyncio and h11."""
    import importlib.metadata
    import importlib.util

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {"python": platform.python_version(),
            "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            "http": "httptools" if importlib.util.find_spec("httptools") else "h11",
            **{name: version(name) for name in ("uvicorn", "starlette", "httpx", "anyio", "pydantic")}}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100 * (len(s) - 1))))
    return s[k]


def added_from_metrics(gateway: str) -> dict[str, Any]:
    text = httpx.get(f"{gateway}/metrics").text
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("splitserve_gateway_added_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
        elif line.startswith("splitserve_gateway_added_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("splitserve_gateway_added_seconds_count"):
            count = float(line.split()[-1])

    def upper(q: float) -> float | None:
        for le, n in buckets:
            if count and n >= q * count:
                return le
        return None

    return {"count": count, "mean_ms": round(total / count * 1000, 3) if count else None,
            "p50_le_ms": (upper(0.5) or 0) * 1000, "p99_le_ms": (upper(0.99) or 0) * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server", help="llama-server binary (default: the cached CPU engine)")
    ap.add_argument("--model", help="GGUF (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="an extra llama-server argument (repeat), e.g. --server-arg=-ngl --server-arg=999")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--ttft-pairs", type=int, default=40)
    ap.add_argument("--fake-rate", type=float,
                    help="use benchmarks/fake_sse_engine.py at this many tokens/s per request "
                         "instead of llama-server (the gateway's own cost, isolated)")
    ap.add_argument("--api", choices=sorted(STREAMS), default="chat",
                    help="the gateway's wire format measured (the engine is always asked in chat)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/gateway.json")
    args = ap.parse_args()

    if args.fake_rate:
        server = model_path = Path(__file__).with_name("fake_sse_engine.py")
    elif args.server:
        server = Path(args.server)
    else:
        from splitserve.engine import BuildOptions, build_engine

        server = Path(build_engine(BuildOptions(backend="cpu"))[0].server)
    if args.fake_rate:
        pass
    elif args.model:
        model_path = Path(args.model)
    else:
        from splitserve._assets import smollm2_path

        model_path = smollm2_path()
    eport, gport = free_port(), free_port()
    direct, gateway = f"http://127.0.0.1:{eport}", f"http://127.0.0.1:{gport}"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    engine_argv = ([sys.executable, str(server), "--port", str(eport), "--rate", str(args.fake_rate)]
                   if args.fake_rate else
                   [str(server), "-m", str(model_path), "--host", "127.0.0.1",
                    "--port", str(eport), "-c", str(args.ctx), "-t", str(args.threads),
                    "--parallel", str(args.parallel), *args.server_arg])
    procs = [spawn(engine_argv, "llama-server", env=env)]
    try:
        wait_ready(direct, procs[0])
        procs.append(spawn(
            [sys.executable, "-c", "from splitserve.cli import main; main()", "serve",
             "--engine", direct, "--port", str(gport), "--max-concurrent", "64"], "gateway"))
        wait_ready(gateway, procs[1])
        models = {direct: httpx.get(f"{direct}/v1/models").json()["data"][0]["id"],
                  gateway: httpx.get(f"{gateway}/v1/models").json()["data"][0]["id"]}
        result: dict[str, Any] = {
            "bench": "gateway", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "loadavg_start": os.getloadavg()},
            "gateway_runtime": runtime(),
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "model": model_path.name, "throughput": {}, "ttft": {}}
        for conc in [int(c) for c in args.concurrency.split(",")]:
            tps: dict[str, list[float]] = {"direct": [], "gateway": []}
            cpu = {"engine_direct": 0.0, "engine_gateway": 0.0, "gateway": 0.0}
            asyncio.run(round_tps(direct, models[direct], conc, 4))  # warm-up
            asyncio.run(round_tps(gateway, models[gateway], conc, 4, args.api))
            for r in range(args.rounds):
                order = ("direct", "gateway") if r % 2 == 0 else ("gateway", "direct")
                for side in order:
                    url = direct if side == "direct" else gateway
                    e0, g0 = cpu_seconds(procs[0]), cpu_seconds(procs[1])
                    tps[side].append(asyncio.run(round_tps(url, models[url], conc, args.max_tokens,
                                                           args.api if side == "gateway" else "chat")))
                    cpu[f"engine_{side}"] += cpu_seconds(procs[0]) - e0
                    if side == "gateway":
                        cpu["gateway"] += cpu_seconds(procs[1]) - g0
            ratio = sum(tps["gateway"]) / sum(tps["direct"])
            result["throughput"][str(conc)] = {
                "direct_tps": [round(x, 2) for x in tps["direct"]],
                "gateway_tps": [round(x, 2) for x in tps["gateway"]],
                "ratio": round(ratio, 4), "target": 0.98, "met": ratio >= 0.98,
                "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
                "gateway_cpu_ms_per_token": round(
                    cpu["gateway"] * 1000 / (args.rounds * conc * args.max_tokens), 3),
                "gateway_cpu_over_engine_cpu": round(cpu["gateway"] / cpu["engine_gateway"], 4)
                if cpu["engine_gateway"] else None}
            print(f"concurrency {conc}: direct {statistics.mean(tps['direct']):.1f} tok/s, "
                  f"gateway {statistics.mean(tps['gateway']):.1f} tok/s, ratio {ratio:.3f}; "
                  f"gateway CPU {result['throughput'][str(conc)]['gateway_cpu_ms_per_token']} "
                  "ms/token",
                  flush=True)
        d, g = asyncio.run(ttft_pairs(direct, gateway, models, args.ttft_pairs, args.api))
        n = min(len(d), len(g))
        diffs = [g[i] - d[i] for i in range(n)]
        ms = 1000.0
        result["ttft"] = {
            "pairs": n,
            "direct_ms": {"p50": round(pct(d, 50) * ms, 3), "p99": round(pct(d, 99) * ms, 3)},
            "gateway_ms": {"p50": round(pct(g, 50) * ms, 3), "p99": round(pct(g, 99) * ms, 3)},
            "added_ms_p50_of_percentiles": round((pct(g, 50) - pct(d, 50)) * ms, 3),
            "added_ms_p99_of_percentiles": round((pct(g, 99) - pct(d, 99)) * ms, 3),
            "paired_diff_ms": {"p50": round(pct(diffs, 50) * ms, 3),
                               "p99": round(pct(diffs, 99) * ms, 3)},
            "gateway_self_measured": added_from_metrics(gateway),
            "target_p50_ms": 2.0}
        result["machine"]["loadavg_end"] = os.getloadavg()
        t = result["ttft"]
        print(f"TTFT direct p50 {t['direct_ms']['p50']} ms p99 {t['direct_ms']['p99']} ms; "
              f"gateway p50 {t['gateway_ms']['p50']} ms p99 {t['gateway_ms']['p99']} ms; "
              f"added p50 {t['added_ms_p50_of_percentiles']} ms, p99 "
              f"{t['added_ms_p99_of_percentiles']} ms; paired diff p50 "
              f"{t['paired_diff_ms']['p50']} ms; gateway self-measured "
              f"{t['gateway_self_measured']}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
