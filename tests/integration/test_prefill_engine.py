"""A worker whose -c cache was pre-filled from its own copy of the model: the head's first load
finds every big tensor there (the engine's cache-hit path: no tensor bytes are sent, the worker
writes nothing), and the model answers the same tokens as after a cold load."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from gguf_factory import Q, dense_llama
from helpers import died_message, free_ports, greedy
from splitserve.cluster import (
    Event,
    cached_tensors,
    cluster_state_dir,
    down,
    parse_spec,
    prefill_cache,
    read_state,
    up,
)
from splitserve.engine import Engine
from splitserve.model import read_gguf
from splitserve.plan import layer_devices

pytestmark = [pytest.mark.engine]

N_LAYER = 4
THRESHOLD = 10 * 1024 * 1024
_HASH_HIT = re.compile(r"\[set_tensor_hash\] .*size: (\d+), hash: ([0-9a-f]+)")
_SET = re.compile(r"\[set_tensor\] .*size: (\d+)")


def random_model(path: Path) -> Path:
    """A Llama of 4 F32 layers (~270 MiB) whose FFN and output matrices (16 MiB) exceed the
    cache threshold, with small random weights (norms at 1), so its greedy tokens depend on them."""
    [model] = dense_llama(
        path,
        n_layer=N_LAYER,
        n_embd=1024,
        n_head=8,
        n_head_kv=4,
        n_ff=4096,
        n_vocab=4096,
        qtype=Q.F32,
        n_ctx_train=1024,
    )
    rng = np.random.default_rng(3)
    g = read_gguf(model)
    with open(model, "r+b") as f:
        for t in g.tensors:
            n = t.nbytes // 4
            vals = np.ones(n, np.float32) if "norm" in t.name else (rng.standard_normal(n) * 0.05).astype(np.float32)
            f.seek(t.offset)
            f.write(vals.tobytes())
    return model


@dataclass
class Run:
    tokens: str
    logs: list[str]
    """Each worker's log."""


@contextmanager
def _proc(argv: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def serve_once(engine: Engine, model: Path, caches: list[Path], folder: Path) -> Run:
    """Two loopback workers with -c (cache ``caches[i]``) and a head splitting the model 1:1;
    the greedy answer and the workers' logs (GGML_RPC_DEBUG: cache hits and sets are logged)."""
    folder.mkdir(parents=True)
    base = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ports = free_ports(3)
    logs = [folder / f"w{i}.log" for i in range(2)]
    with (
        _proc(
            [str(engine.rpc_server), "-H", "127.0.0.1", "-p", str(ports[0]), "-c"],
            logs[0],
            base | {"LLAMA_CACHE": str(caches[0].parent), "GGML_RPC_DEBUG": "1"},
        ) as w0,
        _proc(
            [str(engine.rpc_server), "-H", "127.0.0.1", "-p", str(ports[1]), "-c"],
            logs[1],
            base | {"LLAMA_CACHE": str(caches[1].parent), "GGML_RPC_DEBUG": "1"},
        ) as w1,
    ):
        for port, w, log in zip(ports[:2], (w0, w1), logs):
            deadline = time.monotonic() + 30
            while True:
                assert w.poll() is None, died_message(f"ggml-rpc-server on {port}", w.returncode, log)
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                assert time.monotonic() < deadline, f"worker on {port} did not listen; {log}"
                time.sleep(0.05)
        head_log = folder / "head.log"
        argv = [
            str(engine.server),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(ports[2]),
            "--rpc",
            f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}",
            "-ngl",
            "999",
            "--tensor-split",
            "1,1",
            "-c",
            "512",
            "-np",
            "1",
        ]
        with _proc(argv, head_log, base) as head:
            url = f"http://127.0.0.1:{ports[2]}"
            deadline = time.monotonic() + 300
            while True:
                assert head.poll() is None, died_message("llama-server", head.returncode, head_log, 30)
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"llama-server did not load in 300 s; {head_log}"
                time.sleep(0.2)
            tokens = greedy(url, "The quick brown fox", n_predict=24)
    return Run(tokens, [p.read_text(errors="replace") for p in logs])


@dataclass
class Cold:
    model: Path
    run: Run
    caches: list[Path]


@pytest.fixture(scope="module")
def cold(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Cold:
    """The model and its cold load (empty caches: the engine sends the big tensors and each
    worker saves them), shared by the tests of this module."""
    tmp = tmp_path_factory.mktemp("prefill")
    model = random_model(tmp / "rand.gguf")
    caches = [tmp / f"cold{i}" / "rpc" for i in range(2)]
    return Cold(model, serve_once(engine, model, caches, tmp / "cold"), caches)


def test_prefilled_worker_gets_no_tensor_bytes_and_the_answer_is_the_same(
    engine: Engine, cold: Cold, tmp_path: Path
) -> None:
    model = cold.model
    devs = layer_devices(N_LAYER, [1, 1])
    second = [il for il, d in enumerate(devs) if d == 1]  # worker 1's layers (the output layer is N_LAYER)
    layers = (second[0], second[-1])
    entries, _ = cached_tensors(model, layers)
    assert len(entries) >= 4  # 3 FFN matrices per layer and output.weight: the test has something to hit

    cold_caches = cold.caches
    assert cold.run.tokens.strip()

    # pre-filled: worker 1's cache filled from the local file, worker 0's left empty
    caches = [tmp_path / f"pre{i}" / "rpc" for i in range(2)]
    report = prefill_cache(model, caches[1], layers)
    assert report.tensors == len(entries) and report.written == len(entries)
    filled = sorted(p.name for p in caches[1].iterdir())
    # the names the engine itself wrote on the cold load are the ones the pre-fill wrote
    assert filled == sorted(p.name for p in cold_caches[1].iterdir())

    warm = serve_once(engine, model, caches, tmp_path / "prefilled")
    log0, log1 = warm.logs
    # worker 1: every big tensor was a cache hit; nothing over the threshold was sent or saved
    hits = {int(h, 16) for _, h in _HASH_HIT.findall(log1)}
    assert hits == {int(name, 16) for name in filled}
    assert "saved to" not in log1
    assert [int(n) for n in _SET.findall(log1) if int(n) > THRESHOLD] == []
    assert sorted(p.name for p in caches[1].iterdir()) == filled  # the worker wrote nothing new
    # worker 0 (not pre-filled) took the cold path in the same run: the test can tell the two apart
    assert log0.count("saved to") == len(cached_tensors(model, (0, layers[0] - 1))[0]) > 0
    assert not _HASH_HIT.findall(log0)
    # the same model: the same greedy tokens
    assert warm.tokens == cold.run.tokens


def test_up_prefills_its_workers_and_the_load_sends_no_tensor_bytes(  # type: ignore[no-untyped-def]
    engine: Engine, cold: Cold, state_home, tmp_path: Path
) -> None:
    """`up` itself: worker w1 fills its cache from the head's path (the same machine), w2 from its
    own copy (``model``); the load is all cache hits and answers what a cold load answers."""

    model = cold.model
    copy = tmp_path / "w2disk" / "rand.gguf"
    copy.parent.mkdir()
    copy.write_bytes(model.read_bytes())

    p1, p2, head = free_ports(3)
    caches = [tmp_path / f"up{i}" for i in range(2)]
    spec = parse_spec(
        {
            "name": "prefill",
            "model": str(model),
            "workers": [
                {"name": "w1", "port": p1, "env": {"LLAMA_CACHE": str(caches[0]), "GGML_RPC_DEBUG": "1"}},
                {
                    "name": "w2",
                    "port": p2,
                    "model": str(copy),
                    "env": {"LLAMA_CACHE": str(caches[1]), "GGML_RPC_DEBUG": "1"},
                },
            ],
            "server": {"port": head, "ctx_size": 512, "tensor_split": [1, 1]},
            "gateway": {"enabled": False},
        }
    )
    events: list[Event] = []
    state = up(spec, engine=engine, preflight=False, on_event=events.append)
    try:
        tokens = greedy(state.engine_url, "The quick brown fox", n_predict=24)
        saved = read_state(cluster_state_dir(spec))
        assert saved is not None
        logs = {p.node: Path(p.log).read_text(errors="replace") for p in saved.processes if p.role == "rpc"}
    finally:
        down(spec)
    done = [e for e in events if e.kind == "prefill" and "written" in e.message]
    assert [e.node for e in done] == ["w1", "w2"]
    for i, name in enumerate(("w1", "w2")):
        filled = sorted(p.name for p in (caches[i] / "rpc").iterdir())
        assert filled  # the worker has big tensors, all pre-filled
        hits = {int(h, 16) for _, h in _HASH_HIT.findall(logs[name])}
        assert hits == {int(f, 16) for f in filled}  # every big tensor was a cache hit
        assert "saved to" not in logs[name]
        assert [int(n) for n in _SET.findall(logs[name]) if int(n) > THRESHOLD] == []  # no tensor bytes sent
    assert tokens == cold.run.tokens
