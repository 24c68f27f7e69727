"""`up` asks the planner first: a spec that will not fit is refused with the numbers,
before any process starts; a spec with memory sizes and no split gets --tensor-split."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_factory import dense_llama
from splitserve import ClusterError
from splitserve.cluster import launch_plan, parse_spec, up
from splitserve.cluster._planning import split_for_up
from splitserve.engine import Engine


def spec_for(model: Path, tmp_path: Path, mem: list[float], split: list[float] | None = None):  # type: ignore[no-untyped-def]
    server: dict[str, object] = {"ctx_size": 2048}
    if split:
        server["tensor_split"] = split
    return parse_spec(
        {
            "name": "fit",
            "model": str(model),
            "state_dir": str(tmp_path / "st"),
            "workers": [
                {"name": "w1", "port": 50100, "memory_gib": mem[0]},
                {"name": "w2", "port": 50101, "memory_gib": mem[1]},
            ],
            "server": server,
        }
    )


def test_spec_that_does_not_fit_is_refused_before_anything_starts(tmp_path: Path) -> None:
    (model,) = dense_llama(tmp_path / "m.gguf")
    engine = Engine(
        root=tmp_path / "e",
        bin_dir=tmp_path / "e" / "bin",
        provenance={"key": "e", "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server"}},
    )
    spec = spec_for(model, tmp_path, [0.001, 0.001])
    with pytest.raises(ClusterError) as info:
        up(spec, engine=engine, preflight=False)
    assert "w1" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "st" / "state.json").exists()


def test_split_filled_in_from_memory_sizes_unless_the_spec_has_one(tmp_path: Path) -> None:
    (model,) = dense_llama(tmp_path / "m.gguf")
    split = split_for_up(spec_for(model, tmp_path, [8.0, 24.0]))
    assert split is not None and len(split) == 2 and split[0] < split[1]
    assert split_for_up(spec_for(model, tmp_path, [8.0, 24.0], split=[1, 1])) is None
    engine = Engine(
        root=tmp_path / "e",
        bin_dir=tmp_path / "e" / "bin",
        provenance={"key": "e", "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server"}},
    )
    spec = spec_for(model, tmp_path, [8.0, 24.0])
    argv = launch_plan(spec, {"head": engine, "w1": engine, "w2": engine}, split).head.argv
    assert argv[argv.index("--tensor-split") + 1] == ",".join(f"{x:g}" for x in split)
