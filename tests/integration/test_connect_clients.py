"""``splitserve connect --write``: the real Claude Code and Codex CLIs (npm, installed by
scripts/setup.sh) run with nothing but the home ``connect`` wrote, against the gateway over a
scripted engine on loopback, and finish a tool-using turn.

- Claude Code gets no ANTHROPIC_* variable from the test: the base URL, token, model, context
  and output cap must come from the ``~/.claude/settings.json`` that ``connect`` wrote.
- Codex reads the ``~/.codex/config.toml`` and model catalog ``connect`` wrote: the custom
  provider on ``/v1/responses`` and the ``freeform`` apply_patch entry, without which Codex
  would send no ``apply_patch`` tool for the unknown model name; the scripted model's patch
  must create the file. Codex runs in a network namespace with only a loopback device (the
  harness of test_codex.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import free_ports, serve_app
from splitserve.connect import Endpoint, connect_config, write_setup
from splitserve.engine import FakeEngine, FakeOutput, resolve_source
from splitserve.gateway import GatewayConfig, KeyRing, create_app

sys.path.insert(0, str(Path(__file__).parent))
from test_claude_code import OFFLINE, claude_bin
from test_codex import FORWARDER, codex_bin, items, serve_uds

KEY = "sk-connect-test"
MODEL = "connect-served"
ANSWER = "CONNECTED: the file is written."
TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"  # hermes calls


def call(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def engine(first: str, marker: str, context: int) -> FakeEngine:
    """``first`` (a call) until ``marker`` is in the prompt (its result came back), then the answer."""

    def output(body: dict[str, Any]) -> FakeOutput:
        text = ANSWER if marker in body["prompt"] else first
        return FakeOutput([text[i : i + 9] for i in range(0, len(text), 9)])

    template = (resolve_source(None).path / "models/templates" / TEMPLATE).read_text()
    props = {
        "chat_template": template,
        "model_path": f"/models/{MODEL}.gguf",
        "default_generation_settings": {"n_ctx": context},
        "total_slots": 2,
    }
    return FakeEngine(output, props=props)


def recording(app: Any, seen: list[dict[str, Any]]) -> Any:
    """``app``, recording the path and JSON body of every POST."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        seen.append({"path": scope["path"], "body": json.loads(raw or b"{}")})
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return wrapped


def offline_env(home: Path) -> dict[str, str]:
    (dead,) = free_ports(1)  # a closed loopback port: any proxied request fails at once
    proxy = f"http://127.0.0.1:{dead}"
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HTTPS_PROXY": proxy,
        "HTTP_PROXY": proxy,
        "https_proxy": proxy,
        "http_proxy": proxy,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


@pytest.mark.slow
def test_claude_code_runs_from_the_settings_connect_wrote(tmp_path: Path) -> None:
    target = tmp_path / "work" / "hello.txt"
    target.parent.mkdir()
    content = "hello through connect\n"
    eng = engine(call("Write", {"file_path": str(target), "content": content}), content.strip(), 32768)
    seen: list[dict[str, Any]] = []
    app = recording(create_app(GatewayConfig(engine_url="fake://", keys=KeyRing.build(KEY)), eng), seen)
    home = tmp_path / "home"
    with serve_app(app) as url:
        setup = connect_config(
            "claude-code", Endpoint(url=url, model=MODEL, context=32768, api_key=KEY), home=str(home)
        )
        write_setup(setup, home)
        env = offline_env(home) | OFFLINE  # no ANTHROPIC_* here: settings.json must carry them
        proc = subprocess.run(
            [
                str(claude_bin()),
                "-p",
                f"Write a greeting to {target}",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Write",
                "--max-turns",
                "4",
            ],
            cwd=target.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
    assert proc.returncode == 0, (proc.stderr[-2000:], proc.stdout[-2000:])
    assert target.read_text() == content  # the real tool ran
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    done = [e for e in events if e.get("type") == "result"][-1]
    assert done["subtype"] == "success" and done["result"] == ANSWER, done
    messages = [s["body"] for s in seen if s["path"] == "/v1/messages"]
    assert len(messages) >= 2
    assert {b["model"] for b in messages} == {MODEL}  # ANTHROPIC_MODEL from the settings
    assert {b["max_tokens"] for b in messages} == {8192}  # CLAUDE_CODE_MAX_OUTPUT_TOKENS: a quarter of 32768


@pytest.mark.slow
def test_codex_runs_from_the_config_and_catalog_connect_wrote(tmp_path: Path) -> None:
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello through connect\n*** End Patch\n"
    eng = engine(call("apply_patch", {"input": patch}), "hello.txt", 65536)
    seen: list[dict[str, Any]] = []
    app = recording(create_app(GatewayConfig(engine_url="fake://", keys=KeyRing.build(KEY)), eng), seen)
    port = 18081
    home = tmp_path / "home"
    setup = connect_config(
        "codex", Endpoint(url=f"http://127.0.0.1:{port}", model=MODEL, context=65536, api_key=KEY), home=str(home)
    )
    write_setup(setup, home)
    work = tmp_path / "work"
    work.mkdir()
    forwarder = tmp_path / "forwarder.py"
    forwarder.write_text(FORWARDER)
    sock = tmp_path / "gateway.sock"
    argv = [
        "unshare",
        "-n",
        "sh",
        "-c",
        'ip link set lo up && exec "$0" "$@"',
        sys.executable,
        str(forwarder),
        str(sock),
        str(port),
        str(codex_bin()),
        "exec",
        "--skip-git-repo-check",
        "--json",
        "--dangerously-bypass-approvals-and-sandbox",
        "-C",
        str(work),
        "Write the file.",
    ]
    env = offline_env(home) | setup.env | {"RUST_LOG": "error"}  # SPLITSERVE_API_KEY, as connect printed
    with serve_uds(app, sock):
        proc = subprocess.run(
            argv, env=env, cwd=work, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
        )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, (proc.stderr[-3000:], events[-5:])
    first = next(s["body"] for s in seen if s["path"] == "/v1/responses")
    assert first["model"] == MODEL
    tools = {(t.get("type"), t.get("name")) for t in first.get("tools", [])}
    assert ("custom", "apply_patch") in tools, tools  # offered because of the catalog entry
    assert (work / "hello.txt").read_text() == "hello through connect\n"
    assert items(events, "agent_message")[-1]["text"] == ANSWER
