"""Reading GGUF headers across shards: what inspect reports, and clear errors for bad files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gguf_factory import Q, T, dense_llama, moe_qwen3, write_model
from splitserve._errors import ModelError
from splitserve.model import inspect_model, read_gguf, shard_paths


def test_dense_model_shape_bytes_and_parameters(tmp_path: Path) -> None:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024)
    m = inspect_model(p)
    assert (m.architecture, m.n_layer, m.n_embd, m.n_head, m.n_vocab) == ("llama", 4, 256, 4, 1024)
    # per layer: q 256x256, k/v 256x128, o 256x256, gate/up/down 256x512 in Q8_0 (34 bytes / 32) + 2 F32 norms
    per_layer_q8 = (256 * 256 * 2 + 256 * 128 * 2 + 256 * 512 * 3) // 32 * 34
    assert m.layers[0].weights_bytes == per_layer_q8 + 2 * 256 * 4
    assert m.layers[0].n_head_kv == 2 and m.layers[0].k_dim == 64 and m.layers[0].v_dim == 64
    assert m.n_params == 1024 * 256 * 2 + 4 * (256 * 256 * 2 + 256 * 128 * 2 + 256 * 512 * 3 + 512) + 256
    assert not m.tied_embeddings
    assert sum(m.input_tensor_bytes) == 1024 * 256 // 32 * 34
    assert m.quant_mix["Q8_0"]["tensors"] == 2 + 4 * 7
    assert m.weights_bytes == sum(v["bytes"] for v in m.quant_mix.values())


def test_tied_embeddings_put_a_copy_on_the_output_layer(tmp_path: Path) -> None:
    [p] = dense_llama(
        tmp_path / "t.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512, tied=True
    )
    m = inspect_model(p)
    assert m.tied_embeddings
    assert sum(m.output_tensor_bytes) == 512 * 128 // 32 * 34 + 128 * 4  # embeddings copy + output norm


def test_moe_experts_and_their_bytes(tmp_path: Path) -> None:
    [p] = moe_qwen3(tmp_path / "m.gguf", n_layer=2, n_embd=256, n_expert=32, n_expert_used=4, n_ff_exp=128, n_vocab=512)
    m = inspect_model(p)
    assert (m.n_expert, m.n_expert_used, m.n_ff_exp) == (32, 4, 128)
    assert all(layer.moe for layer in m.layers)
    assert m.layers[0].expert_bytes == 3 * 256 * 128 * 32 // 32 * 34
    d = m.to_dict()
    assert d["experts"]["count"] == 32 and d["experts"]["used"] == 4


def test_any_shard_finds_all_shards(tmp_path: Path) -> None:
    shards = dense_llama(
        tmp_path / "s.gguf", n_layer=6, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512, n_shards=3
    )
    assert [p.name for p in shards] == [f"s-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    one = inspect_model(shards[0])
    two = inspect_model(shards[2])
    assert one.n_params == two.n_params and len(two.shards) == 3
    assert sum(len(read_gguf(p).tensors) for p in shards[:1]) == len(read_gguf(shards[0]).tensors)
    assert one.file_bytes == sum(p.stat().st_size for p in shards)


def test_missing_shard_is_named(tmp_path: Path) -> None:
    shards = dense_llama(
        tmp_path / "s.gguf", n_layer=4, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512, n_shards=3
    )
    shards[1].unlink()
    with pytest.raises(ModelError, match=r"s-00002-of-00003\.gguf.*missing"):
        shard_paths(shards[0])
    with pytest.raises(ModelError, match="missing"):
        inspect_model(shards[2])


def test_truncated_file_is_reported(tmp_path: Path) -> None:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    size = p.stat().st_size
    os.truncate(p, size - 1000)
    with pytest.raises(ModelError, match="truncated"):
        inspect_model(p)
    os.truncate(p, 2000)  # cut inside the metadata
    with pytest.raises(ModelError, match="corrupt or truncated"):
        inspect_model(p)


def test_non_gguf_and_garbage(tmp_path: Path) -> None:
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(ModelError, match="not a GGUF file"):
        inspect_model(bad)
    garbage = tmp_path / "g.gguf"
    garbage.write_bytes(b"GGUF" + b"\xff" * 64)
    with pytest.raises(ModelError, match="corrupt"):
        inspect_model(garbage)
    with pytest.raises(ModelError, match="no such file"):
        inspect_model(tmp_path / "absent.gguf")


def test_model_without_architecture_key(tmp_path: Path) -> None:
    [p] = write_model(tmp_path / "n.gguf", "llama", {}, [T("token_embd.weight", (64, 300), Q.F16)], n_vocab=300)
    with pytest.raises(ModelError, match="block_count"):
        inspect_model(p)


def test_header_true_sparse_standin_is_large_on_paper_small_on_disk(m3_standin: list[Path]) -> None:
    shards = m3_standin
    assert len(shards) == 6
    m = inspect_model(shards[3])
    assert 190 * 2**30 < m.file_bytes < 200 * 2**30
    assert sum(p.stat().st_blocks * 512 for p in shards) < 64 * 2**20  # sparse: a few MB really written
    assert (m.architecture, m.n_layer, m.n_expert, m.n_expert_used, m.n_expert_shared) == ("minimax-m3", 60, 128, 4, 1)
    assert 420e9 < m.n_params < 430e9
    assert sum(1 for layer in m.layers if layer.extra_kv) == 57  # indexer cache past the 3 dense layers
    assert not m.layers[0].moe and m.layers[3].moe
    assert m.n_vocab == 200064  # from the skipped token array's length
    assert {"IQ4_XS", "IQ3_S", "Q8_0", "Q6_K", "F32"} <= set(m.quant_mix)


HERMES = '{% for c in m.tool_calls %}<tool_call>\n{"name": "{{ c.name }}"}</tool_call>{% endfor %}'


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (HERMES, "hermes"),
        ("<minimax:tool_call><invoke name=", "minimax-m2"),
        ("{% if tools %}<tool_call>{{ x }}</tool_call>{% endif %}", None),
        ("plain", None),
    ],
)
def test_tool_call_format_is_named_by_the_detector_the_caller_passes(
    tmp_path: Path, template: str, expected: str | None
) -> None:
    from splitserve.chat import detect_format

    [p] = dense_llama(
        tmp_path / "t.gguf", n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ff=128, n_vocab=256, chat_template=template
    )
    assert inspect_model(p).tool_call_format is None  # the model layer knows no formats
    m = inspect_model(p, tool_format=detect_format)
    assert m.tool_call_format == expected == detect_format(template)
    assert m.to_dict()["chat_template"] == {"embedded": True, "tool_call_format": expected}
    assert inspect_model(p, tool_format=lambda t: "seen" if t == template else "other").tool_call_format == "seen"


def test_inspect_names_the_format_the_gateway_parses(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    import splitserve.cli._inspect  # noqa: F401  (registers inspect)
    from splitserve.cli import app

    [p] = dense_llama(
        tmp_path / "h.gguf", n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ff=128, n_vocab=256, chat_template=HERMES
    )
    r = CliRunner().invoke(app, ["inspect", str(p), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["chat_template"]["tool_call_format"] == "hermes"
