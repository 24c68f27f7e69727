"""``plan`` and ``inspect`` take what a llama.cpp user types: its short flags, sizes with units,
device names as vendors write them, a model folder; and the spec's settings can be overridden."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import splitserve.cli._inspect  # noqa: F401  (registers inspect and plan)
from gguf_factory import dense_llama
from splitserve._errors import UsageError
from splitserve.cli._app import app
from splitserve.plan import GIB, parse_node
from splitserve.plan._devices import BANDWIDTH_GBPS, device_key, parse_gib


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def one_line_error(res: tuple[int, str, str], needle: str) -> None:
    code, _out, err = res
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("splitserve: error:"), err
    assert needle in lines[0] and "Traceback" not in err


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    (tmp_path / "m").mkdir()
    [p] = dense_llama(tmp_path / "m" / "d.gguf", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024)
    return p


def test_llama_cpp_short_flags_mean_the_long_ones(model: Path) -> None:
    long = run(
        "plan",
        str(model),
        "--node",
        "a=2",
        "--node",
        "b=2",
        "--ctx",
        "2048",
        "--parallel",
        "2",
        "--cache-type-k",
        "q8_0",
        "--cache-type-v",
        "q4_0",
        "--ubatch",
        "256",
        "--flash-attn",
        "on",
        "--tensor-split",
        "1,3",
        "--kv-unified",
        "--json",
    )
    short = run(
        "plan",
        str(model),
        "--node",
        "a=2",
        "--node",
        "b=2",
        "--ctx-size",
        "2048",
        "-np",
        "2",
        "-ctk",
        "q8_0",
        "-ctv",
        "q4_0",
        "-ub",
        "256",
        "-fa",
        "on",
        "-ts",
        "1,3",
        "-kvu",
        "--json",
    )
    assert long[0] == 0 and short[0] == 0, long[2] + short[2]
    a, b = json.loads(long[1]), json.loads(short[1])
    assert a == b
    assert a["settings"] == {
        "ctx": 2048,
        "parallel": 2,
        "kv_unified": True,
        "cache_type_k": "q8_0",
        "cache_type_v": "q4_0",
        "ubatch": 256,
        "flash_attn": True,
        "margin_bytes": GIB,
    }
    assert a["tensor_split"] == [1.0, 3.0]


def test_max_ctx_is_tokens_per_cache_type(model: Path) -> None:
    code, out, err = run("plan", str(model), "--node", "a=2", "--ctx", "2048", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert set(d["max_ctx"]) == {"f16", "q8_0", "q4_0"} and all(isinstance(v, int) for v in d["max_ctx"].values())
    # flash attention off: a quantized V cache cannot be used, as llama.cpp refuses it
    code, out, err = run("plan", str(model), "--node", "a=2", "--ctx", "2048", "-fa", "off", "--json")
    d = json.loads(out)
    assert d["max_ctx"]["q8_0"] is None and d["max_ctx"]["f16"] > 0
    assert "flash attention" in d["max_ctx_detail"]["q8_0"]["reason"]


def test_bad_numbers_are_one_line_errors(model: Path) -> None:
    one_line_error(run("plan", str(model), "--node", "a=2", "--ctx", "-5"), "--ctx -5")
    one_line_error(run("plan", str(model), "--node", "a=2", "--margin", "-1"), "--margin")
    one_line_error(run("plan", str(model), "--node", "a=2x"), "'2x' is not a number of GiB")
    one_line_error(run("plan", str(model), "--node", "a=2,device=tpu9"), "unknown device 'tpu9'")
    one_line_error(run("plan", str(model), "--node", "a=2,bw=-3"), "bw must be a positive")
    one_line_error(run("plan", str(model), "--node", "a=2", "--host-node", "zz"), "--host-node 'zz'")
    one_line_error(run("plan", str(model), "--node", "a=2", "-ctv", "q7_9"), "--cache-type-v 'q7_9'")
    one_line_error(run("plan", str(model), "--node", "a=2", "--node", "a=3"), "--node a given more than once")


def test_cache_types_are_spelled_as_llama_server_wants(model: Path) -> None:
    code, out, err = run("plan", str(model), "--node", "a=2", "-ctk", "Q8_0", "-ctv", "Q4_0", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert (d["settings"]["cache_type_k"], d["settings"]["cache_type_v"]) == ("q8_0", "q4_0")
    assert "q8_0" in d["llama_server_args"] and "Q8_0" not in d["llama_server_args"]


def test_sizes_with_units_and_vendor_device_names() -> None:
    assert parse_gib("121") == 121 and parse_gib("121GiB") == 121 and parse_gib("121g") == 121
    assert parse_gib("512MiB") == 0.5 and parse_gib("1TiB") == 1024
    assert parse_gib("128GB") == pytest.approx(128e9 / GIB)
    with pytest.raises(ValueError):
        parse_gib("12 apples")
    for spelled, key in (
        ("RTX 5090", "rtx-5090"),
        ("rtx5090", "rtx-5090"),
        ("H100-SXM", "h100"),
        ("H200", "h200"),
        ("spark", "gb10"),
        ("GB10", "gb10"),
        ("rtx_4090", "rtx-4090"),
    ):
        assert device_key(spelled) == key, spelled
    n = parse_node("spark1=121GiB,device=DGX Spark")
    assert n.memory_bytes == 121 * GIB and n.bandwidth == BANDWIDTH_GBPS["gb10"]
    assert parse_node("x=2,bw=900GB/s").bandwidth == 900
    with pytest.raises(UsageError):
        parse_node("x=0")


def test_spec_settings_yield_to_command_line_flags(model: Path, tmp_path: Path) -> None:
    spec = tmp_path / "c.toml"
    spec.write_text(
        f'model = "{model}"\n[[workers]]\nname = "w1"\nmemory_gib = 2\n[[workers]]\nname = "w2"\n'
        'port = 50053\nmemory_gib = 2\n[server]\nctx_size = 4096\ncache_type_k = "q8_0"\n'
        'cache_type_v = "q8_0"\n'
    )
    code, out, err = run("plan", "-c", str(spec), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["settings"]["ctx"] == 4096 and d["settings"]["cache_type_k"] == "q8_0"
    assert d["nodes"][0]["host_bytes"] > 0 and d["nodes"][1]["host_bytes"] == 0
    code, out, err = run(
        "plan", "-c", str(spec), "--ctx", "2048", "-ctk", "f16", "--margin", "0.5", "--host-node", "w2", "--json"
    )
    assert code == 0, err
    d = json.loads(out)
    assert d["settings"]["ctx"] == 2048 and d["settings"]["cache_type_k"] == "f16"
    assert d["settings"]["cache_type_v"] == "q8_0"  # not given: the spec's
    assert d["settings"]["margin_bytes"] == GIB // 2
    assert d["nodes"][0]["host_bytes"] == 0 and d["nodes"][1]["host_bytes"] > 0


def test_a_folder_stands_for_its_one_model(tmp_path: Path) -> None:
    folder = tmp_path / "dl"
    (folder / "Q8_0").mkdir(parents=True)
    shards = dense_llama(
        folder / "Q8_0" / "Tiny-Q8_0.gguf",
        n_layer=4,
        n_embd=256,
        n_head=4,
        n_head_kv=2,
        n_ff=512,
        n_vocab=1024,
        n_shards=3,
    )
    code, out, err = run("inspect", str(folder), "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["path"] == str(shards[0]) and len(info["shards"]) == 3
    code, out, err = run("plan", str(folder), "--node", "a=2", "--json")
    assert code == 0 and json.loads(out)["model"]["n_layer"] == 4, err
    dense_llama(folder / "Other.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    one_line_error(run("inspect", str(folder)), "2 models in this folder")
    (tmp_path / "empty").mkdir()
    one_line_error(run("inspect", str(tmp_path / "empty")), "no .gguf file")


def test_a_missing_shard_names_the_file_given(tmp_path: Path) -> None:
    shards = dense_llama(
        tmp_path / "s.gguf", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024, n_shards=3
    )
    shards[2].unlink()
    one_line_error(run("inspect", str(shards[1])), f"{shards[1]}: shard(s) {shards[2].name} of 3 missing")


def test_piped_output_keeps_long_paths_whole(tmp_path: Path) -> None:
    deep = tmp_path / ("a-rather-long-folder-name-" * 4) / "model-with-a-long-name-Q8_0.gguf"
    deep.parent.mkdir()
    [p] = dense_llama(deep, n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    code, out, err = run("inspect", str(p))
    assert code == 0, err
    assert out.splitlines()[0] == str(p)
    code, out, err = run("plan", str(p), "--node", "first-node=2", "--node", "second-node=2")
    assert code == 0, err
    assert "headroom" in out and "headro…" not in out


def test_measure_asks_llama_cpp_about_the_overridden_spec(model: Path, tmp_path: Path) -> None:
    from splitserve.cluster import load_spec
    from splitserve.cluster._planning import measured_spec

    path = tmp_path / "c.toml"
    path.write_text(f'model = "{model}"\n[[workers]]\nname = "w1"\n[server]\nctx_size = 4096\n')
    spec = load_spec(path)
    assert measured_spec(spec, {}, None) is spec
    out = measured_spec(
        spec,
        {"ctx": 1024, "cache_type_k": "q8_0", "flash_attn": False, "tensor_split": (1.0,), "margin_bytes": 0},
        model,
    )
    assert (out.server.ctx_size, out.server.cache_type_k, out.server.flash_attn) == (1024, "q8_0", "off")
    assert out.server.tensor_split == [1.0] and spec.server.ctx_size == 4096
    with pytest.raises(UsageError, match=r"server\.cache_type_v"):
        measured_spec(spec, {"cache_type_v": "q7_9"}, None)
    with pytest.raises(UsageError, match="spec's model"):
        measured_spec(spec, {}, tmp_path / "other.gguf")


def test_inspect_json_names_each_fact_of_the_header(tmp_path: Path) -> None:
    from gguf_factory import moe_qwen3

    [p] = moe_qwen3(
        tmp_path / "moe.gguf",
        n_layer=3,
        n_embd=256,
        n_head=4,
        n_head_kv=2,
        n_expert=16,
        n_expert_used=4,
        n_ff_exp=128,
        n_vocab=1024,
        n_ctx_train=16384,
    )
    code, out, err = run("inspect", str(p), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["architecture"] == "qwen3moe" and d["context_length"] == 16384
    assert d["parameter_count"] == d["n_params"] > 0 and d["file_size"] == d["file_bytes"] == p.stat().st_size
    assert d["quant_mix"]["Q8_0"]["tensors"] > 0
    assert len(d["layers"]) == 3
    for layer in d["layers"]:
        assert layer["tensor_bytes"] == layer["weights_bytes"] > layer["expert_bytes"] > 0
        assert (layer["n_head_kv"], layer["k_head_dim"], layer["v_head_dim"], layer["sliding_window"]) == (
            2,
            64,
            64,
            False,
        )
    assert d["kv"] == {"sliding_window": None, "swa_layers": 0, "mla": False}
    assert (d["experts"]["count"], d["experts"]["used"], d["experts"]["shared"]) == (16, 4, 0)
    assert d["chat_template"] == {"embedded": False, "tool_call_format": None}


def test_the_plan_writes_the_llama_server_flags(model: Path) -> None:
    code, out, err = run(
        "plan",
        str(model),
        "--node",
        "a=2",
        "--node",
        "b=2",
        "--ctx",
        "2048",
        "-np",
        "2",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-ub",
        "256",
        "-kvu",
        "--json",
    )
    assert code == 0, err
    d = json.loads(out)
    args = d["llama_server_args"]
    pairs = dict(zip(args[::2], args[1::2]))
    assert pairs["-c"] == "2048" and pairs["-np"] == "2" and pairs["-ctk"] == pairs["-ctv"] == "q8_0"
    assert pairs["-ub"] == "256" and pairs["-fa"] == "on" and pairs["--tensor-split"] == d["tensor_split_arg"]
    assert "--kv-unified" in args
    code, out, _ = run("plan", str(model), "--node", "a=2", "--ctx", "2048")
    assert "llama-server flags: -c 2048 -np 1 -ctk f16 -ctv f16 -ub 512 -fa on -ngl 999 --tensor-split" in out


def test_kv_per_token_per_node_adds_up(model: Path) -> None:
    code, out, err = run("plan", str(model), "--node", "a=2", "--node", "b=2", "--ctx", "4096", "-ts", "1,1", "--json")
    assert code == 0, err
    d = json.loads(out)
    per_node = [n["kv_bytes_per_token"] for n in d["nodes"]]
    assert all(x > 0 for x in per_node) and sum(per_node) == d["kv_bytes_per_token"]  # no SWA: exact
    assert all(n["kv_bytes_per_token"] * 4096 == n["kv_bytes"] for n in d["nodes"])


def test_a_context_past_the_training_one_is_warned(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    [p] = dense_llama(tmp_path / "t" / "d.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    train = json.loads(run("inspect", str(p), "--json")[1])["context_length"]
    d = json.loads(run("plan", str(p), "--node", "a=4", "--ctx", str(train * 2), "--json")[1])
    assert any("training context" in w for w in d["warnings"])
    d = json.loads(run("plan", str(p), "--node", "a=4", "--ctx", str(train * 2), "-np", "2", "--json")[1])
    assert not any("training context" in w for w in d["warnings"])  # per slot it is the training context
