"""The real Claude Code CLI (``@anthropic-ai/claude-code`` from npm) driving the gateway.

Headless (``claude -p ... --output-format stream-json``), a throwaway ``HOME``,
``ANTHROPIC_BASE_URL`` at the gateway on loopback, nonessential traffic off and every proxy
variable pointing at a closed loopback port (so nothing leaves the machine). scripts/setup.sh
installs the CLI into ``~/.cache/splitserve/npm`` (``SPLITSERVE_NPM_PREFIX``).

- In front of a scripted engine whose raw output is a tool call in the model's format
  (hermes, qwen3-coder, minimax-m3): Claude Code must run the real tool (write a file in a
  temp folder, run a shell command), send the result back and finish with the scripted
  answer. The engine's second prompt must start with its first (the billing block and the
  moved ``cache_control`` markers do not break the prompt cache), on the same engine slot.
- In front of the real llama-server with SmolLM2: a turn completes without an API error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import bare_server, free_ports, serve_app
from splitserve.engine import FakeEngine, FakeOutput, resolve_source
from splitserve.gateway import GatewayConfig, KeyRing, create_app

NS = "]<]minimax[>["
TEMPLATES = {
    "hermes": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "minimax-m3": "MiniMax-M3.jinja",
    "qwen3-coder": "Qwen3-Coder.jinja",
}
KEY = "sk-claude-code-test"
ANSWER = "Done: the work is finished."
THINK = {"<mm:think>": "</mm:think>", "<think>": "</think>"}

OFFLINE = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
}


def claude_bin() -> Path:
    prefix = Path(os.environ.get("SPLITSERVE_NPM_PREFIX", Path.home() / ".cache/splitserve/npm"))
    exe = prefix / "node_modules/@anthropic-ai/claude-code/bin/claude.exe"
    if not exe.is_file():
        pytest.fail(f"{exe}: Claude Code's CLI is not installed; scripts/setup.sh installs it")
    return exe


def template(fmt: str) -> str:
    return (resolve_source(None).path / "models/templates" / TEMPLATES[fmt]).read_text()


def raw_call(fmt: str, name: str, args: dict[str, Any]) -> str:
    if fmt == "hermes":
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
    if fmt == "qwen3-coder":
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    params = "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in args.items())
    return f'{NS}<tool_call>\n{NS}<invoke name="{name}">{params}{NS}</invoke>\n{NS}</tool_call>'


def run_claude(
    url: str,
    cwd: Path,
    prompt: str,
    *extra: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    home: Path | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """``claude -p`` against the gateway; its stream-json events and its stderr."""
    (dead,) = free_ports(1)  # a closed loopback port: any proxied request fails at once
    home_dir = str(home or tempfile.mkdtemp(prefix="claude-home-"))
    proxy = f"http://127.0.0.1:{dead}"
    run_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home_dir,
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_MODEL": "served",
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "32768",
        "HTTPS_PROXY": proxy,
        "HTTP_PROXY": proxy,
        "https_proxy": proxy,
        "http_proxy": proxy,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        **OFFLINE,
        **(env or {}),
    }
    proc = subprocess.run(
        [str(claude_bin()), "-p", prompt, "--output-format", "stream-json", "--verbose", *extra],
        cwd=cwd,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, f"claude exited {proc.returncode}: {proc.stderr[-2000:]}\n{proc.stdout[-2000:]}"
    return events, proc.stderr


def result(events: list[dict[str, Any]]) -> dict[str, Any]:
    done = [e for e in events if e.get("type") == "result"]
    assert done, events
    return done[-1]


def scripted(fmt: str, tool: str, args: dict[str, Any], marker: str) -> FakeEngine:
    """The call first; once the call is in the history (``marker`` in the prompt), the answer."""

    def output(body: dict[str, Any]) -> FakeOutput:
        prompt = body["prompt"].rstrip()
        # a prompt that opens the model's thinking (the template's thinking switch is on)
        think = next((f"I know what to do.{close}" for open_, close in THINK.items() if prompt.endswith(open_)), "")
        if marker in body["prompt"]:
            return FakeOutput([think, ANSWER[:6], ANSWER[6:]])
        call = think + raw_call(fmt, tool, args)
        return FakeOutput([call[i : i + 7] for i in range(0, len(call), 7)])

    return FakeEngine(
        output,
        props={
            "chat_template": template(fmt),
            "model_path": "/m/served.gguf",
            "default_generation_settings": {"n_ctx": 32768},
            "total_slots": 2,
        },
    )


def serve(engine: FakeEngine, fmt: str) -> Any:
    cfg = GatewayConfig(engine_url="fake://", model_format=fmt, keys=KeyRing.build(KEY))
    return serve_app(create_app(cfg, engine))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(TEMPLATES))
def test_claude_code_writes_a_file_through_the_gateway(fmt: str, tmp_path: Path) -> None:
    target = tmp_path / "hello.txt"
    content = f"hi from splitserve in {fmt}\n"
    engine = scripted(fmt, "Write", {"file_path": str(target), "content": content}, marker=content.strip())
    with serve(engine, fmt) as url:
        events, _ = run_claude(
            url, tmp_path, f"Write a greeting to {target}", "--allowedTools", "Write", "--max-turns", "4"
        )
    assert target.read_text() == content  # the real tool ran
    done = result(events)
    assert done["subtype"] == "success" and done["result"] == ANSWER, done
    assert not done.get("api_error_status"), done
    uses = [
        b for e in events if e.get("type") == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use"
    ]
    assert len(uses) == 1 and uses[0]["name"] == "Write" and uses[0]["id"].startswith("toolu_")
    first, second = engine.bodies[0], engine.bodies[1]
    assert "x-anthropic-billing-header" not in first["prompt"]
    # the second turn re-sends the first: its prompt extends the first one, on the same slot
    assert second["prompt"].startswith(first["prompt"]), "the prompt prefix changed between turns"
    assert first.get("id_slot") == second.get("id_slot") is not None


@pytest.mark.slow
def test_claude_code_runs_a_shell_command_through_the_gateway(tmp_path: Path) -> None:
    out = tmp_path / "ran.txt"
    command = f"echo shell-ok > {out}"
    engine = scripted("hermes", "Bash", {"command": command, "description": "write a marker"}, marker="shell-ok")
    with serve(engine, "hermes") as url:
        events, _ = run_claude(url, tmp_path, "Run the marker command", "--allowedTools", "Bash", "--max-turns", "4")
    assert out.read_text().strip() == "shell-ok"
    done = result(events)
    assert done["subtype"] == "success" and done["result"] == ANSWER, done


@pytest.fixture(scope="module")
def smol_url(engine, smollm2) -> Iterator[str]:  # type: ignore[no-untyped-def]
    # Greedy whatever the request says (Claude Code sends no temperature, and llama-server's
    # default samples at 0.8 with a random seed): the sampler chain is top-k alone with k = 1.
    with bare_server(
        engine, smollm2, "--parallel", "1", "-t", "2", "--samplers", "top_k", "--top-k", "1", ctx=32768
    ) as url:
        yield url


@pytest.mark.engine
@pytest.mark.slow
def test_claude_code_completes_a_turn_on_smollm2(smol_url: str) -> None:
    # Claude Code's system prompt names its HOME and working folder: fixed paths (made afresh)
    # keep the prompt, and so the greedy reply, the same on every run.
    base = Path(tempfile.gettempdir()) / "splitserve-claude-smollm2"
    shutil.rmtree(base, ignore_errors=True)
    (base / "home").mkdir(parents=True)
    (base / "work").mkdir()
    cfg = GatewayConfig(engine_url=smol_url, keys=KeyRing.build(KEY))
    with serve_app(create_app(cfg)) as url:
        events, _ = run_claude(
            url,
            base / "work",
            "Say hello.",
            "--tools",
            "",
            "--max-turns",
            "1",
            env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "512", "CLAUDE_CODE_DISABLE_THINKING": "1"},
            timeout=900,
            home=base / "home",
        )
    done = result(events)
    assert not done.get("api_error_status") and not done.get("is_error"), done
    assert done["subtype"] == "success", done
