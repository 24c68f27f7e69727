"""Pre-filling a worker's ggml-rpc-server -c cache: the engine's hash, file names, and which
tensors a worker holding a layer range gets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gguf_factory import T, write_model
from splitserve import UsageError
from splitserve.cluster._prefill import (
    FNV_OFFSET,
    HASH_THRESHOLD,
    cached_tensors,
    fnv1a64,
    fnv1a64_py,
    layers_of_devices,
    model_layers,
    native_unavailable_reason,
    parse_layers,
    prefill_cache,
    rpc_cache_dir,
)
from splitserve.model import read_gguf
from splitserve.plan import layer_devices

BIG = (1024, 2600)  # F32: 10,649,600 bytes, just over the 10 MiB threshold
SMALL = (1024, 2560)  # exactly 10 MiB: not cached (the engine takes size > threshold)


def _model(path: Path, n_layer: int = 3, tied: bool = False, n_shards: int = 1) -> list[Path]:
    ts = [T("token_embd.weight", BIG)]
    for i in range(n_layer):
        ts += [
            T(f"blk.{i}.attn_norm.weight", (1024,)),
            T(f"blk.{i}.ffn_up.weight", BIG),
            T(f"blk.{i}.ffn_down.weight", SMALL),
        ]
    ts.append(T("output_norm.weight", (1024,)))
    if not tied:
        ts.append(T("output.weight", BIG))
    kv = {
        "{arch}.block_count": n_layer,
        "{arch}.embedding_length": 1024,
        "{arch}.context_length": 512,
        "{arch}.feed_forward_length": 2600,
        "{arch}.attention.head_count": 8,
    }
    paths = write_model(path, "llama", kv, ts, n_vocab=300, n_shards=n_shards)
    # distinct, random tensor bytes (the factory leaves zeros: every tensor would hash alike)
    rng = np.random.default_rng(7)
    g = read_gguf(paths[0])
    for t in g.tensors:
        with open(g.shards[t.shard], "r+b") as f:
            f.seek(t.offset)
            f.write(rng.integers(0, 256, t.nbytes, dtype=np.uint8).tobytes())
    return paths


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "splitserve", "engine", "prefill-cache", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_fnv1a64_is_the_engines_hash() -> None:
    assert native_unavailable_reason() is None  # cc is on this machine and CI's
    # published FNV-1a 64 test vectors
    assert fnv1a64(b"") == FNV_OFFSET == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8
    data = np.random.default_rng(1).integers(0, 256, 200_003, dtype=np.uint8)
    assert fnv1a64(data) == fnv1a64_py(data.tobytes()) == fnv1a64(data, native=False)
    assert fnv1a64(data[5:1005]) == fnv1a64_py(data[5:1005].tobytes())  # a view at an offset


def test_prefill_writes_each_big_tensor_under_its_hash(tmp_path: Path) -> None:
    (model,) = _model(tmp_path / "m.gguf")
    cache = tmp_path / "cache"
    report = prefill_cache(model, cache, jobs=2)
    g = read_gguf(model)
    mm = np.memmap(model, dtype=np.uint8, mode="r")
    big = {t.name: t for t in g.tensors if t.nbytes > HASH_THRESHOLD and t.name != "token_embd.weight"}
    assert (
        set(report.files)
        == set(big)
        == {"blk.0.ffn_up.weight", "blk.1.ffn_up.weight", "blk.2.ffn_up.weight", "output.weight"}
    )
    for name, t in big.items():
        data = mm[t.offset : t.offset + t.nbytes]
        file = cache / report.files[name]
        assert file.name == f"{fnv1a64(data):016x}"
        assert file.read_bytes() == data.tobytes()
    assert sorted(p.name for p in cache.iterdir()) == sorted(report.files.values())  # no temp files left
    assert (report.tensors, report.written, report.present) == (4, 4, 0) and report.native
    again = prefill_cache(model, cache)
    assert (again.written, again.present, again.files) == (0, 4, report.files)


def test_layer_ranges_follow_the_engines_layer_assignment(tmp_path: Path) -> None:
    (model,) = _model(tmp_path / "m.gguf", n_layer=3)
    devs = layer_devices(3, [1, 1])  # layers 0..2 and the output (3)
    second = [i for i, d in enumerate(devs) if d == 1]
    entries, _ = cached_tensors(model, (second[0], second[-1]))
    names = {e.name for e in entries}
    assert "output.weight" in names and "blk.0.ffn_up.weight" not in names
    assert names == {f"blk.{i}.ffn_up.weight" for i in second if i < 3} | {"output.weight"}
    only_first, _ = cached_tensors(model, (0, 0))
    assert [e.name for e in only_first] == ["blk.0.ffn_up.weight"]


def test_a_tied_output_caches_token_embd_with_the_output_layer(tmp_path: Path) -> None:
    (model,) = _model(tmp_path / "m.gguf", n_layer=2, tied=True)
    entries, _ = cached_tensors(model, (2, 2))
    assert [e.name for e in entries] == ["token_embd.weight"]


def test_shards_are_read_from_each_file(tmp_path: Path) -> None:
    paths = _model(tmp_path / "m.gguf", n_layer=3, n_shards=2)
    report = prefill_cache(paths[1], tmp_path / "cache")  # any shard names the model
    entries, _ = cached_tensors(paths[0])
    assert {e.shard for e in entries} == set(paths) and report.tensors == 4
    for e in entries:
        mm = np.memmap(e.shard, dtype=np.uint8, mode="r")
        assert (tmp_path / "cache" / report.files[e.name]).read_bytes() == mm[e.offset : e.offset + e.nbytes].tobytes()


def test_cache_dir_is_where_ggml_rpc_server_looks() -> None:
    assert rpc_cache_dir({"LLAMA_CACHE": "/x", "HOME": "/h"}) == Path("/x/rpc")
    assert rpc_cache_dir({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == Path("/c/llama.cpp/rpc")
    assert rpc_cache_dir({"HOME": "/h"}) == Path("/h/.cache/llama.cpp/rpc")


def test_layer_arguments() -> None:
    assert parse_layers("4-9") == (4, 9) and parse_layers("7") == (7, 7)
    for bad in ("9-4", "a-b", "-3", ""):
        with pytest.raises(UsageError):
            parse_layers(bad)


def test_cli_prefills_and_rejects_bad_input_in_one_line(tmp_path: Path) -> None:
    (model,) = _model(tmp_path / "m.gguf", n_layer=2)
    run = _cli
    ok = run("--model", str(model), "--cache-dir", str(tmp_path / "c"), "--layers", "1-2", "--json")
    assert ok.returncode == 0, ok.stderr
    rep = json.loads(ok.stdout)
    assert rep["tensors"] == 2 and rep["written"] == 2 and rep["native"] is True
    assert len(list((tmp_path / "c").iterdir())) == 2
    for args, words in ((["--layers", "1-9"], "has 2 layers"), (["--layers", "x"], "--layers 'x'")):
        bad = run("--model", str(model), "--cache-dir", str(tmp_path / "c2"), *args)
        assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and words in bad.stderr, bad.stderr
    missing = run("--model", str(tmp_path / "none.gguf"))
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1 and "none.gguf" in missing.stderr


def test_a_split_and_device_give_the_engines_layer_range(tmp_path: Path) -> None:
    assert layers_of_devices(3, [1, 1], [1]) == (2, 3) and layers_of_devices(3, [1, 1], [0]) == (0, 1)
    assert layers_of_devices(3, [1, 1], [0, 1]) == (0, 3)
    with pytest.raises(UsageError, match="devices 0-1"):
        layers_of_devices(3, [1, 1], [2])
    (model,) = _model(tmp_path / "m.gguf", n_layer=3)
    assert model_layers(model) == 3

    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return _cli("--model", str(model), "--json", *a)

    by_split = run("--cache-dir", str(tmp_path / "a"), "--split", "1,1", "--device", "1")
    by_layers = run("--cache-dir", str(tmp_path / "b"), "--layers", "2-3")
    assert by_split.returncode == 0 and by_layers.returncode == 0, by_split.stderr + by_layers.stderr
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert json.loads(by_split.stdout)["tensors"] == 2  # blk.2.ffn_up and output.weight
    alone = run("--split", "1,1")
    assert alone.returncode != 0 and alone.stderr.count("\n") == 1 and "--device" in alone.stderr


def test_without_copy_file_range_the_files_are_written_from_the_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (model,) = _model(tmp_path / "m.gguf", n_layer=1)

    def refuse(*_: object) -> int:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr("os.copy_file_range", refuse)
    report = prefill_cache(model, tmp_path / "c")
    g = read_gguf(model)
    mm = np.memmap(model, dtype=np.uint8, mode="r")
    for t in g.tensors:
        if t.name in report.files:
            assert (tmp_path / "c" / report.files[t.name]).read_bytes() == mm[t.offset : t.offset + t.nbytes].tobytes()
    assert report.written == 2
