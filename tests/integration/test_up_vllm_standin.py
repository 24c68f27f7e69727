"""`splitserve up` / `status` / `down` of a one-node ``backend = "vllm"`` spec whose ``vllm`` is the
stand-in (a ``vllm`` script next to the spec's interpreter that serves a FakeEngine in vLLM's HTTP
shape, ``python -m splitserve.engine._fake_http --shape vllm``): preflight
finds the engine's version, readiness is a real streamed token through ``/v1/completions``,
`status` shows the rank, `down` leaves nothing; a stand-in that never answers fails `up` in time
with its log named."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
from openai.types.chat import ChatCompletionMessageParam

from helpers import free_ports, wait_dead
from splitserve.cluster import cluster_state_dir, load_spec, read_state

CLI = [sys.executable, "-m", "splitserve"]

VLLM = """#!/bin/sh
# `vllm serve MODEL --host H --port P ...` -> a FakeEngine in vLLM's shape (other flags ignored)
shift
model=$1; shift
host=127.0.0.1; port=8000
while [ $# -gt 0 ]; do
  case $1 in --host) host=$2; shift;; --port) port=$2; shift;; esac
  shift
done
{sleep}exec {python} -m splitserve.engine._fake_http --shape vllm --model "$model" --host "$host" --port "$port"
"""


def fake_vllm(root: Path, sleep: str = "") -> Path:
    """A folder with ``python`` (which imports a ``vllm`` module) and a ``vllm`` script."""
    site = root / "site" / "vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text('__version__ = "0.0.0+standin"\n')
    bin_dir = root / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={root / "site"} exec {sys.executable} "$@"\n')
    vllm = bin_dir / "vllm"
    vllm.write_text(VLLM.format(python=sys.executable, sleep=sleep))
    for f in (python, vllm):
        f.chmod(0o755)
    return python


def spec_file(tmp_path: Path, python: Path, load_timeout: float = 120) -> Path:
    (port,) = free_ports(1)
    path = tmp_path / "vllm.toml"
    path.write_text(
        "\n".join(
            [
                'name = "vstand"',
                'backend = "vllm"',
                f'state_dir = "{tmp_path / "state"}"',
                f"load_timeout = {load_timeout}",
                "[gateway]",
                "enabled = false",
                "[vllm]",
                'model = "standin"',
                f'python = "{python}"',
                f"port = {port}",
                "",
            ]
        )
    )
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def test_up_status_down_with_the_standin(tmp_path: Path) -> None:
    spec_path = spec_file(tmp_path, fake_vllm(tmp_path / "venv"))
    spec = load_spec(spec_path)
    pre = run_cli("preflight", "-c", str(spec_path), "--json")
    rows = {(r["check"], r["node"]): r for r in json.loads(pre.stdout)}
    assert pre.returncode == 0, pre.stdout + pre.stderr
    assert rows[("engine", "head")]["message"] == "vllm 0.0.0+standin"
    assert rows[("ports", "head")]["status"] == "pass"

    up = run_cli("up", "-c", str(spec_path))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "streamed its first token" in up.stderr and "ready:" in up.stdout
        state = read_state(cluster_state_dir(spec))
        assert state is not None and state.engine == "vllm 0.0.0+standin"
        (rank,) = state.processes
        assert (rank.node, rank.role) == ("head", "vllm") and "--load-format" in rank.argv
        r = httpx.post(f"{state.endpoint}/v1/completions", json={"model": "standin", "prompt": "a b", "max_tokens": 50})
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == "You said: a b"
        st = run_cli("status", "-c", str(spec_path), "--json")
        data = json.loads(st.stdout)
        assert st.returncode == 0 and data["processes"][0]["alive"] and data["engine_backend"]["backend"] == "vllm"
    finally:
        down = run_cli("down", "-c", str(spec_path))
    assert down.returncode == 0 and "stopped: head" in down.stdout
    assert wait_dead([rank.pid]) == []
    assert read_state(cluster_state_dir(spec)) is None


def test_an_engine_that_never_serves_fails_up_in_time(tmp_path: Path) -> None:
    python = fake_vllm(tmp_path / "venv", sleep="sleep 600; ")
    spec_path = spec_file(tmp_path, python, load_timeout=4)
    up = run_cli("up", "-c", str(spec_path), "--skip-preflight")
    assert up.returncode != 0
    line = up.stderr.strip().splitlines()[-1]
    assert "head: vllm did not stream a token within 4 s (log: " in line, up.stderr
    assert read_state(cluster_state_dir(load_spec(spec_path))) is None
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert [p for p in left if int(p) != os.getpid()] == []


def test_dry_run_prints_the_command_and_the_readiness(tmp_path: Path) -> None:
    spec_path = spec_file(tmp_path, fake_vllm(tmp_path / "venv"))
    res = run_cli("up", "-c", str(spec_path), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert re.search(r"^# \d+\. head: start vllm serve on local$", res.stdout, re.M), res.stdout
    assert "/v1/completions streams a token (not /health)" in res.stdout
    assert "# fix: --load-format safetensors" in res.stdout


def test_the_gateway_in_front_serves_openai_bench_and_eval(tmp_path: Path) -> None:
    """`up` with the gateway on (the default): splitserve renders the prompt, the stand-in answers
    through vLLM's /v1/completions, and the official client, `bench speed` and `eval run` work
    against the gateway unchanged."""
    import openai

    from splitserve.bench import load_run

    model = tmp_path / "model"  # a model folder as vLLM takes it: the gateway reads its template here
    model.mkdir()
    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    config = {"chat_template": template, "bos_token": None, "eos_token": "<|im_end|>"}
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    spec_path = spec_file(tmp_path, fake_vllm(tmp_path / "venv"))
    (gw_port,) = free_ports(1)
    text = spec_path.read_text().replace("[gateway]\nenabled = false", f"[gateway]\nport = {gw_port}")
    spec_path.write_text(text.replace('model = "standin"', f'model = "{model}"'))
    spec = load_spec(spec_path)
    up = run_cli("up", "-c", str(spec_path))
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = read_state(cluster_state_dir(spec))
        assert state is not None and state.gateway is not None
        pids = [p.pid for p in state.processes]
        assert state.endpoint == f"http://127.0.0.1:{gw_port}"
        assert any("vllm+http://" in a for a in state.gateway.argv), state.gateway.argv

        client = openai.OpenAI(base_url=f"{state.endpoint}/v1", api_key="none")
        msg: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]
        whole = client.chat.completions.create(model="any", messages=msg, max_tokens=40)
        assert "hello there" in (whole.choices[0].message.content or "")
        parts = client.chat.completions.create(model="any", messages=msg, max_tokens=40, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in parts if c.choices)
        assert streamed == whole.choices[0].message.content

        out = tmp_path / "speed.json"
        bench = run_cli(
            "bench",
            "speed",
            "--url",
            state.endpoint,
            "--prompt-tokens",
            "32",
            "--gen-tokens",
            "4",
            "--repeat",
            "1",
            "-o",
            str(out),
        )
        assert bench.returncode == 0, bench.stderr[-2000:]
        cells = [r for r in load_run(out).records if r.kind == "speed"]
        assert cells and all(r.ok for r in cells), [r.error for r in cells]

        run = tmp_path / "eval"
        fixtures = Path(__file__).parent.parent / "fixtures" / "eval" / "toolery"
        ev = run_cli(
            "eval",
            "run",
            str(fixtures),
            "--url",
            state.endpoint,
            "--limit",
            "2",
            "--max-tokens",
            "16",
            "-o",
            str(run),
            "--no-report",
        )
        assert ev.returncode == 0, ev.stderr[-2000:]
        trials = [json.loads(ln) for ln in (run / "run.jsonl").read_text().splitlines() if ln.strip()]
        assert len([t for t in trials if t.get("type") == "trial"]) == 2
    finally:
        down = run_cli("down", "-c", str(spec_path))
    assert down.returncode == 0, down.stderr
    assert wait_dead(pids) == []
