"""vLLM / SGLang load the model on every node: preflight's ``model`` row per node, from what a real
``sh`` reports of a folder (listing, safetensors index) or file, and through engine_preflight on
fake nodes (one with the folder, one without)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_engines_run import HEAD_IP, N2_IP, answer, facts_output, ip_json

from splitserve.cluster import parse_spec
from splitserve.cluster._engines_facts import FACT_MARK, engine_preflight
from splitserve.cluster._model_rows import engine_model_row, is_model_path, model_fact_command


def look(model: str, home: Path) -> tuple[int, str]:
    res = subprocess.run(
        model_fact_command(model), capture_output=True, text=True, env={"HOME": str(home), "PATH": "/usr/bin:/bin"}
    )
    return res.returncode, res.stdout


def folder(root: Path, shards: int = 2, drop: int | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text("{}")
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {f"t{i}": n for i, n in enumerate(names)}})
    )
    for i, n in enumerate(names):
        if i != drop:
            (root / n).write_bytes(b"x")
    return root


def row(model: str, home: Path, host: str = "spark2") -> dict[str, str]:
    return engine_model_row(model, "n2", host, look(model, home)).as_dict()


def test_a_whole_folder_passes_even_under_tilde(tmp_path: Path) -> None:
    folder(tmp_path / "models" / "M")
    r = row("~/models/M", tmp_path)
    assert r["status"] == "pass" and "2 weight file(s)" in r["message"] and "spark2" in r["message"]


def test_a_missing_folder_fails_with_the_copy_to_make(tmp_path: Path) -> None:
    r = row("/nowhere/models/M", tmp_path)
    assert r["status"] == "fail" and "/nowhere/models/M is not on spark2" in r["message"]
    assert "rsync -a /nowhere/models/M/ spark2:/nowhere/models/M/" in r["fix"]


def test_a_shard_missing_from_the_index_fails(tmp_path: Path) -> None:
    folder(tmp_path / "M", shards=3, drop=1)
    r = row(str(tmp_path / "M"), tmp_path)
    assert r["status"] == "fail" and "1 of 3 weight shards missing (model-00002-of-00003.safetensors)" in r["message"]


def test_an_unfinished_download_or_a_folder_that_is_no_model_fails(tmp_path: Path) -> None:
    folder(tmp_path / "M")
    (tmp_path / "M" / "model-00002-of-00002.safetensors").rename(tmp_path / "M" / "x.safetensors.incomplete")
    assert "unfinished" in row(str(tmp_path / "M"), tmp_path)["message"]
    (tmp_path / "E").mkdir()
    (tmp_path / "E" / "notes.txt").write_text("hi")
    assert "no config.json" in row(str(tmp_path / "E"), tmp_path)["message"]


def test_a_file_must_be_a_gguf(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"GGUF\x03\x00")
    (tmp_path / "bad.gguf").write_text("<html>")
    assert row(str(tmp_path / "m.gguf"), tmp_path)["status"] == "pass"
    bad = row(str(tmp_path / "bad.gguf"), tmp_path)
    assert bad["status"] == "fail" and "not a GGUF" in bad["message"]


@pytest.mark.parametrize(
    ("model", "path"), [("Qwen/Qwen3-0.6B", False), ("/models/q", True), ("~/m", True), ("./m", True)]
)
def test_a_hub_id_is_not_looked_for(model: str, path: bool) -> None:
    assert is_model_path(model) is path


def test_engine_preflight_has_a_model_row_per_node(tmp_path: Path) -> None:
    from splitserve.cluster import FakeNetwork

    whole = folder(tmp_path / "M")
    spec = parse_spec(
        {
            "name": "vm",
            "backend": "vllm",
            "state_dir": str(tmp_path / "st"),
            "workers": [{"name": "n2", "host": "box2", "bind": N2_IP}],
            "gateway": {"enabled": False},
            "vllm": {
                "model": str(whole),
                "python": "/venv/bin/python",
                "head_bind": HEAD_IP,
                "tensor_parallel_size": 2,
            },
        }
    )
    net = FakeNetwork()

    def with_model(nic: str, listing: tuple[int, str]) -> bytes:
        return (
            facts_output(nic, engine="0.11.0")
            + f"{FACT_MARK}model\n{listing[1]}\n@@splitserve-rc {listing[0]}\n".encode()
        )

    answer(net, "local", with_model(ip_json("veth-head", HEAD_IP), look(str(whole), tmp_path)))
    answer(net, "box2", with_model(ip_json("veth-n2", N2_IP), (0, "MISSING")))
    rows = {(r.check, r.node): r for r in engine_preflight(spec, net.edges())}
    assert rows[("model", "head")].status == "pass"
    assert rows[("model", "n2")].status == "fail" and f"{whole} is not on box2" in rows[("model", "n2")].message
