"""``cluster.plan_report``: what ``splitserve plan`` computes, called as a library (no CLI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gguf_factory import dense_llama
from splitserve._errors import UsageError
from splitserve.cluster import PlanRequest, plan_report
from splitserve.cluster._plan_report import PlanReport
from splitserve.plan import GIB, Plan


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    [p] = dense_llama(
        tmp_path_factory.mktemp("m") / "d.gguf", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024
    )
    return p


def _spec(tmp_path: Path, model: Path, body: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'model = "{model}"\n' + body)
    return path


def test_nodes_and_overrides_give_the_plan_and_its_json(model: Path) -> None:
    report = plan_report(
        PlanRequest(model=model, nodes=("a=2", "b=2"), overrides={"ctx": 2048, "cache_type_k": "q8_0"})
    )
    assert isinstance(report.plan, Plan) and report.topology is None and report.measured is None
    assert [n.name for n in report.plan.nodes] == ["a", "b"]
    assert report.plan.ctx == 2048 and report.plan.options.cache_type_k == "q8_0"
    assert report.as_dict() == report.plan.to_dict()
    assert report.plan.fits and not report.refused
    assert report.plan.options.host_node == 0  # the first node holds the head's host side by default


def test_a_plan_that_does_not_fit_is_refused(model: Path) -> None:
    report = plan_report(PlanRequest(model=model, nodes=("a=0.001",)))
    assert not report.plan.fits and report.refused


def test_host_node_by_name_or_none(model: Path) -> None:
    by_name = plan_report(PlanRequest(model=model, nodes=("a=2", "b=2"), host_node="b"))
    assert by_name.plan.options.host_node == 1
    assert by_name.plan.nodes[0].host_bytes == 0 and by_name.plan.nodes[1].host_bytes > 0
    none = plan_report(PlanRequest(model=model, nodes=("a=2",), host_node="None"))
    assert none.plan.options.host_node is None and none.plan.nodes[0].host_bytes == 0


@pytest.mark.parametrize(
    ("request_", "needle"),
    [
        (PlanRequest(nodes=("a=2",)), "give a MODEL"),
        (PlanRequest(model=Path("m.gguf")), "--node NAME=GIB"),
        (PlanRequest(model=Path("m.gguf"), nodes=("a=2",), measure=True), "--measure needs -c"),
    ],
)
def test_what_is_missing_is_a_usage_error(request_: PlanRequest, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        plan_report(request_)


def test_an_unknown_host_node_names_the_nodes(model: Path) -> None:
    with pytest.raises(UsageError, match=r"--host-node 'c' is not one of the nodes \(a, b\)"):
        plan_report(PlanRequest(model=model, nodes=("a=2", "b=2"), host_node="c"))


def test_the_spec_is_the_base_and_overrides_win(model: Path, tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        model,
        '[[workers]]\nname = "w1"\nmemory_gib = 2\n[[workers]]\nname = "w2"\nport = 50053\nmemory_gib = 2\n'
        '[server]\nctx_size = 4096\ncache_type_k = "q8_0"\ncache_type_v = "q8_0"\n',
    )
    base = plan_report(PlanRequest(config=spec))
    assert base.plan.ctx == 4096 and base.plan.options.cache_type_k == "q8_0"
    assert base.topology is None  # one machine: no topology to choose
    over = plan_report(
        PlanRequest(config=spec, overrides={"ctx": 2048, "margin_bytes": GIB // 2}, host_node="w2"),
    )
    assert over.plan.ctx == 2048 and over.plan.options.cache_type_v == "q8_0"
    assert over.plan.options.margin_bytes == GIB // 2 and over.plan.options.host_node == 1
    given = plan_report(PlanRequest(config=spec, nodes=("w1=4", "w2=4")))
    assert [n.memory_bytes for n in given.plan.nodes] == [4 * GIB, 4 * GIB]


def test_a_spec_over_two_hosts_carries_its_topology(model: Path, tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        model,
        '[head]\nmemory_gib = 8\n[[workers]]\nname = "w1"\nhost = "box2"\nbind = "10.9.0.2"\nmemory_gib = 8\n',
    )
    report = plan_report(PlanRequest(config=spec))
    assert report.topology is not None and report.topology.kind == "replicas"
    assert report.as_dict()["topology"] == report.topology.to_dict()
    assert {k: v for k, v in report.as_dict().items() if k != "topology"} == report.plan.to_dict()


def test_replicas_that_fit_are_not_refused_when_the_split_would_not_be() -> None:
    class _Topo:
        kind = "replicas"

    class _Plan:
        fits = False

    report = PlanReport(_Plan(), _Topo())  # type: ignore[arg-type]
    assert not report.refused
    _Topo.kind = "split"
    assert report.refused


def test_measure_asks_llama_cpp_with_the_overridden_spec(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(tmp_path, model, '[[workers]]\nname = "w1"\nmemory_gib = 2\n[server]\nctx_size = 4096\n')
    asked: list[Any] = []
    rows = [{"node": "w1", "what": "KV", "planned": 100, "measured": 110}]

    def fake_measure(measured: Any, plan: Plan) -> list[dict[str, Any]]:
        asked.append((measured.server.ctx_size, plan.ctx))
        return rows

    monkeypatch.setattr("splitserve.cluster._plan_report.measure_spec", fake_measure)
    report = plan_report(PlanRequest(config=spec, overrides={"ctx": 2048}, measure=True))
    assert asked == [(2048, 2048)]
    assert report.measured == rows and not report.refused
    assert report.as_dict() == {"plan": report.plan.to_dict(), "measured": rows}
    with pytest.raises(UsageError, match="--measure with --kv-unified"):
        plan_report(PlanRequest(config=spec, overrides={"unified": True}, measure=True))
