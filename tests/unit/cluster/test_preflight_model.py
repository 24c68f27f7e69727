"""Preflight's ``model`` rows on synthetic GGUFs: a whole model passes; a missing file, a shard
set with a shard missing, a shard shorter than its header says, a file that is not a GGUF, and a
missing draft model fail, each naming the path and the fix (the exact `splitserve fetch` when a
fetch manifest says where the model came from)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gguf_factory import Q, dense_llama
from splitserve.cluster import load_spec
from splitserve.cluster._model_rows import check_model, model_rows


def _spec(tmp_path: Path, model: Path, extra: str = "") -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(f'name = "m"\nmodel = "{model}"\n\n[[workers]]\nname = "w1"\nport = 50111\n{extra}')
    return path


def _row(tmp_path: Path, model: Path) -> dict[str, str]:
    rows = model_rows(load_spec(_spec(tmp_path, model)))
    assert [r.check for r in rows] == ["model"] and rows[0].node == "head"
    return rows[0].as_dict()


def test_a_whole_model_passes(tmp_path: Path) -> None:
    files = dense_llama(
        tmp_path / "m.gguf", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_vocab=300, qtype=Q.F32, n_shards=3
    )
    row = _row(tmp_path, files[0])
    assert row["status"] == "pass", row
    assert "3 shards" in row["message"] and "need no copy" in row["message"]


def test_a_missing_model_fails_with_the_path_and_a_fetch(tmp_path: Path) -> None:
    want = tmp_path / "models" / "Big-Q4_K_M.gguf"
    row = _row(tmp_path, want)
    assert row["status"] == "fail"
    assert str(want) in row["message"]
    assert str(want) in row["fix"] and "splitserve fetch" in row["fix"] and "cluster.toml" in row["fix"]


def test_a_shard_set_with_a_shard_missing_fails(tmp_path: Path) -> None:
    files = dense_llama(
        tmp_path / "m.gguf", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_vocab=300, qtype=Q.F32, n_shards=3
    )
    files[1].unlink()
    row = _row(tmp_path, files[0])
    assert row["status"] == "fail"
    assert files[1].name in row["message"] and "missing" in row["message"]
    assert "splitserve fetch" in row["fix"]


def test_a_shard_shorter_than_its_header_says_fails(tmp_path: Path) -> None:
    files = dense_llama(
        tmp_path / "m.gguf", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_vocab=300, qtype=Q.F32, n_shards=2
    )
    size = files[1].stat().st_size
    os.truncate(files[1], size - 4096)  # the header is whole; the tensor data is not
    row = _row(tmp_path, files[0])
    assert row["status"] == "fail"
    assert "truncated" in row["message"] and files[1].name in row["message"]
    assert f"ends at byte {size:,} but the file has {size - 4096:,}" in row["message"]


def test_a_file_that_is_not_a_gguf_fails(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_text("<html>404 Not Found</html>")
    row = _row(tmp_path, model)
    assert row["status"] == "fail" and "not a GGUF" in row["message"] and str(model) in row["message"]


def test_an_empty_file_fails(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"")
    row = _row(tmp_path, model)
    assert row["status"] == "fail" and "empty" in row["message"]


def test_a_fetch_folder_gives_the_exact_fetch_that_resumes(tmp_path: Path) -> None:
    root = tmp_path / "models"
    quant = root / "UD-Q4_K_XL"
    quant.mkdir(parents=True)
    files = dense_llama(
        quant / "Big-UD-Q4_K_XL.gguf",
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_head_kv=2,
        n_ff=128,
        n_vocab=300,
        qtype=Q.F32,
        n_shards=2,
    )
    manifest = {
        "version": 1,
        "files": {f"UD-Q4_K_XL/{files[0].name}": {"repo_id": "org/Big-GGUF", "commit": "c" * 40, "size": 1}},
    }
    (root / ".splitserve-fetch.json").write_text(json.dumps(manifest))
    files[1].rename(files[1].with_name(files[1].name + ".incomplete"))
    row = _row(tmp_path, files[0])
    assert row["status"] == "fail"
    assert "download is unfinished" in row["message"]
    assert row["fix"].startswith(
        f"splitserve fetch org/Big-GGUF --include 'UD-Q4_K_XL/Big-UD-Q4_K_XL-*-of-00002.gguf' --dir {root}"
    )


def test_a_missing_draft_model_fails_on_its_own_key(tmp_path: Path) -> None:
    files = dense_llama(
        tmp_path / "m.gguf", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_vocab=300, qtype=Q.F32
    )
    draft = tmp_path / "draft.gguf"
    spec = load_spec(
        _spec(tmp_path, files[0], f'\n[server]\nspeculation = ["draft-simple"]\ndraft_model = "{draft}"\n')
    )
    rows = [r.as_dict() for r in model_rows(spec)]
    assert [r["status"] for r in rows] == ["pass", "fail"]
    assert rows[1]["message"].startswith("server.draft_model: ") and str(draft) in rows[1]["message"]
    assert "server.draft_model" in rows[1]["fix"]


@pytest.mark.parametrize("name", ["x.gguf", "x-00001-of-00002.gguf"])
def test_a_missing_folder_says_so(tmp_path: Path, name: str) -> None:
    row = check_model(tmp_path / "nowhere" / name, "model", "spec.toml").as_dict()
    assert row["status"] == "fail" and "nowhere" in row["message"]
