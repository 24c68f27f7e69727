"""Layer assignment, weights and KV bytes against llama.cpp's rules and measured figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_factory import dense_llama
from splitserve._errors import UsageError
from splitserve.model import inspect_model
from splitserve.plan import layer_devices
from splitserve.plan._memory import KVSettings, kv_cells, layer_kv_bytes, row_size

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


def test_context_padding_and_streams(tmp_path: Path) -> None:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    m = inspect_model(p)
    assert kv_cells(m, KVSettings(ctx=1000)) == (1024, 1024)
    # 3 slots, not unified: pad(1024 / 3, 256) = 512 cells per stream
    assert kv_cells(m, KVSettings(ctx=1000, parallel=3)) == (1536, 1536)
    assert kv_cells(m, KVSettings(ctx=1000, parallel=3, unified=True)) == (1024, 1024)


def test_quantized_v_cache_needs_flash_attention(tmp_path: Path) -> None:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    m = inspect_model(p)
    with pytest.raises(UsageError, match="flash attention"):
        layer_kv_bytes(m, KVSettings(ctx=4096, type_v="q8_0", flash_attn=False))
    assert layer_kv_bytes(m, KVSettings(ctx=4096, type_k="q8_0", flash_attn=False))
