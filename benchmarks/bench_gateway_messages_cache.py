"""Claude Code through /v1/messages: its prompt sizes, and how much of each turn the cache serves.

Two steps:

``record``: runs the real Claude Code CLI (headless, throwaway HOME, loopback only) against
the gateway in front of a scripted engine (Qwen2.5's template, hermes calls) that makes it
write a file, read it back with a shell command, list the folder and answer: a 4-request
agent session. Every ``/v1/messages`` body Claude Code sent is written to a JSON file, with
its first request once more under ``CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1``.

``replay``: sends the recorded requests, in order, to a gateway (``--url``, or ``--demo``:
the demo cluster, SmolLM2 over two RPC workers, brought up with a context that holds
Claude Code's prompt and brought down after) as Claude Code sent them (streamed, one session)
with ``max_tokens`` cut to ``--max-tokens``; prints per turn the prompt tokens, those the
engine's prompt cache served (``cache_read_input_tokens``) and their fraction (goal >= 90%
from turn 2 on), and ``count_tokens`` of the first request with and without the
experimental betas.

    .venv/bin/python benchmarks/bench_gateway_messages_cache.py record --out benchmarks/results/claude-code-session.json
    .venv/bin/python benchmarks/bench_gateway_messages_cache.py replay --demo \\
        --session benchmarks/results/claude-code-session.json --out benchmarks/results/messages-cache.json

The recorded assistant turns are the scripted engine's, not what the replaying model writes:
from turn 2 on, the cache serves the prompt up to the previous assistant turn (the replaying
model's own answer differs from the recorded one), so the fraction measured is a lower bound
of a live session's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = Path(os.environ.get("SPLITSERVE_NPM_PREFIX", Path.home() / ".cache/splitserve/npm")) / (
    "node_modules/@anthropic-ai/claude-code/bin/claude.exe")
OFFLINE = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_BUG_COMMAND": "1"}


def _free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


class Recorder:
    """ASGI middleware keeping the JSON body of every ``POST /v1/messages``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/messages":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def rec() -> Any:
            msg = await receive()
            if msg["type"] == "http.request":
                chunks.append(msg.get("body", b""))
                if not msg.get("more_body"):
                    self.bodies.append(json.loads(b"".join(chunks)))
            return msg

        await self.app(scope, rec, send)


def _serve(app: Any) -> tuple[Any, threading.Thread, str]:
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{port}"


def _call(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _claude(url: str, cwd: Path, prompt: str, extra_env: dict[str, str], *args: str) -> dict[str, Any]:
    dead = _free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.mkdtemp(prefix="claude-home-"),
           "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-local", "ANTHROPIC_MODEL": "served",
           "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "32768", "HTTPS_PROXY": f"http://127.0.0.1:{dead}",
           "NO_PROXY": "127.0.0.1,localhost", **OFFLINE, **extra_env}
    proc = subprocess.run([str(CLAUDE), "-p", prompt, "--output-format", "json", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and '"error_max_turns"' not in proc.stdout:  # a capped run is fine
        raise SystemExit(f"claude exited {proc.returncode}: {proc.stderr[-1500:]} {proc.stdout[-1500:]}")
    return json.loads(proc.stdout)


def record(out: Path) -> None:
    from splitserve.engine import FakeEngine, FakeOutput, resolve_source
    from splitserve.gateway import GatewayConfig, create_app

    if not CLAUDE.is_file():
        raise SystemExit(f"{CLAUDE}: Claude Code's CLI is not installed; scripts/setup.sh installs it")
    template = (resolve_source(None).path / "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    work = Path(tempfile.mkdtemp(prefix="cc-work-"))
    notes = work / "notes.txt"
    steps = [_call("Write", {"file_path": str(notes), "content": "splitserve serves Claude Code\n"}),
             _call("Bash", {"command": f"cat {notes}", "description": "read the notes back"}),
             _call("Bash", {"command": f"ls {work}", "description": "list the folder"}),
             "The notes file is written and checked."]

    def output(body: dict[str, Any]) -> FakeOutput:
        done = body["prompt"].count("<tool_response>")  # tool results so far in the history
        text = steps[min(done, len(steps) - 1)]
        return FakeOutput([text[i:i + 6] for i in range(0, len(text), 6)])

    engine = FakeEngine(output, props={"chat_template": template, "model_path": "/m/served.gguf",
                                       "default_generation_settings": {"n_ctx": 32768}, "total_slots": 1})
    rec = Recorder(create_app(GatewayConfig(engine_url="fake://", model_format="hermes"), engine))
    server, thread, url = _serve(rec)
    try:
        # the session offers Write and Bash only: with all 24 tools its prompt (~20k tokens) is
        # beyond SmolLM2's 8192-token context, which the demo cluster serves
        res = _claude(url, work, "Write a notes file, read it back and list the folder.", {},
                      "--tools", "Write,Bash", "--allowedTools", "Write,Bash", "--max-turns", "6")
        session = list(rec.bodies)
        rec.bodies.clear()
        _claude(url, work, "Write a notes file, read it back and list the folder.", {},
                "--allowedTools", "Write,Bash", "--max-turns", "1")
        default = rec.bodies[0]
        rec.bodies.clear()
        _claude(url, work, "Write a notes file, read it back and list the folder.",
                {"CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1"}, "--allowedTools", "Write,Bash", "--max-turns", "1")
        betas_off = rec.bodies[0]
    finally:
        server.should_exit = True
        thread.join(timeout=15)
    version = subprocess.run([str(CLAUDE), "--version"], capture_output=True, text=True,
                             env={"HOME": tempfile.mkdtemp(), "PATH": os.environ.get("PATH", "")}).stdout.strip()
    data = {"claude_code_version": version, "turns": res.get("num_turns"), "result": res.get("result"),
            "session": session, "first_request": {"default": default, "experimental_betas_off": betas_off}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data) + "\n")
    print(f"recorded {len(session)} requests of Claude Code {version} ({res.get('result')!r}) -> {out}")


def _stream(http: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    usage: dict[str, Any] = {}
    with http.stream("POST", f"{url}/v1/messages", json=body, headers={"x-claude-code-session-id": "replay"}) as r:
        if r.status_code != 200:
            raise SystemExit(f"HTTP {r.status_code}: {r.read()[:500]!r}")
        for line in r.iter_lines():
            if line.startswith("data: "):
                ev = json.loads(line[6:])
                if ev["type"] == "message_delta":
                    usage = ev["usage"]
                elif ev["type"] == "error":
                    raise SystemExit(f"stream error: {ev}")
    return usage


def replay(url: str, data: dict[str, Any], max_tokens: int, api_key: str | None) -> dict[str, Any]:
    headers = {"x-api-key": api_key} if api_key else {}
    turns = []
    with httpx.Client(timeout=1800, headers=headers) as http:
        sizes = {}
        for name, body in data["first_request"].items():
            ask = {k: v for k, v in body.items() if k not in ("max_tokens", "stream", "temperature")}
            r = http.post(f"{url}/v1/messages/count_tokens", json=ask)
            r.raise_for_status()
            sizes[name] = {"input_tokens": r.json()["input_tokens"], "tools": len(body.get("tools") or []),
                           "body_chars": len(json.dumps(body))}
            print(f"first request, {name}: {sizes[name]['input_tokens']} tokens "
                  f"({sizes[name]['tools']} tools, {sizes[name]['body_chars']} characters)", flush=True)
        for i, body in enumerate(data["session"], 1):
            body = {**body, "max_tokens": max_tokens, "temperature": 0}
            t0 = time.perf_counter()
            u = _stream(http, url, body)
            prompt = int(u.get("input_tokens", 0)) + int(u.get("cache_read_input_tokens", 0))
            frac = u.get("cache_read_input_tokens", 0) / prompt if prompt else 0.0
            turns.append({"turn": i, "prompt_tokens": prompt, "cache_read_input_tokens": u.get("cache_read_input_tokens"),
                          "input_tokens": u.get("input_tokens"), "cached_fraction": round(frac, 4),
                          "seconds": round(time.perf_counter() - t0, 1)})
            print(f"turn {i}: prompt {prompt} tokens, cached {u.get('cache_read_input_tokens')} "
                  f"({frac:.1%}), {turns[-1]['seconds']} s", flush=True)
    later = [t["cached_fraction"] for t in turns[1:]]
    return {"bench": "gateway-messages-cache", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "claude_code_version": data.get("claude_code_version"), "target": url, "turns": turns,
            "min_cached_fraction_from_turn_2": min(later) if later else None, "goal": 0.9,
            "first_request_tokens": sizes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/claude-code-session.json")
    p = sub.add_parser("replay")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running gateway")
    where.add_argument("--demo", action="store_true", help="bring the demo cluster up (and down after)")
    p.add_argument("--ctx", type=int, default=32768, help="--demo: the server's context (Claude Code's prompt is ~20k)")
    p.add_argument("--session", type=Path, default=ROOT / "benchmarks/results/claude-code-session.json")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--api-key")
    p.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.out)
        return
    data = json.loads(args.session.read_text())
    if args.url:
        result = replay(args.url, data, args.max_tokens, args.api_key)
    else:
        from splitserve._demo import demo_spec
        from splitserve.cluster import down, up
        from splitserve.engine import BuildOptions, build_engine

        engine, _ = build_engine(BuildOptions(backend="cpu"))
        spec = demo_spec(ctx_size=args.ctx)
        try:
            state = up(spec, engine=engine)
            result = replay(state.endpoint, data, args.max_tokens, None)
            result["cluster"] = f"demo: SmolLM2-135M over two local RPC workers, ctx {args.ctx}"
        finally:
            down(spec)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
