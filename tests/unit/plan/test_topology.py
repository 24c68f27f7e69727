"""The planner's choice between a split and replicas (plan/_topology.py), on synthetic GGUFs."""

from __future__ import annotations

import pytest

from gguf_factory import dense_llama
from splitserve._errors import UsageError
from splitserve.model import ModelInfo, inspect_model
from splitserve.plan import GIB, Node, PlanOptions
from splitserve.plan._spec import ClusterFacts, Machine
from splitserve.plan._topology import Box, boxes_of, choose_topology


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    [p] = dense_llama(
        tmp_path_factory.mktemp("m") / "d.gguf", n_layer=8, n_embd=1024, n_head=8, n_head_kv=4, n_ff=4096, n_vocab=32000
    )
    return inspect_model(p)


OPTS = PlanOptions(ctx=4096, parallel=2, margin_bytes=0)


def need_gib(model: ModelInfo) -> float:
    """What the model with OPTS needs on one box, in GiB."""
    t = choose_topology(model, [Box("a", (Node("a", 1000 * GIB),))], OPTS)
    return t.alternatives[0].plans[0].nodes[0].total_bytes / GIB


def boxes(*gib: float) -> list[Box]:
    return [Box(f"b{i + 1}", (Node(f"b{i + 1}", int(g * GIB)),)) for i, g in enumerate(gib)]


def test_fits_one_box_gives_one_replica_per_box(model: ModelInfo) -> None:
    big = need_gib(model) * 1.5
    t = choose_topology(model, boxes(big, big), OPTS)
    assert t.kind == "replicas" and t.group_size == 1
    assert t.replicas == [("b1",), ("b2",)] and t.unused == []
    assert "fits on one box" in t.reason
    # both alternatives were weighed, each with its memory per box
    assert [a.kind for a in t.alternatives] == ["replicas", "split"]
    assert any(line.startswith("  split over all: b1 ") for line in t.lines())


def test_fits_two_boxes_gives_replicas_of_two(model: ModelInfo) -> None:
    part = need_gib(model) * 0.7  # one box is too small, two hold it
    t = choose_topology(model, boxes(part, part, part, part), OPTS)
    assert t.kind == "replicas" and t.group_size == 2
    assert t.replicas == [("b1", "b2"), ("b3", "b4")]
    assert t.lines()[0] == "topology: 2 replicas of 2 (b1+b2, b3+b4)"


def test_fits_nowhere_smaller_gives_one_split(model: ModelInfo) -> None:
    part = need_gib(model) * 0.6
    t = choose_topology(model, boxes(part, part), OPTS)
    assert t.kind == "split" and t.replicas == [("b1", "b2")]
    assert "fits on no smaller group" in t.reason and "b1 needs" in t.reason


def test_three_boxes_that_need_two_give_one_split(model: ModelInfo) -> None:
    part = need_gib(model) * 0.7
    t = choose_topology(model, boxes(part, part, part), OPTS)
    # two boxes hold it, but only one group of two exists: a split over all three
    assert t.kind == "split" and t.group_size == 3


def test_heterogeneous_boxes_use_those_that_fit(model: ModelInfo) -> None:
    need = need_gib(model)
    t = choose_topology(model, boxes(need * 2, need * 0.5, need * 2), OPTS)
    assert t.kind == "replicas" and t.replicas == [("b1",), ("b3",)]
    assert t.unused == ["b2"]
    assert "  unused: b2" in t.lines()


def test_context_times_parallel_decides(model: ModelInfo) -> None:
    need = need_gib(model)
    roomy = boxes(need * 1.2, need * 1.2)
    assert choose_topology(model, roomy, OPTS).kind == "replicas"
    wide = PlanOptions(ctx=4096 * 16, parallel=16, margin_bytes=0)
    assert choose_topology(model, roomy, wide).kind == "split"


def test_asked_split_and_replicas(model: ModelInfo) -> None:
    need = need_gib(model)
    four = boxes(*[need * 1.5] * 4)
    assert choose_topology(model, four, OPTS, "split").kind == "split"
    t = choose_topology(model, four, OPTS, "replicas", 2)
    assert t.replicas == [("b1", "b2"), ("b3", "b4")] and "replicas of 2" in t.reason
    small = boxes(need * 0.6, need * 0.6)
    with pytest.raises(UsageError, match=r"replicas of 1: the model with ctx 4,096 x parallel 2 fits no group"):
        choose_topology(model, small, OPTS, "replicas", 1)
    with pytest.raises(UsageError, match="choose one of auto, split, replicas"):
        choose_topology(model, four, OPTS, "mirror")
    with pytest.raises(UsageError, match="a replica of 5 boxes, but the spec has 4"):
        choose_topology(model, four, OPTS, "replicas", 5)


def test_to_dict_has_memory_per_node_for_each_alternative(model: ModelInfo) -> None:
    need = need_gib(model)
    d = choose_topology(model, boxes(need * 1.5, need * 1.5), OPTS).to_dict()
    assert d["kind"] == "replicas" and d["replicas"] == [["b1"], ["b2"]]
    split = d["alternatives"][1]
    assert split["kind"] == "split" and split["groups"][0]["boxes"] == ["b1", "b2"]
    assert {n["name"] for n in split["groups"][0]["nodes"]} == {"b1", "b2"}
    assert all(n["total_bytes"] > 0 for n in split["groups"][0]["nodes"])


def test_boxes_of_groups_devices_by_host() -> None:
    facts = ClusterFacts(
        workers=(
            Machine("w1", "local", memory_gib=8),
            Machine("w2", "spark2", ("CUDA0", "CUDA1"), memory_gib=16),
            Machine("w3", "spark2", memory_gib=4),
        ),
        head=Machine("head", "local"),
    )
    got = boxes_of(facts)
    assert [b.name for b in got] == ["local", "spark2"]
    assert [n.name for n in got[1].nodes] == ["w2/CUDA0", "w2/CUDA1", "w3"]
    assert got[1].memory_bytes == 36 * GIB


def test_one_box_is_a_single_server(model: ModelInfo) -> None:
    t = choose_topology(model, boxes(need_gib(model) * 2), OPTS)
    assert t.kind == "split" and t.replicas == [("b1",)]
    with pytest.raises(UsageError, match="no boxes"):
        choose_topology(model, [], OPTS)
