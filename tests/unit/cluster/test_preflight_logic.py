"""Preflight's pure parts: the facts script's output, weight shares, spec keys, backoff, units."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from splitserve import SpecError
from splitserve.cluster import parse_spec, systemd_units
from splitserve.cluster._preflight import FACTS_SCRIPT, model_bytes, parse_facts, weight_shares
from splitserve.cluster._supervise import Backoff
from splitserve.engine import Engine


def spec(**kw: object):  # type: ignore[no-untyped-def]
    data: dict[str, object] = {
        "name": "c",
        "model": "/m.gguf",
        "workers": [
            {"name": "w1", "host": "box2", "bind": "10.0.0.2", "devices": ["CUDA0", "CUDA1"]},
            {"name": "w2", "bind": "127.0.0.1"},
        ],
    }
    data.update(kw)
    return parse_spec(data)


def test_parse_facts() -> None:
    text = (
        "uid 1000\nmemavail 2048\noom earlyoom\ncachedir /home/u/.cache\ndiskfree 10\n"
        "addr 127.0.0.1/8\naddr 10.20.20.2/24\naddr fe80::1/64\nsudo yes\n"
    )
    f = parse_facts("box2", text)
    assert (f.uid, f.mem_available, f.disk_free, f.sudo) == (1000, 2048 * 1024, 10 * 1024, True)
    assert f.oom_killers == ["earlyoom"] and f.addresses == ["127.0.0.1", "10.20.20.2", "fe80::1"]
    assert parse_facts("b", "uid 0\naddr ?\n").addresses is None


def test_facts_script_runs_here() -> None:
    f = parse_facts("local", subprocess.run(["sh", "-c", FACTS_SCRIPT], capture_output=True, text=True).stdout)
    assert f.uid is not None and f.mem_available and f.disk_free and f.cache_dir
    assert f.addresses is None or "127.0.0.1" in f.addresses


def test_weight_shares_follow_tensor_split_per_device() -> None:
    assert weight_shares(spec()) == {"w1": pytest.approx(2 / 3), "w2": pytest.approx(1 / 3)}
    s = spec(server={"tensor_split": [1, 1, 2]})
    assert weight_shares(s) == {"w1": pytest.approx(0.5), "w2": pytest.approx(0.5)}


def test_model_bytes_sums_every_shard(tmp_path: Path) -> None:
    for i, size in ((1, 10), (2, 20), (3, 5)):
        (tmp_path / f"M-{i:05d}-of-00003.gguf").write_bytes(b"x" * size)
    assert model_bytes(tmp_path / "M-00001-of-00003.gguf") == 35
    (tmp_path / "one.gguf").write_bytes(b"y" * 7)
    assert model_bytes(tmp_path / "one.gguf") == 7
    assert model_bytes(tmp_path / "missing.gguf") == 0


def test_spec_ssh_supervise_keys_and_remote_head_refused(tmp_path: Path) -> None:
    s = spec(
        ssh={"config": "ssh_cfg", "connect_timeout": 3},
        supervise={"backoff_initial": 0.5, "backoff_max": 8},
        drop_caches=True,
    )
    assert s.workers[0].remote and not s.workers[1].remote
    assert s.supervise.backoff_max == 8 and s.drop_caches
    with pytest.raises(SpecError, match=r"head\.host = 'box1': the head runs where splitserve runs"):
        spec(head={"host": "box1"})
    with pytest.raises(SpecError, match=r"workers\[w1\]\.host"):
        parse_spec({"model": "/m.gguf", "workers": [{"name": "w1", "host": "box 2; rm -rf /"}]})
    with pytest.raises(SpecError, match=r"supervise\.backoff_max"):
        spec(supervise={"backoff_max": 0})


def test_backoff_doubles_up_to_the_cap() -> None:
    b = Backoff(1.0, 10.0)
    assert [b.delay(i) for i in range(6)] == [1, 2, 4, 8, 10, 10]
    assert Backoff(0.5, 60).delay(0) == 0.5


def test_systemd_units(tmp_path: Path) -> None:
    s = spec()
    eng = Engine(
        root=Path("/eng"),
        bin_dir=Path("/eng/bin"),
        provenance={"key": "k", "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server"}},
    )
    from splitserve.cluster._distribute import node_engine

    units = systemd_units(
        s,
        {"head": eng, "w1": node_engine(s.workers[0], eng), "w2": eng},
        tmp_path / "c.toml",
        command=["/usr/bin/splitserve"],
    )
    head = units["splitserve-c.service"]
    assert f"ExecStart=/usr/bin/splitserve run -c {tmp_path / 'c.toml'}" in head
    assert "Restart=on-failure" in head and "WantedBy=multi-user.target" in head
    w1 = units["splitserve-c-w1.service"]
    assert "ExecStart=%h/.cache/splitserve/engines/k/ggml-rpc-server -H 10.0.0.2 -p 50052" in w1
    assert "Environment=LD_LIBRARY_PATH=%h/.cache/splitserve/engines/k" in w1 and "Install on box2" in w1
    assert "ExecStart=/eng/bin/ggml-rpc-server -H 127.0.0.1" in units["splitserve-c-w2.service"]
