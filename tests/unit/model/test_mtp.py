"""MTP (nextn) layers read from GGUF headers: what `--spec-type draft-mtp` can draft with."""

from __future__ import annotations

from pathlib import Path

from gguf_factory import dense_llama
from spec_factory import glm4moe_mtp, tiny_m3
from splitserve.model import inspect_model


def test_glm4moe_with_nextn_layers_has_mtp(tmp_path: Path) -> None:
    (path,) = glm4moe_mtp(tmp_path / "g.gguf", n_layer=3, nextn=1)
    m = inspect_model(path)
    assert m.nextn_predict_layers == 1
    assert m.mtp_layers == [3]
    assert m.has_mtp and m.mtp_problem is None
    assert m.to_dict()["mtp"] == {"nextn_predict_layers": 1, "layers": [3], "draft_mtp": True, "problem": None}


def test_a_model_without_nextn_has_no_mtp(tmp_path: Path) -> None:
    (path,) = dense_llama(tmp_path / "d.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    m = inspect_model(path)
    assert not m.has_mtp and m.mtp_layers == [] and m.nextn_predict_layers == 0
    assert "no MTP layers" in (m.mtp_problem or "")


def test_minimax_m3_has_no_mtp(tmp_path: Path) -> None:
    (path,) = tiny_m3(tmp_path / "m3.gguf")
    assert not inspect_model(path).has_mtp


def test_the_key_without_the_weights_is_a_stripped_quant(tmp_path: Path) -> None:
    (path,) = glm4moe_mtp(tmp_path / "g.gguf", weights=False)
    m = inspect_model(path)
    assert m.nextn_predict_layers == 1 and m.mtp_layers == []
    assert not m.has_mtp and "stripped" in (m.mtp_problem or "")


def test_the_weights_without_the_key_are_ignored_by_llama_cpp(tmp_path: Path) -> None:
    (path,) = glm4moe_mtp(tmp_path / "g.gguf", kv=False)
    m = inspect_model(path)
    assert m.mtp_layers == [3] and not m.has_mtp
    assert "nextn_predict_layers" in (m.mtp_problem or "")


def test_nextn_tensors_on_an_architecture_without_an_mtp_graph(tmp_path: Path) -> None:
    # glm4 (dense) carries nextn tensors in some conversions, but the pinned llama.cpp builds no
    # MTP graph for it (src/models/glm4.cpp)
    (path,) = glm4moe_mtp(tmp_path / "g.gguf", arch="glm4")
    m = inspect_model(path)
    assert m.mtp_layers == [3] and not m.has_mtp
    assert "no MTP graph" in (m.mtp_problem or "") and "glm4" in (m.mtp_problem or "")
