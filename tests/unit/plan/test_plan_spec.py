"""Plans from a cluster spec, and reading llama.cpp's own memory breakdown."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_factory import dense_llama
from splitserve._errors import UsageError
from splitserve.cluster import load_spec
from splitserve.cluster._planning import plan_for_spec, plan_if_sized, spec_nodes, spec_options
from splitserve.plan import GIB, Node
from splitserve.plan._measure import parse_breakdown

SPEC = """
name = "t"
model = "{model}"

[[workers]]
name = "w1"
port = 50052

[[workers]]
name = "w2"
port = 50053

[server]
ctx_size = 8192
parallel = 2
ubatch = 256
cache_type_k = "q8_0"
cache_type_v = "q8_0"
flash_attn = "on"
"""

# what llama-server -lv 4 --fit on printed for SmolLM2 over two loopback workers
BREAKDOWN = """\
0.00.547.080 I common_memory_breakdown_print: | memory breakdown [MiB]     | total    free    self   model   context   compute    unaccounted |
0.00.547.092 I common_memory_breakdown_print: |   - RPC0 (127.0.0.1:58331) | 24105 = 24105 + ( 124 =    33 +      48 +      43) +        -124 |
0.00.547.093 I common_memory_breakdown_print: |   - RPC1 (127.0.0.1:43001) | 24105 = 24105 + ( 137 =    58 +      42 +      37) +        -137 |
0.00.547.094 I common_memory_breakdown_print: |   - Host                   |                    56 =    28 +       0 +      27                |
0.00.596.972 I common_params_fit_impl: projected memory use with initial parameters [MiB]:
"""


@pytest.fixture()
def spec_file(tmp_path: Path) -> Path:
    [p] = dense_llama(tmp_path / "d.gguf", n_layer=6, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024)
    f = tmp_path / "cluster.toml"
    f.write_text(SPEC.format(model=p))
    return f


def test_spec_without_memory_sizes_asks_for_nodes(spec_file: Path) -> None:
    spec = load_spec(spec_file)
    with pytest.raises(UsageError, match=r"no memory size for w1, w2.*--node"):
        spec_nodes(spec)
    assert plan_if_sized(spec) is None


def test_plan_for_spec_uses_the_server_options(spec_file: Path) -> None:
    spec = load_spec(spec_file)
    o = spec_options(spec)
    assert (o.ctx, o.parallel, o.ubatch, o.cache_type_k, o.flash_attn) == (8192, 2, 256, "q8_0", True)
    assert o.host_node == 0  # the head runs on the same host as w1
    plan = plan_for_spec(spec, nodes=[Node("w1", 2 * GIB), Node("w2", 2 * GIB)])
    assert plan.ctx == 8192 and [n.name for n in plan.nodes] == ["w1", "w2"]
    assert plan.nodes[0].host_bytes > 0 and plan.nodes[1].host_bytes == 0
    with pytest.raises(UsageError, match="one per device"):
        plan_for_spec(spec, nodes=[Node("w1", GIB)])


def test_parse_breakdown() -> None:
    t = parse_breakdown(BREAKDOWN)
    mib = 2**20
    assert list(t) == ["RPC0 (127.0.0.1:58331)", "RPC1 (127.0.0.1:43001)", "Host"]
    assert t["RPC0 (127.0.0.1:58331)"] == {"model": 33 * mib, "context": 48 * mib, "compute": 43 * mib}
    assert t["Host"] == {"model": 28 * mib, "context": 0, "compute": 27 * mib}
    assert parse_breakdown("no table here") == {}


def test_split_for_up_refuses_or_fills_the_split(spec_file: Path) -> None:
    from types import SimpleNamespace

    from splitserve._errors import ClusterError
    from splitserve.cluster._planning import split_for_up

    spec = load_spec(spec_file)
    assert split_for_up(spec) is None  # no memory sizes: nothing to plan against

    def with_memory(gib: float, split: list[float] | None = None) -> SimpleNamespace:
        # the spec with memory_gib on its workers
        workers = [w.model_copy(update={"memory_gib": gib}) for w in spec.workers]
        server = spec.server.model_copy(update={"tensor_split": split})
        return SimpleNamespace(workers=workers, head=spec.head, server=server, model=spec.model, source_file=spec_file)

    split = split_for_up(with_memory(2))
    assert split is not None and sum(split) == 7  # 6 layers + output
    assert split_for_up(with_memory(2, [1.0, 1.0])) is None  # the spec's own split is kept
    with pytest.raises(ClusterError, match="will not fit: w1 needs"):
        split_for_up(with_memory(0.01))
