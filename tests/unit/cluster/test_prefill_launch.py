"""`up`'s cache pre-fill step: which workers get one and for which layers (the plan, pure), and
the node side run for real on this machine (a synthetic GGUF with tensors over 10 MiB): the cache
files are the engine's names (FNV-1a of the tensor bytes) holding those bytes; a missing or
different copy is skipped with one line; a fake node's answers drive the head side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gguf_factory import Q, dense_llama
from splitserve._node import LocalNode
from splitserve.cluster import Event, FakeNetwork, cached_tensors, parse_spec
from splitserve.cluster._prefill import fnv1a64
from splitserve.cluster._prefill_launch import prefill_steps, run_prefill, worker_device_indexes
from splitserve.cluster._prefill_node import NODE_ARGV_CODE, source
from splitserve.model import read_gguf


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 F32 layers whose FFN matrices are 12 MiB (over the threshold), data filled with a pattern."""
    folder = tmp_path_factory.mktemp("m")
    [path] = dense_llama(
        folder / "m.gguf", n_layer=4, n_embd=768, n_head=4, n_head_kv=4, n_ff=4096, n_vocab=512, qtype=Q.F32
    )
    with path.open("r+b") as f:  # distinct bytes at the start of each tensor, so every hash differs
        for i, t in enumerate(read_gguf(path).tensors):
            f.seek(t.offset)
            f.write(bytes((i * 31 + k) % 256 for k in range(min(t.nbytes, 4096))))
    return path


def spec_of(gguf: Path, tmp: Path, split: tuple[float, ...] = (1, 1), **w2: object) -> object:
    return parse_spec(
        {
            "name": "p",
            "model": str(gguf),
            "state_dir": str(tmp / "state"),
            "workers": [
                {"name": "w1", "port": 50101, "env": {"LLAMA_CACHE": str(tmp / "c1")}},
                {"name": "w2", "port": 50102, "env": {"LLAMA_CACHE": str(tmp / "c2")}, **w2},
            ],
            "server": {"tensor_split": list(split)},
        }
    )


def test_plan_gives_each_cached_worker_its_layers(model: Path, tmp_path: Path) -> None:
    spec = spec_of(model, tmp_path, model="/data/m.gguf")
    steps = prefill_steps(spec, [1.0, 1.0])  # type: ignore[arg-type]
    assert [s.node for s in steps] == ["w1", "w2"]
    assert steps[0].args["layers"] == [0, 2] and steps[1].args["layers"] == [3, 4]  # 4 = the output layer
    assert steps[0].args["model"] == str(model) and not steps[0].args["given"]
    assert steps[1].args["model"] == "/data/m.gguf" and steps[1].args["given"]
    assert "layers 3-4" in steps[1].text and "(the head's path; skipped if" in steps[0].text
    # a split that does not match the devices: every tensor over the threshold
    assert prefill_steps(spec, [1.0, 1.0, 1.0])[0].args["layers"] is None  # type: ignore[arg-type]
    assert prefill_steps(spec, None)[0].args["layers"] is None  # type: ignore[arg-type]
    # cache = false: no -c, nothing to fill
    assert [s.node for s in prefill_steps(spec_of(model, tmp_path, cache=False), [1.0, 1.0])] == ["w1"]  # type: ignore[arg-type]


def test_device_indexes_follow_llama_cpp_order(model: Path, tmp_path: Path) -> None:
    spec = spec_of(model, tmp_path, (1, 1, 2), devices=["CUDA0", "CUDA1"])
    assert worker_device_indexes(spec) == {"w1": [0], "w2": [1, 2]}  # type: ignore[arg-type]
    [s1, s2] = prefill_steps(spec, [1.0, 1.0, 2.0])  # type: ignore[arg-type]
    assert s1.args["layers"] == [0, 1] and s2.args["layers"] == [2, 4]


def test_node_side_writes_the_engines_file_names(model: Path, tmp_path: Path) -> None:
    spec = spec_of(model, tmp_path)
    [_, step2] = prefill_steps(spec, [1.0, 1.0])  # type: ignore[arg-type]
    events: list[Event] = []
    rep = run_prefill(spec, step2, LocalNode(), events.append)  # type: ignore[arg-type]
    entries, _ = cached_tensors(model, (3, 4))
    assert rep["status"] == "ok" and rep["tensors"] == len(entries) == rep["written"] == 3  # layer 3 FFN
    data = model.read_bytes()
    for e in entries:
        name = f"{fnv1a64(data[e.offset : e.offset + e.nbytes]):016x}"
        assert (tmp_path / "c2" / "rpc" / name).read_bytes() == data[e.offset : e.offset + e.nbytes]
    assert sorted(p.name for p in (tmp_path / "c2" / "rpc").iterdir()) == sorted(rep["files"])
    assert not (tmp_path / "c1").exists()  # only w2's step ran
    assert events[-1].kind == "prefill" and f"{len(entries)} written, 0 already there" in events[-1].message
    # a second run finds every file there and writes nothing
    again = run_prefill(spec, step2, LocalNode(), events.append)  # type: ignore[arg-type]
    assert again["written"] == 0 and again["present"] == len(entries)


def test_a_missing_or_different_copy_is_skipped_in_one_line(model: Path, tmp_path: Path) -> None:
    spec = spec_of(model, tmp_path, model=str(tmp_path / "nowhere.gguf"))
    [_, step] = prefill_steps(spec, [1.0, 1.0])  # type: ignore[arg-type]
    events: list[Event] = []
    rep = run_prefill(spec, step, LocalNode(), events.append)  # type: ignore[arg-type]
    assert rep["status"] == "skipped"
    assert [(e.kind, e.message) for e in events] == [
        ("prefill", f"cache pre-fill skipped: no local copy at {tmp_path / 'nowhere.gguf'}; the head sends its tensors")
    ]
    short = tmp_path / "short.gguf"
    short.write_bytes(model.read_bytes()[: 1 << 20])
    spec = spec_of(model, tmp_path, model=str(short))
    [_, step] = prefill_steps(spec, [1.0, 1.0])  # type: ignore[arg-type]
    events.clear()
    run_prefill(spec, step, LocalNode(), events.append)  # type: ignore[arg-type]
    assert "not the same file" in events[0].message and not (tmp_path / "c2").exists()


def test_remote_worker_runs_the_node_script_with_its_python(model: Path, tmp_path: Path) -> None:
    spec = spec_of(model, tmp_path, host="box2", bind="10.0.0.2", model="~/m.gguf")
    [_, step] = prefill_steps(spec, [1.0, 1.0])  # type: ignore[arg-type]
    assert step.args["python"] == "python3" and "on box2" in step.text
    net = FakeNetwork()
    node = net.node("box2")
    answer = {"status": "ok", "tensors": 3, "written": 3, "present": 0, "bytes": 3 << 24, "bytes_written": 3 << 24}
    answer |= {"hash_seconds": 0.1, "seconds": 0.1, "files": ["a", "b", "c"], "cache_dir": "~/c", "jobs": 8}
    node.answers.append(("splitserve_prefill", subprocess.CompletedProcess([], 0, json.dumps(answer).encode(), b"")))
    events: list[Event] = []
    rep = run_prefill(spec, step, node, events.append)  # type: ignore[arg-type]
    assert node.commands and all(c.startswith("python3 -c ") for c in node.commands)
    assert rep["status"] == "ok" and events[-1].node == "w2" and "8 threads" in events[-1].message
    # a node that cannot run it: a warning, and `up` goes on (the load works without the cache)
    node.answers[:] = [
        ("splitserve_prefill", subprocess.CompletedProcess([], 1, b"", b"Traceback\nOSError: disk full"))
    ]
    events.clear()
    assert run_prefill(spec, step, node, events.append)["status"] == "failed"  # type: ignore[arg-type]
    assert [e.kind for e in events] == ["warning"] and "disk full" in events[0].message


def test_node_script_runs_in_a_bare_python(tmp_path: Path, model: Path) -> None:
    """The node side needs no splitserve and no numpy: it runs under ``python -I -S`` (no site packages)."""
    [e] = [x for x in cached_tensors(model, (3, 4))[0] if x.name == "blk.3.ffn_up.weight"]
    job = {"shards": [str(model)], "sizes": [model.stat().st_size], "env": {}, "jobs": 2}
    job |= {"cache_dir": str(tmp_path / "c"), "entries": [[0, e.offset, e.nbytes]]}
    res = subprocess.run(
        [sys.executable, "-I", "-S", "-c", NODE_ARGV_CODE],
        input=json.dumps({"code": source(), "job": job}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    with model.open("rb") as f:
        f.seek(e.offset)
        data = f.read(e.nbytes)
    assert rep["status"] == "ok" and rep["files"] == [f"{fnv1a64(data):016x}"] and rep["jobs"] == 2
