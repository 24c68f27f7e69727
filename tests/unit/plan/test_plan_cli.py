"""``splitserve inspect`` and ``splitserve plan`` as a user runs them: output, JSON, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

import splitserve.cli._inspect  # noqa: F401  (registers inspect and plan)
from gguf_factory import dense_llama
from splitserve.cli._app import app

CLI = [sys.executable, "-m", "splitserve"]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> Result:
    """The command in-process (fast); ``test_the_installed_entry_point`` runs the real one."""
    r = CliRunner().invoke(app, list(args))
    return Result(r.exit_code, r.stdout, r.stderr)


def test_the_installed_entry_point(tmp_path: Path) -> None:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    res = subprocess.run([*CLI, "inspect", str(p), "--json"], check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and json.loads(res.stdout)["n_layer"] == 2
    bad = subprocess.run([*CLI, "plan", str(p)], check=False, capture_output=True, text=True, timeout=120)
    _one_line_error(Result(bad.returncode, bad.stdout, bad.stderr), "--node")


def _one_line_error(res: Result, needle: str) -> None:
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("splitserve: error:") and needle in lines[0], res.stderr


def test_inspect_and_plan_json(tmp_path: Path) -> None:
    shards = dense_llama(
        tmp_path / "d.gguf", n_layer=6, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024, n_shards=2
    )
    res = run_cli("inspect", str(shards[1]), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["architecture"] == "llama" and info["n_layer"] == 6 and len(info["shards"]) == 2
    res = run_cli(
        "plan",
        str(shards[0]),
        "--node",
        "a=1,device=h100",
        "--node",
        "b=1,bw=1000",
        "--ctx",
        "4096",
        "--margin",
        "0.25",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert [n["name"] for n in plan["nodes"]] == ["a", "b"] and plan["fits"]
    assert plan["nodes"][0]["layers"][0] == 0 and plan["nodes"][1]["layers"][1] == 5
    assert plan["decode_tps_upper_bound"] > 0


def test_plan_text_output(tmp_path: Path) -> None:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024)
    res = run_cli("plan", str(p), "--node", "a=2", "--node", "b=2", "--ctx", "2048", "--tensor-split", "1,1")
    assert res.returncode == 0, res.stderr
    assert "--tensor-split 1,1" in res.stdout and "max context" in res.stdout
    res = run_cli("inspect", str(p), "--layers")
    assert res.returncode == 0 and "quantisation mix" in res.stdout and "Q8_0" in res.stdout


def test_plan_that_does_not_fit_says_so(tmp_path: Path) -> None:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024)
    res = run_cli("plan", str(p), "--node", "a=0.001", "--node", "b=0.001", "--ctx", "4096")
    assert res.returncode == 3 and "does not fit" in res.stdout and "Traceback" not in res.stderr


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello")
    _one_line_error(run_cli("inspect", str(bad)), "not a GGUF file")
    shards = dense_llama(
        tmp_path / "s.gguf", n_layer=4, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512, n_shards=2
    )
    shards[1].unlink()
    _one_line_error(run_cli("plan", str(shards[0]), "--node", "a=8"), "missing")
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    _one_line_error(run_cli("plan", str(p)), "--node")
    _one_line_error(run_cli("plan", str(p), "--node", "a=x"), "not a number")
    _one_line_error(
        run_cli("plan", str(p), "--node", "a=8", "--cache-type-v", "q8_0", "--flash-attn", "off"), "flash attention"
    )
    _one_line_error(run_cli("plan", str(p), "--node", "a=8", "--tensor-split", "1,1"), "one per node")


def test_plan_from_a_spec(tmp_path: Path) -> None:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=6, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024)
    spec = tmp_path / "cluster.toml"
    spec.write_text(
        f'model = "{p}"\n[[workers]]\nname = "w1"\nport = 50052\n[[workers]]\nname = "w2"\n'
        'port = 50053\n[server]\nctx_size = 4096\ncache_type_k = "q8_0"\ncache_type_v = "q8_0"\n'
    )
    res = run_cli("plan", "-c", str(spec), "--node", "w1=2", "--node", "w2=2", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["settings"]["ctx"] == 4096 and plan["settings"]["cache_type_k"] == "q8_0"
    assert [n["name"] for n in plan["nodes"]] == ["w1", "w2"]
    _one_line_error(run_cli("plan", "-c", str(spec)), "no memory size for w1, w2")
