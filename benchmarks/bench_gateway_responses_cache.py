"""Codex through /v1/responses: its prompt sizes, and how much of each turn the cache serves.

Two steps:

``record``: runs the real Codex CLI (``codex exec --json``, throwaway CODEX_HOME with a
custom provider, ``wire_api = "responses"``, and a catalog entry with freeform
``apply_patch``; every proxy variable at a closed loopback port) against the gateway in front
of a scripted engine (Qwen2.5's template, hermes calls) that makes it run a shell command,
apply a patch, run a second command and answer: a 4-request agent session. Every
``/v1/responses`` body Codex sent is written to a JSON file.

``replay``: sends the recorded requests, in order, to a gateway (``--url``, or ``--demo``: the
demo cluster, SmolLM2 over two RPC workers, brought up with a context that holds Codex's
prompt and brought down after) as Codex sent them (streamed, ``store: false``, the whole
history each turn, one ``prompt_cache_key``) with ``max_output_tokens`` cut to
``--max-tokens``; prints per turn the prompt tokens (``input_tokens``), those the engine's
prompt cache served (``input_tokens_details.cached_tokens``) and their fraction (goal >= 90%
from turn 2 on).

    .venv/bin/python benchmarks/bench_gateway_responses_cache.py record --small --out benchmarks/results/codex-session-small.json
    .venv/bin/python benchmarks/bench_gateway_responses_cache.py replay --demo \\
        --session benchmarks/results/codex-session-small.json --out benchmarks/results/responses-cache.json

Codex's default first prompt (~8.3k SmolLM2 tokens, ``codex-session.json``) does not fit the
demo's slot: llama-server holds a slot to the model's trained context (8192 for SmolLM2)
whatever ``ctx_size``; ``record --small`` records the same session with Codex's short setup.

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
CODEX = Path(os.environ.get("SPLITSERVE_NPM_PREFIX", Path.home() / ".cache/splitserve/npm")) / "node_modules/.bin/codex"
MODEL = "splitserve-replay"


def _free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


class Recorder:
    """ASGI middleware keeping the JSON body of every ``POST /v1/responses``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/responses":
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


def _call(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _codex_home(url: str, small: bool) -> tuple[Path, dict[str, str]]:
    """A throwaway CODEX_HOME (provider, catalog entry from Codex's own) and the environment.
    ``small``: short base instructions and no optional tools (a ~2.5k-token first prompt instead
    of ~8.3k, for a model whose slots hold 8192 tokens, such as SmolLM2)."""
    home = Path(tempfile.mkdtemp(prefix="codex-home-"))
    dead = f"http://127.0.0.1:{_free_port()}"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CODEX_HOME": str(home),
           "SPLITSERVE_KEY": "sk-local", "HTTPS_PROXY": dead, "HTTP_PROXY": dead, "https_proxy": dead,
           "http_proxy": dead, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    out = subprocess.run([str(CODEX), "debug", "models"], env=env, capture_output=True, text=True, timeout=60,
                         check=True, stdin=subprocess.DEVNULL)
    models = json.loads(out.stdout)["models"]
    classic = [m for m in models if m.get("apply_patch_tool_type") == "freeform" and not m.get("tool_mode")]
    base = next((m for m in classic if m["slug"] == "gpt-5.5"), classic[0])
    # the scripted engine counts bytes as tokens (~40k for Codex's first request): a window that
    # holds them, or Codex compacts its history
    entry = {**base, "slug": MODEL, "display_name": MODEL, "context_window": 262144, "max_context_window": 262144}
    extra = ""
    if small:
        entry.pop("model_messages", None)
        entry |= {"base_instructions": "You are Codex, a coding agent. Use the tools to act; answer briefly.",
                  "include_skills_usage_instructions": False, "include_plugin_usage_instructions": False,
                  "include_apps_usage_instructions": False, "supports_search_tool": False,
                  "experimental_supported_tools": []}
        extra = ('web_search = "disabled"\n\n[features]\ngoals = false\napps = false\nplugins = false\n'
                 "memories = false\n\n[agents]\nenabled = false\n")
    (home / "catalog.json").write_text(json.dumps({"models": [entry]}))
    (home / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "splitserve"\nmodel_catalog_json = "{home}/catalog.json"\n'
        f"check_for_update_on_startup = false\n{extra}\n[analytics]\nenabled = false\n\n"
        f'[model_providers.splitserve]\nname = "splitserve"\nbase_url = "{url}/v1"\nenv_key = "SPLITSERVE_KEY"\n'
        'wire_api = "responses"\nrequest_max_retries = 0\nstream_max_retries = 0\n')
    return home, env


def record(out: Path, small: bool = False) -> None:
    import uvicorn

    from splitserve.engine import FakeEngine, FakeOutput, resolve_source
    from splitserve.gateway import GatewayConfig, create_app

    if not CODEX.exists():
        raise SystemExit(f"{CODEX}: Codex CLI is not installed; scripts/setup.sh installs it")
    template = (resolve_source(None).path / "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    work = Path(tempfile.mkdtemp(prefix="codex-work-"))
    patch = "*** Begin Patch\n*** Add File: notes.txt\n+splitserve serves Codex\n*** End Patch\n"
    steps = [_call("exec_command", {"cmd": "ls -la"}),
             _call("apply_patch", {"input": patch}),
             _call("exec_command", {"cmd": "cat notes.txt"}),
             "The notes file is written and checked."]

    def output(body: dict[str, Any]) -> FakeOutput:
        done = body["prompt"].count("<tool_response>")  # tool results so far in the history
        text = steps[min(done, len(steps) - 1)]
        return FakeOutput([text[i:i + 6] for i in range(0, len(text), 6)])

    engine = FakeEngine(output, props={"chat_template": template, "model_path": "/m/served.gguf",
                                       "default_generation_settings": {"n_ctx": 262144}, "total_slots": 1})
    rec = Recorder(create_app(GatewayConfig(engine_url="fake://", model_format="hermes"), engine))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(rec, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        _, env = _codex_home(f"http://127.0.0.1:{port}", small)
        proc = subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", "--json",
                               "--dangerously-bypass-approvals-and-sandbox", "-C", str(work),
                               "Look around, write a notes file and check it."],
                              env=env, cwd=work, capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
    if proc.returncode != 0:
        raise SystemExit(f"codex exited {proc.returncode}: {proc.stderr[-1500:]} {proc.stdout[-1500:]}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    answer = [e["item"]["text"] for e in events
              if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"]
    version = subprocess.run([str(CODEX), "--version"], capture_output=True, text=True, env=env).stdout.strip()
    data = {"codex_version": version, "small_setup": small, "result": answer[-1] if answer else None,
            "session": rec.bodies}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data) + "\n")
    print(f"recorded {len(rec.bodies)} requests of {version} ({data['result']!r}) -> {out}")


def _stream(http: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    with http.stream("POST", f"{url}/v1/responses", json=body) as r:
        if r.status_code != 200:
            raise SystemExit(f"HTTP {r.status_code}: {r.read()[:500]!r}")
        for line in r.iter_lines():
            if line.startswith("data: "):
                ev = json.loads(line[6:])
                if ev["type"] in ("response.completed", "response.incomplete"):
                    usage: dict[str, Any] = ev["response"]["usage"]
                    return usage
                if ev["type"] == "response.failed":
                    raise SystemExit(f"response failed: {ev['response']['error']}")
    raise SystemExit("the stream ended without response.completed")


def replay(url: str, data: dict[str, Any], max_tokens: int, api_key: str | None) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    turns = []
    with httpx.Client(timeout=1800, headers=headers) as http:
        for i, body in enumerate(data["session"], 1):
            body = {**body, "max_output_tokens": max_tokens, "temperature": 0}
            t0 = time.perf_counter()
            u = _stream(http, url, body)
            prompt = int(u["input_tokens"])
            cached = int(u["input_tokens_details"]["cached_tokens"])
            frac = cached / prompt if prompt else 0.0
            turns.append({"turn": i, "input_items": len(body["input"]), "prompt_tokens": prompt,
                          "cached_tokens": cached, "cached_fraction": round(frac, 4),
                          "seconds": round(time.perf_counter() - t0, 1)})
            print(f"turn {i}: {len(body['input'])} input items, prompt {prompt} tokens, cached {cached} "
                  f"({frac:.1%}), {turns[-1]['seconds']} s", flush=True)
    later = [t["cached_fraction"] for t in turns[1:]]
    return {"bench": "gateway-responses-cache", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "codex_version": data.get("codex_version"), "target": url, "turns": turns,
            "min_cached_fraction_from_turn_2": min(later) if later else None, "goal": 0.9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/codex-session.json")
    r.add_argument("--small", action="store_true",
                   help="short base instructions, no optional tools (a first prompt that fits SmolLM2's 8192-token slot)")
    p = sub.add_parser("replay")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running gateway")
    where.add_argument("--demo", action="store_true", help="bring the demo cluster up (and down after)")
    p.add_argument("--ctx", type=int, default=8192,
                   help="--demo: the server's context (llama-server holds SmolLM2's slots to its trained 8192)")
    p.add_argument("--session", type=Path, default=ROOT / "benchmarks/results/codex-session.json")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--api-key")
    p.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.out, args.small)
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
