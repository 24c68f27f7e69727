"""The [vllm] / [sglang] tables: good specs load, each mistake is one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve import SpecError
from splitserve.cluster import load_spec, parse_spec
from splitserve.cluster._spec_engines import DEFAULT_OBJECT_STORE_BYTES, SglangSpec, VllmSpec, parse_bytes

TWO_NODES = """
backend = "vllm"

[[workers]]
name = "spark2"
host = "spark2"
bind = "10.20.20.2"
devices = ["CUDA0"]

[head]
devices = ["CUDA0"]

[vllm]
model = "Qwen/Qwen3-0.6B"
head_bind = "10.20.20.1"
tensor_parallel_size = 2
"""


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return load_spec(path)


def test_two_node_vllm_spec_loads_with_defaults(tmp_path: Path) -> None:
    spec = load(tmp_path, TWO_NODES)
    assert spec.backend == "vllm"  # type: ignore[attr-defined]
    v = spec.vllm  # type: ignore[attr-defined]
    assert isinstance(v, VllmSpec)
    assert (v.model, v.tensor_parallel_size, v.pipeline_parallel_size, v.launcher) == (
        "Qwen/Qwen3-0.6B",
        2,
        1,
        "native",
    )
    assert (v.host, v.port, v.master_port, v.fixes, v.parsers) == ("127.0.0.1", 8080, 29501, True, "gateway")
    assert v.ray.object_store_memory is None and v.ray.dashboard is False
    assert spec.sglang is None  # type: ignore[attr-defined]


def test_llama_cpp_specs_are_unchanged() -> None:
    spec = parse_spec({"model": "/m.gguf", "workers": [{"name": "w1"}]})
    assert spec.backend == "llama.cpp" and spec.vllm is None and spec.sglang is None


def test_single_node_vllm_needs_no_workers() -> None:
    spec = parse_spec({"backend": "vllm", "vllm": {"model": "/models/qwen"}})
    assert spec.workers == [] and spec.vllm is not None


def test_sglang_table_and_object_store_sizes() -> None:
    spec = parse_spec({"backend": "sglang", "sglang": {"model": "m", "dist_init_port": 25000}})
    assert isinstance(spec.sglang, SglangSpec) and spec.sglang.dist_init_port == 25000
    spec = parse_spec(
        {"backend": "vllm", "vllm": {"model": "m", "launcher": "ray", "ray": {"object_store_memory": "2GiB"}}}
    )
    assert spec.vllm is not None and spec.vllm.ray.object_store_memory == 2 * 1024**3
    assert parse_bytes("512MiB") == 512 * 1024**2
    assert parse_bytes("2GB") == 2_000_000_000
    assert parse_bytes(1073741824) == DEFAULT_OBJECT_STORE_BYTES


def _err(data: dict[str, object]) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(data, Path("/x/cluster.toml"))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("/x/cluster.toml: ")
    return message


V = {"model": "Qwen/Qwen3-0.6B"}
W2 = [{"name": "w1", "host": "box2", "bind": "10.0.0.2"}]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"model": "m.gguf", "workers": [{"name": "w1"}], "vllm": V}, 'vllm: a [vllm] table needs backend = "vllm"'),
        ({"backend": "vllm", "sglang": {"model": "m"}, "vllm": V}, 'sglang: a [sglang] table needs backend = "sglang"'),
        ({"backend": "vllm"}, 'vllm: required with backend = "vllm"'),
        ({"backend": "vllm", "model": "m.gguf", "vllm": V}, "model: the GGUF of the llama.cpp backend"),
        ({"backend": "vllm", "vllm": V, "server": {"ctx_size": 4}}, "server: llama-server's options"),
        ({"backend": "tgi", "vllm": V}, "backend: 'tgi' is not one of: llama.cpp, vllm, sglang"),
        (
            {"backend": "vllm", "vllm": {**V, "tp": 2}},
            "vllm.tp: unknown key in [vllm]; allowed: api_key, data_parallel_size",
        ),
        ({"backend": "vllm", "vllm": {**V, "ray": {"prot": 1}, "launcher": "ray"}}, "vllm.ray.prot: unknown key"),
        ({"backend": "vllm", "vllm": {"tensor_parallel_size": 2}}, "vllm.model: required key is missing"),
        ({"backend": "vllm", "vllm": {**V, "tensor_parallel_size": 0}}, "vllm.tensor_parallel_size"),
        ({"backend": "vllm", "vllm": {**V, "launcher": "mpi"}}, "vllm.launcher: Input should be 'native' or 'ray'"),
        ({"backend": "vllm", "vllm": {**V, "ray_probe": True}}, 'ray_probe = true needs launcher = "ray"'),
        ({"backend": "vllm", "vllm": {**V, "ray": {"port": 7000}}}, 'a [vllm.ray] table needs launcher = "ray"'),
        (
            {"backend": "vllm", "vllm": {**V, "tool_call_parser": "hermes"}},
            'tool_call_parser is for parsers = "engine"',
        ),
        ({"backend": "vllm", "vllm": {**V, "parsers": "engine"}}, 'parsers = "engine" needs tool_call_parser'),
        ({"backend": "vllm", "vllm": {**V, "head_bind": "box1"}}, "vllm.head_bind: must be an IP address"),
        ({"backend": "vllm", "vllm": {**V, "nic": "not an interface"}}, "is not an interface name"),
        ({"backend": "vllm", "vllm": {**V, "nic": {"w9": "eth0"}}}, "vllm.nic: no node named 'w9'; nodes: head"),
        ({"backend": "vllm", "vllm": {**V, "gpu_memory_utilization": 1.5}}, "vllm.gpu_memory_utilization"),
        ({"backend": "vllm", "vllm": {**V, "dtype": "fp8"}}, "vllm.dtype"),
        (
            {"backend": "vllm", "vllm": {**V, "launcher": "ray", "ray": {"object_store_memory": "1MiB"}}},
            "below Ray's minimum object store",
        ),
        (
            {"backend": "vllm", "vllm": {**V, "launcher": "ray", "ray": {"object_store_memory": "lots"}}},
            "'lots' is not a size",
        ),
        (
            {"backend": "vllm", "vllm": V, "workers": [{"name": "w1", "host": "box2"}]},
            "workers[w1].bind = '127.0.0.1' is loopback",
        ),
        (
            {"backend": "vllm", "vllm": {**V, "tensor_parallel_size": 3}, "workers": W2},
            "does not split evenly over 2 nodes",
        ),
        (
            {"backend": "vllm", "vllm": {**V, "data_parallel_size": 2}, "workers": W2},
            "vllm.data_parallel_size = 2 over 2 nodes is not supported",
        ),
        (
            {"backend": "vllm", "vllm": {**V, "tensor_parallel_size": 4}, "workers": [{**W2[0], "devices": ["CUDA0"]}]},
            "needs 2 GPU(s) on each of the 2 nodes; workers[w1].devices lists 1",
        ),
        (
            {
                "backend": "vllm",
                "vllm": {**V, "tensor_parallel_size": 4, "launcher": "ray"},
                "head": {"devices": ["CUDA0"]},
                "workers": [{**W2[0], "devices": ["CUDA0", "CUDA1"]}],
            },
            "needs 4 GPUs; the nodes' devices list 3",
        ),
        ({"backend": "vllm", "vllm": {**V, "master_port": 8080}}, "vllm.master_port = 8080 is also vllm.port"),
        ({"backend": "vllm", "vllm": {**V, "port": 8000}}, "vllm.port = 8000 is the gateway's default port"),
        ({"backend": "vllm", "vllm": V, "gateway": {"port": 8080}}, "gateway.port = 8080 is also vllm.port"),
        (
            {"backend": "sglang", "sglang": {**V, "dist_init_port": 8080}},
            "sglang.dist_init_port = 8080 is also sglang.port",
        ),
        (
            {"backend": "vllm", "vllm": {**V, "host": "0.0.0.0"}},
            "vllm.host = '0.0.0.0' is beyond loopback and the engine has no key",
        ),
        (
            {"backend": "sglang", "sglang": {**V, "head_bind": "127.0.0.1"}, "workers": W2},
            "sglang.head_bind = '127.0.0.1' is loopback",
        ),
    ],
)
def test_mistakes_name_file_and_key(data: dict[str, object], expected: str) -> None:
    assert expected in _err(data)


def test_llama_cpp_still_needs_workers() -> None:
    assert "workers: required key is missing" in _err({"model": "m.gguf"})
    assert "workers: at least one [[workers]] table" in _err({"model": "m.gguf", "workers": []})


def test_beyond_loopback_with_a_key_is_allowed() -> None:
    spec = parse_spec({"backend": "vllm", "vllm": {**V, "host": "0.0.0.0", "api_key": "k"}})
    assert spec.vllm is not None and spec.vllm.host == "0.0.0.0"


def test_even_split_and_enough_devices_pass() -> None:
    spec = parse_spec(
        {
            "backend": "sglang",
            "sglang": {**V, "tensor_parallel_size": 4},
            "head": {"devices": ["CUDA0", "CUDA1"]},
            "workers": [{**W2[0], "devices": ["CUDA0", "CUDA1"]}],
        }
    )
    assert spec.sglang is not None and spec.sglang.world_size == 4
