"""vLLM / SGLang parallel sizes chosen from the nodes' GPUs and the model's heads (pure)."""

from __future__ import annotations

import pytest

from splitserve.plan import ModelShape, choose_parallel

LLAMA_70B = ModelShape(heads=64, kv_heads=8, layers=80)
HEADS_40 = ModelShape(heads=40, kv_heads=8, layers=48)  # Qwen2.5-32B-like: 40 does not divide by 16


def test_heads_that_divide_over_every_gpu_take_tensor_parallel_over_all() -> None:
    got = choose_parallel({"head": 4, "w1": 4}, LLAMA_70B)
    assert (got.tensor, got.pipeline) == (8, 1)
    assert got.reason == "64 heads (8 KV) divide over all 8 GPUs of 2 nodes"
    assert got.note == "parallel sizes: tensor 8 x pipeline 1 (auto: 64 heads (8 KV) divide over all 8 GPUs of 2 nodes)"


def test_heads_that_do_not_divide_take_pipeline_over_the_nodes() -> None:
    got = choose_parallel({"head": 8, "w1": 8}, HEADS_40)
    assert (got.tensor, got.pipeline) == (8, 2)
    assert got.reason == "40 heads (8 KV) do not divide over 16 GPUs; tensor over each node's 8, pipeline over 2 nodes"


def test_heads_that_divide_over_neither_take_a_smaller_tensor_size() -> None:
    got = choose_parallel({"head": 3, "w1": 3}, ModelShape(heads=32, kv_heads=8, layers=32))
    assert (got.tensor, got.pipeline) == (1, 6)
    assert "do not divide over 6 or 3 GPUs; tensor 1, pipeline over 6 stages" in got.reason


def test_kv_heads_must_divide_or_be_replicated_evenly() -> None:
    # 12 heads divide over 6 ranks, but 4 KV heads neither divide over 6 nor replicate evenly
    got = choose_parallel({"head": 6}, ModelShape(heads=12, kv_heads=4, layers=24))
    assert (got.tensor, got.pipeline) == (2, 3)
    # 2 KV heads replicated over 8 ranks are fine
    assert choose_parallel({"head": 8}, ModelShape(heads=16, kv_heads=2, layers=24)).tensor == 8


def test_one_node_takes_its_gpus() -> None:
    got = choose_parallel({"head": 4}, LLAMA_70B)
    assert (got.tensor, got.pipeline, got.reason) == (4, 1, "64 heads (8 KV) divide over the node's 4 GPU(s)")
    assert (choose_parallel({"head": 1}, LLAMA_70B).tensor, choose_parallel({"head": 1}).pipeline) == (1, 1)


def test_gpu_counts_that_differ_use_the_smallest_and_say_so() -> None:
    got = choose_parallel({"head": 4, "w1": 2}, LLAMA_70B)
    assert (got.tensor, got.pipeline) == (4, 1)
    assert got.reason.startswith("GPUs differ per node (head 4, w1 2): 2 per node used; ")
    # Ray places ranks wherever the GPUs are: all six count
    ray = choose_parallel({"head": 4, "w1": 2}, ModelShape(heads=48, kv_heads=8, layers=40), even=False)
    assert (ray.tensor, ray.pipeline) == (2, 3)
    assert "every GPU used (Ray places the ranks)" in ray.reason


def test_heads_unknown_take_vllms_multi_node_layout() -> None:
    got = choose_parallel({"head": 4, "w1": 4}, ModelShape(source="no config.json in /m"))
    assert (got.tensor, got.pipeline) == (4, 2)
    assert got.reason == (
        "heads unknown (no config.json in /m); tensor over each node's 4 GPU(s), pipeline over 2 nodes "
        "(vLLM's multi-node layout)"
    )
    one = choose_parallel({"head": 2}, None)
    assert (one.tensor, one.pipeline, one.reason) == (2, 1, "heads unknown; tensor over the node's 2 GPU(s)")


def test_unknown_gpu_counts_are_said() -> None:
    got = choose_parallel({"head": None, "w1": None}, LLAMA_70B)
    assert (got.tensor, got.pipeline) == (2, 1)
    assert got.reason.startswith("GPU counts unknown: one per node assumed; ")
    part = choose_parallel({"head": 2, "w1": None}, LLAMA_70B)
    assert (part.tensor, part.pipeline) == (4, 1) and "GPU count unknown on w1: taken as 2" in part.reason


def test_pipeline_needs_a_layer_per_stage() -> None:
    # 6 heads divide over 2 only; pipeline 4 needs 4 layers and the model has 3
    with pytest.raises(
        ValueError, match=r"no tensor x pipeline split of 8 GPU\(s\) fits the model \(6 heads, 3 layers\)"
    ):
        choose_parallel({"head": 4, "w1": 4}, ModelShape(heads=6, kv_heads=6, layers=3))


def test_data_parallel_leaves_its_share() -> None:
    got = choose_parallel({"head": 8}, LLAMA_70B, data_parallel=2)
    assert (got.tensor, got.pipeline) == (4, 1) and "data_parallel_size = 2" in got.reason


@pytest.mark.parametrize(
    ("config", "shape"),
    [
        ({"num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 28}, (32, 8, 28)),
        ({"num_attention_heads": 12, "num_hidden_layers": 12}, (12, 12, 12)),  # no GQA: KV = heads
        ({"n_head": 25, "n_layer": 48}, (25, 25, 48)),  # GPT-2 names
        ({"model_type": "gemma3", "text_config": {"num_attention_heads": 8, "num_key_value_heads": 4}}, (8, 4, None)),
        ({"model_type": "x"}, (None, None, None)),
    ],
)
def test_shape_from_a_hugging_face_config(config: dict[str, object], shape: tuple[int | None, ...]) -> None:
    got = ModelShape.from_config(config)
    assert (got.heads, got.kv_heads, got.layers) == shape
