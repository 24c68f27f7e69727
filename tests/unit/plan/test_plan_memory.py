"""Layer assignment, weights and KV bytes against llama.cpp's rules and measured figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_factory import dense_llama
from splitserve._errors import UsageError
from splitserve.model import inspect_model
from splitserve.plan import KVSettings, layer_devices, layer_kv_bytes, row_size, weights_per_device
from splitserve.plan._memory import kv_cells

MIB = 2**20


def test_layer_assignment_follows_upper_bound_over_n_layer_plus_one() -> None:
    # measured with llama-server over RPC workers: 8 layers at -ts 1,1 -> 5 + 3 (+ output)
    assert layer_devices(8, [1, 1]) == [0] * 5 + [1] * 4
    assert layer_devices(6, [1, 1]) == [0] * 4 + [1] * 3
    assert layer_devices(8, [1, 2, 1]) == [0] * 3 + [1] * 4 + [2] * 2
    assert layer_devices(30, [1, 1]) == [0] * 16 + [1] * 15  # SmolLM2: 16 and 14 layers, output on the 2nd
    assert layer_devices(8, [8, 1]) == [0] * 8 + [1]  # output alone on the last device


def test_integer_layer_counts_are_exact() -> None:
    for counts in ([30, 31], [20, 20, 21], [1, 59, 1], [0, 61]):
        devs = layer_devices(60, counts)
        assert [devs.count(i) for i in range(len(counts))] == counts


def test_bad_splits() -> None:
    with pytest.raises(UsageError):
        layer_devices(8, [0, 0])
    with pytest.raises(UsageError):
        layer_devices(8, [1, -1])


def test_row_sizes() -> None:
    assert row_size("f16", 384) == 768
    assert row_size("q8_0", 384) == 384 // 32 * 34
    assert row_size("q4_0", 384) == 384 // 32 * 18
    with pytest.raises(UsageError, match="not a GGML type"):
        row_size("q3_x", 32)


def test_smollm2_weights_and_kv_match_the_measured_load(smollm2: Path) -> None:
    """shared/research/serving.md: SmolLM2 Q4_1, two RPC workers, ctx 4096 f16, -ts 1/1."""
    m = inspect_model(smollm2)
    devs = layer_devices(m.n_layer, [1, 1])
    w = weights_per_device(m, devs, 2)
    assert abs(w[0] / MIB - 33.82) < 0.01 and abs(w[1] / MIB - 58.28) < 0.01
    kv = layer_kv_bytes(m, KVSettings(ctx=4096))
    assert sum(kv[:16]) == 48 * MIB and sum(kv[16:]) == 42 * MIB
    # ctx 8192 q8_0 on one worker: 30 x 8192 x 384 x 34/32 bytes, "exactly"
    assert sum(layer_kv_bytes(m, KVSettings(ctx=8192, type_k="q8_0", type_v="q8_0"))) == 30 * 8192 * 384 * 34 // 32


def test_context_padding_and_streams(tmp_path: Path) -> None:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    m = inspect_model(p)
    assert kv_cells(m, KVSettings(ctx=1000)) == (1024, 1024)
    # 3 slots, not unified: pad(1024 / 3, 256) = 512 cells per stream
    assert kv_cells(m, KVSettings(ctx=1000, parallel=3)) == (1536, 1536)
    assert kv_cells(m, KVSettings(ctx=1000, parallel=3, unified=True)) == (1024, 1024)


def test_sliding_window_layers_hold_window_plus_ubatch(gemma3: Path) -> None:
    m = inspect_model(gemma3)
    full, swa = kv_cells(m, KVSettings(ctx=16384, ubatch=512))
    assert (full, swa) == (16384, 1024)  # pad(min(16384, 512 + 512), 256)
    kv = layer_kv_bytes(m, KVSettings(ctx=16384))
    per_cell = 2 * 256 * 2
    assert kv[5] == per_cell * 16384 and kv[0] == per_cell * 1024


def test_quantized_v_cache_needs_flash_attention(smollm2: Path) -> None:
    m = inspect_model(smollm2)
    with pytest.raises(UsageError, match="flash attention"):
        layer_kv_bytes(m, KVSettings(ctx=4096, type_v="q8_0", flash_attn=False))
    assert layer_kv_bytes(m, KVSettings(ctx=4096, type_k="q8_0", flash_attn=False))
