"""The real Codex CLI (``@openai/codex`` from npm) driving the gateway's ``/v1/responses``.

Headless (``codex exec --json``), a throwaway ``CODEX_HOME`` whose ``config.toml`` names a
custom provider (``base_url`` the gateway's ``/v1``, ``wire_api = "responses"``) and a model
catalog entry with ``apply_patch_tool_type = "freeform"`` (made from Codex's own catalog,
``codex debug models``), so Codex offers ``apply_patch`` as a custom tool. Codex runs in a
network namespace of its own that has only a loopback device: the gateway is reached through
a forwarder from that loopback to the gateway's Unix socket, and nothing else can be reached
at all. scripts/setup.sh installs the CLI into ``~/.cache/splitserve/npm``
(``SPLITSERVE_NPM_PREFIX``).

- In front of a scripted engine whose raw output is a tool call in the model's format
  (hermes, qwen3-coder, minimax-m3): Codex must run the shell command, apply the patch (the
  file appears in the temp folder), send both results back and finish with the scripted
  answer; the prompts of one Codex session extend each other and keep one engine slot.
- In front of the real llama-server with SmolLM2: a turn completes without an error.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from helpers import bare_server
from splitserve.engine import FakeEngine, resolve_source
from splitserve.gateway import GatewayConfig, KeyRing, create_app
from unit.chat._support import SYNTAXES

TEMPLATES = {
    "hermes": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "minimax-m3": "MiniMax-M3.jinja",
    "qwen3-coder": "Qwen3-Coder.jinja",
}
KEY = "sk-codex-test"
MODEL = "splitserve-test"
ANSWER = "SCRIPTED-ANSWER: the file is written and the command ran."
THOUGHT = "I should run the check first."
COMMAND = "echo $((6*7))-ok"  # its output (42-ok) is not its text
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from the patch\n*** End Patch\n"

FORWARDER = r"""
import asyncio, sys

uds, port, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]


async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    except OSError:
        pass
    finally:
        w.close()


async def handle(r, w):
    ur, uw = await asyncio.open_unix_connection(uds)
    await asyncio.gather(pipe(r, uw), pipe(ur, w))


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    proc = await asyncio.create_subprocess_exec(*cmd)
    rc = await proc.wait()
    server.close()
    return rc


sys.exit(asyncio.run(main()))
"""


def codex_bin() -> Path:
    prefix = Path(os.environ.get("SPLITSERVE_NPM_PREFIX", Path.home() / ".cache/splitserve/npm"))
    exe = prefix / "node_modules/.bin/codex"
    if not exe.exists():
        pytest.fail(f"{exe}: Codex CLI is not installed; scripts/setup.sh installs it")
    return exe


def template(fmt: str) -> str:
    return (resolve_source(None).path / "models/templates" / TEMPLATES[fmt]).read_text()


def raw_call(fmt: str, name: str, args: dict[str, Any]) -> str:
    """A tool call as the model writes it in ``fmt``."""
    return SYNTAXES[fmt].one(name, args)


@contextmanager
def serve_uds(app: Any, path: Path) -> Iterator[None]:
    """The app under uvicorn in a thread, on a Unix socket."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, uds=str(path), log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the gateway did not start"
        time.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=15)


SMALL_FEATURES = (
    "[features]\ngoals = false\napps = false\nplugins = false\nmemories = false\n\n[agents]\nenabled = false\n\n"
)


def codex_home(tmp: Path, port: int, context: int, small: bool = False) -> Path:
    """A throwaway CODEX_HOME: the provider, and a catalog entry made from Codex's own.
    ``small``: short base instructions and no optional tools, so the first prompt (~2.5k
    tokens instead of ~10k) fits a small model's trained context."""
    home = tmp / "codex-home"
    home.mkdir()
    out = subprocess.run(
        [str(codex_bin()), "debug", "models"],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    models = json.loads(out.stdout)["models"]
    # a model of the classic tool set (not "code mode", whose tools are JavaScript)
    classic = [m for m in models if m.get("apply_patch_tool_type") == "freeform" and not m.get("tool_mode")]
    base = next((m for m in classic if m["slug"] == "gpt-5.5"), classic[0])
    entry = {
        **base,
        "slug": MODEL,
        "display_name": MODEL,
        "context_window": context,
        "max_context_window": context,
        "apply_patch_tool_type": "freeform",
    }
    if small:
        entry.pop("model_messages", None)
        entry |= {
            "base_instructions": "You are Codex, a coding agent. Use the tools to act; answer briefly.",
            "include_skills_usage_instructions": False,
            "include_plugin_usage_instructions": False,
            "include_apps_usage_instructions": False,
            "supports_search_tool": False,
            "experimental_supported_tools": [],
        }
    (home / "catalog.json").write_text(json.dumps({"models": [entry]}))
    (home / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "splitserve"\n'
        f'model_catalog_json = "{home}/catalog.json"\n'
        "check_for_update_on_startup = false\n"
        + ('web_search = "disabled"\n\n' + SMALL_FEATURES if small else "\n")
        + "[analytics]\nenabled = false\n\n"
        '[model_providers.splitserve]\nname = "splitserve"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\nenv_key = "SPLITSERVE_KEY"\n'
        'wire_api = "responses"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
    )
    return home


def _env(home: Path) -> dict[str, str]:
    dead = "http://127.0.0.1:9"  # discard port: a proxied request fails at once
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "SPLITSERVE_KEY": KEY,
        "HTTPS_PROXY": dead,
        "HTTP_PROXY": dead,
        "https_proxy": dead,
        "http_proxy": dead,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "RUST_LOG": "error",
    }


def run_codex(
    app: Any, tmp: Path, work: Path, prompt: str, context: int = 65536, timeout: float = 300, small: bool = False
) -> tuple[list[dict[str, Any]], str, int]:
    """``codex exec --json`` in a loopback-only network namespace against ``app``: its JSONL
    events, its stderr and its exit status."""
    sock = tmp / "gateway.sock"
    port = 18080
    home = codex_home(tmp, port, context, small)
    forwarder = tmp / "forwarder.py"
    forwarder.write_text(FORWARDER)
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
        prompt,
    ]
    with serve_uds(app, sock):
        proc = subprocess.run(
            argv, env=_env(home), cwd=work, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return events, proc.stderr, proc.returncode


def items(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e.get("type") == "item.completed" and e["item"].get("type") == kind]


def scripted(fmt: str) -> Callable[[dict[str, Any]], Any]:
    """The engine's answer to each prompt of the session: reasoning and the shell command, then
    (once its output is in the prompt) the patch, then (once the patch's result is) the answer."""

    def answer(body: dict[str, Any]) -> Any:
        prompt = body.get("prompt", "")
        if prompt.count("hello.txt") >= 2 and "42-ok" in prompt:  # the patch, and its result
            return list(ANSWER)
        if "42-ok" in prompt:
            return list(raw_call(fmt, "apply_patch", {"input": PATCH}))
        opener, closer = SYNTAXES[fmt].think or ("", "")
        return list(f"{opener}{THOUGHT}{closer}\n" + raw_call(fmt, "exec_command", {"cmd": COMMAND}))

    return answer


@pytest.mark.parametrize("fmt", list(TEMPLATES))
def test_codex_runs_the_tools_the_scripted_model_calls_and_finishes(fmt: str, tmp_path: Path) -> None:
    props = {
        "chat_template": template(fmt),
        "model_path": "/models/model.gguf",
        "default_generation_settings": {"n_ctx": 262144},
        "total_slots": 4,
    }
    engine = FakeEngine(scripted(fmt), props=props)
    app = create_app(GatewayConfig(engine_url="fake://", model_format=fmt, keys=KeyRing.build(KEY)), engine)
    work = tmp_path / "work"
    work.mkdir()
    events, stderr, rc = run_codex(app, tmp_path, work, "Run the check, then write the file.")
    assert rc == 0, (stderr[-3000:], events[-5:])
    commands = items(events, "command_execution")
    assert commands, events
    assert COMMAND in commands[0]["command"] and "42-ok" in commands[0]["aggregated_output"]
    assert commands[0]["exit_code"] == 0
    changes = items(events, "file_change")
    assert changes and changes[0]["status"] == "completed", [json.dumps(e)[:600] for e in events]
    assert (work / "hello.txt").read_text() == "hello from the patch\n"
    messages = items(events, "agent_message")
    assert messages and messages[-1]["text"] == ANSWER
    assert events[-1]["type"] == "turn.completed"
    assert not [e for e in events if e.get("type") in ("turn.failed", "error")]
    prompts = [b["prompt"] for b in engine.bodies]
    assert len(prompts) == 3
    # each request of the session extends the one before (the engine's cache holds it), on one slot
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(prompts))
    assert len({b.get("id_slot") for b in engine.bodies}) == 1
    if fmt == "minimax-m3":  # its template renders earlier reasoning: Codex sent ours back
        assert THOUGHT in prompts[1]


@pytest.mark.engine
def test_codex_against_llama_server_with_smollm2_completes_a_turn(engine, smollm2, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # greedy by default (Codex sends no temperature); Codex's small setup keeps the first prompt
    # (~2.5k tokens) inside SmolLM2's trained context (8192), so the model answers and stops
    with bare_server(engine, smollm2, "--temp", "0", "--parallel", "1", "-t", "1", ctx=8192) as url:
        app = create_app(GatewayConfig(engine_url=url, keys=KeyRing.build(KEY)))
        work = tmp_path / "work"
        work.mkdir()
        events, stderr, rc = run_codex(app, tmp_path, work, "Say hello.", context=8192, timeout=590, small=True)
    assert rc == 0, (stderr[-3000:], events[-5:])
    assert not [e for e in events if e.get("type") in ("turn.failed", "error")], events
    assert events[-1]["type"] == "turn.completed", events
    assert events[-1]["usage"]["input_tokens"] > 1000
