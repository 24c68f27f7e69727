"""vLLM / SGLang specs without parallel sizes: the spec loads, the plan chooses tensor x pipeline
from the nodes' GPUs and the model folder's config.json, and `up --dry-run` says which and why.
Given sizes that do not split evenly are still refused."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gguf_factory import dense_llama
from splitserve import ClusterError, SpecError
from splitserve.cli import _cluster  # noqa: F401  (registers `up` on the app)
from splitserve.cli._app import app
from splitserve.cluster import FakeNetwork, format_plan, gather_facts, parse_spec, plan_launch
from splitserve.cluster._engines_facts import FACT_MARK
from splitserve.cluster._engines_plan import EngineFacts, EngineNode, engine_plan
from splitserve.cluster._preflight_engines import backend_checks

W1 = {"name": "w1", "host": "box2", "bind": "10.0.0.2"}
W2 = {"name": "w2", "host": "box3", "bind": "10.0.0.3"}
W3 = {"name": "w3", "host": "box4", "bind": "10.0.0.4"}
ADDRESSES = {"head": "10.0.0.1", "w1": "10.0.0.2", "w2": "10.0.0.3", "w3": "10.0.0.4"}


def model_dir(tmp_path: Path, heads: int, kv: int, layers: int = 32) -> str:
    folder = tmp_path / f"model-{heads}-{kv}"
    folder.mkdir()
    config = {"num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": layers}
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def spec(backend: str, model: str, workers: list[dict[str, Any]], **extra: Any) -> Any:
    table = {"model": model, "python": "/venv/bin/python", **extra.pop("table", {})}
    return parse_spec({"name": "auto", "backend": backend, "workers": workers, backend: table, **extra})


def facts(gpus: dict[str, int | None]) -> EngineFacts:
    return EngineFacts(
        tuple(
            EngineNode(name=n, address=ADDRESSES[n], interface="eth1", gpus=g, python="/venv/bin/python")
            for n, g in gpus.items()
        )
    )


def sizes(argv: list[str], tp: str, pp: str) -> tuple[str, str | None]:
    return argv[argv.index(tp) + 1], argv[argv.index(pp) + 1] if pp in argv else None


# -- the spec ----------------------------------------------------------------------------------


def test_a_two_node_spec_without_sizes_loads_and_leaves_them_to_up() -> None:
    for backend in ("vllm", "sglang"):
        s = spec(backend, "Qwen/Qwen3-0.6B", [W1])
        table = s.vllm if backend == "vllm" else s.sglang
        assert (table.tensor_parallel_size, table.pipeline_parallel_size, table.auto_sizes) == (None, None, True)


def test_one_size_given_makes_the_other_one() -> None:
    table = spec("vllm", "m", [W1], table={"tensor_parallel_size": 2}).vllm
    assert (table.tensor_parallel_size, table.pipeline_parallel_size, table.auto_sizes) == (2, 1, False)
    table = spec("sglang", "m", [W1], table={"pipeline_parallel_size": 2}).sglang
    assert (table.tensor_parallel_size, table.pipeline_parallel_size) == (1, 2)


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            {"tensor_parallel_size": 1},
            "vllm.tensor_parallel_size x pipeline_parallel_size x data_parallel_size = 1 x 1 x 1 = 1 "
            "does not split evenly over 2 nodes",
        ),
        ({"tensor_parallel_size": 3, "pipeline_parallel_size": 1}, "3 x 1 x 1 = 3 does not split evenly over 2 nodes"),
    ],
)
def test_given_sizes_that_do_not_split_are_still_refused(table: dict[str, int], expected: str) -> None:
    with pytest.raises(SpecError) as info:
        spec("vllm", "m", [W1], table=table)
    assert expected in str(info.value)


# -- the plan ----------------------------------------------------------------------------------


def test_heads_that_divide_take_tensor_parallel_over_every_gpu(tmp_path: Path) -> None:
    s = spec("vllm", model_dir(tmp_path, 32, 8), [W1])
    plan = engine_plan(s, facts({"head": 4, "w1": 4}))
    assert (
        plan.notes[0]
        == "parallel sizes: tensor 8 x pipeline 1 (auto: 32 heads (8 KV) divide over all 8 GPUs of 2 nodes)"
    )
    for p in plan.processes:
        assert sizes(p.argv, "--tensor-parallel-size", "--pipeline-parallel-size") == ("8", "1")
        assert p.argv[p.argv.index("--nnodes") + 1] == "2"


def test_heads_that_do_not_divide_take_pipeline_over_the_nodes(tmp_path: Path) -> None:
    s = spec("vllm", model_dir(tmp_path, 40, 8), [W1, W2])
    plan = engine_plan(s, facts({"head": 4, "w1": 4, "w2": 4}))
    assert plan.notes[0] == (
        "parallel sizes: tensor 4 x pipeline 3 (auto: 40 heads (8 KV) do not divide over 12 GPUs; "
        "tensor over each node's 4, pipeline over 3 nodes)"
    )
    assert [sizes(p.argv, "--tensor-parallel-size", "--pipeline-parallel-size") for p in plan.processes] == [
        ("4", "3")
    ] * 3


def test_the_spec_devices_win_and_a_smaller_node_sets_the_count(tmp_path: Path) -> None:
    s = spec("vllm", model_dir(tmp_path, 32, 8), [{**W1, "devices": ["CUDA0", "CUDA1"]}])
    plan = engine_plan(s, facts({"head": 4, "w1": 8}))
    assert plan.notes[0].startswith(
        "parallel sizes: tensor 4 x pipeline 1 (auto: GPUs differ per node (head 4, w1 2): 2 per node used; "
    )


def test_without_a_config_the_heads_are_unknown(tmp_path: Path) -> None:
    s = spec("sglang", "org/not-cached", [W1], table={"env": {"HF_HUB_CACHE": str(tmp_path / "hub")}})
    plan = engine_plan(s, facts({"head": 2, "w1": 2}))
    assert plan.notes[0] == (
        "parallel sizes: tensor 2 x pipeline 2 (auto: heads unknown (org/not-cached: no config.json in this "
        "machine's Hugging Face cache); tensor over each node's 2 GPU(s), pipeline over 2 nodes (vLLM's "
        "multi-node layout))"
    )
    for p in plan.processes:
        assert sizes(p.argv, "--tp-size", "--pp-size") == ("2", "2")
    missing = spec("vllm", str(tmp_path / "nowhere"), [W1])
    assert (
        f"heads unknown (no readable {tmp_path / 'nowhere' / 'config.json'})"
        in engine_plan(missing, facts({"head": 1, "w1": 1})).notes[0]
    )


def test_a_hub_id_is_read_from_the_heads_hugging_face_cache(tmp_path: Path) -> None:
    repo = tmp_path / "hf" / "hub" / "models--org--model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    config = {"num_attention_heads": 12, "num_key_value_heads": 4, "num_hidden_layers": 24}
    (repo / "snapshots" / "abc123" / "config.json").write_text(json.dumps(config))
    s = spec("vllm", "org/model", [W1], table={"env": {"HF_HOME": str(tmp_path / "hf")}})
    plan = engine_plan(s, facts({"head": 4, "w1": 4}))
    assert plan.notes[0] == (
        "parallel sizes: tensor 4 x pipeline 2 (auto: 12 heads (4 KV) do not divide over 8 GPUs; "
        "tensor over each node's 4, pipeline over 2 nodes)"
    )


def test_a_gguf_is_read_from_its_header(tmp_path: Path) -> None:
    (gguf,) = dense_llama(tmp_path / "m.gguf", n_head=8, n_head_kv=4, n_layer=4, n_embd=64, n_ff=128, n_vocab=256)
    plan = engine_plan(spec("vllm", str(gguf), [W1]), facts({"head": 4, "w1": 4}))
    assert plan.notes[0].startswith(
        "parallel sizes: tensor 8 x pipeline 1 (auto: 8 heads (4 KV) divide over all 8 GPUs"
    )


def test_ray_counts_every_gpu(tmp_path: Path) -> None:
    s = spec("vllm", model_dir(tmp_path, 48, 8), [W1], table={"launcher": "ray"})
    plan = engine_plan(s, facts({"head": 4, "w1": 2}))
    assert "tensor 2 x pipeline 3" in plan.notes[0] and "every GPU used (Ray places the ranks)" in plan.notes[0]
    vllm = next(p for p in plan.processes if p.role == "vllm")
    assert sizes(vllm.argv, "--tensor-parallel-size", "--pipeline-parallel-size") == ("2", "3")


def test_preflight_checks_the_gpus_against_the_chosen_sizes(tmp_path: Path) -> None:
    s = spec("vllm", model_dir(tmp_path, 48, 8), [W1], table={"launcher": "ray"})
    rows = [r for r in backend_checks(s, facts({"head": 4, "w1": 2})) if r.check == "gpus"]
    assert [(r.node, r.status, r.message) for r in rows] == [
        ("head", "pass", "4 GPU(s); the Ray cluster has 6 for a world of 6"),
        ("w1", "pass", "2 GPU(s); the Ray cluster has 6 for a world of 6"),
    ]


def test_replicas_get_the_sizes_of_one_group(tmp_path: Path) -> None:
    s = spec("vllm", model_dir(tmp_path, 32, 8), [W1, W2, W3], topology="replicas:2", table={"api_key": "k"})
    plan = engine_plan(s, facts({"head": 2, "w1": 2, "w2": 2, "w3": 1}))
    assert plan.notes[0] == (
        "parallel sizes: tensor 2 x pipeline 1 (auto: per replica of 2 node(s); group w2, w3: "
        "GPUs differ per node (w2 2, w3 1): 1 per node used; 32 heads (8 KV) divide over all 2 GPUs of 2 nodes)"
    )
    assert {sizes(p.argv, "--tensor-parallel-size", "--pipeline-parallel-size") for p in plan.processes} == {("2", "1")}


def test_one_node_with_one_gpu_needs_no_note(tmp_path: Path) -> None:
    plan = engine_plan(spec("vllm", model_dir(tmp_path, 32, 8), []), facts({"head": 1}))
    assert not any(n.startswith("parallel sizes") for n in plan.notes)
    assert sizes(plan.processes[0].argv, "--tensor-parallel-size", "--pipeline-parallel-size") == ("1", "1")


def test_no_split_that_fits_is_one_line_naming_the_keys(tmp_path: Path) -> None:
    s = spec("vllm", model_dir(tmp_path, 6, 6, layers=3), [W1])
    with pytest.raises(ClusterError, match=r"^<spec>: vllm: no tensor x pipeline split of 8 GPU\(s\) fits the model"):
        engine_plan(s, facts({"head": 4, "w1": 4}))


def test_given_sizes_are_used_as_given(tmp_path: Path) -> None:
    s = spec("vllm", model_dir(tmp_path, 32, 8), [W1], table={"tensor_parallel_size": 2})
    plan = engine_plan(s, facts({"head": 4, "w1": 4}))
    assert not any(n.startswith("parallel sizes") for n in plan.notes)
    assert sizes(plan.processes[0].argv, "--tensor-parallel-size", "--pipeline-parallel-size") == ("2", "1")


# -- up --dry-run ------------------------------------------------------------------------------


def test_up_dry_run_prints_the_chosen_sizes_and_why(tmp_path: Path) -> None:
    """Two nodes on this machine (their facts are this machine's; the GPUs the spec's devices),
    through the CLI as a user runs it: no sizes in the spec, nothing started."""
    config = tmp_path / "cluster.toml"
    config.write_text(
        f'name = "auto"\nbackend = "vllm"\nstate_dir = "{tmp_path / "st"}"\n\n'
        '[head]\ndevices = ["CUDA0", "CUDA1"]\n\n'
        '[[workers]]\nname = "w1"\nbind = "127.0.0.1"\ndevices = ["CUDA0", "CUDA1"]\n\n'
        f'[vllm]\nmodel = "{model_dir(tmp_path, 14, 2, layers=28)}"\n'
    )
    res = CliRunner().invoke(app, ["up", "-c", str(config), "--dry-run", "--skip-preflight"])
    assert res.exit_code == 0, res.output
    assert (
        "# parallel sizes: tensor 2 x pipeline 2 (auto: 14 heads (2 KV) do not divide over 4 GPUs; "
        "tensor over each node's 2, pipeline over 2 nodes)"
    ) in res.stdout
    serve = [line for line in res.stdout.splitlines() if "vllm serve " in line and not line.startswith("#")]
    assert len(serve) == 2 and all(
        re.search(r"--tensor-parallel-size 2 --pipeline-parallel-size 2 .*--nnodes 2", line) for line in serve
    )
    assert "does not split evenly" not in res.output
    assert not (tmp_path / "st").exists() or not any((tmp_path / "st").rglob("*.pid"))


def four_gpu_nodes() -> FakeNetwork:
    """The head and box2 on a :class:`FakeNetwork`, each answering the facts script with 4 GPUs."""
    net = FakeNetwork()
    for host, address in (("local", "10.0.0.1"), ("box2", "10.0.0.2")):
        nic = [{"ifname": "eth1", "mtu": 9000, "operstate": "UP", "addr_info": [{"local": address, "prefixlen": 24}]}]
        gpus = "\n".join(f"GPU {i}: NVIDIA H100 (UUID: GPU-{i})" for i in range(4))
        sections = [("nic", 0, json.dumps(nic)), ("engine", 0, "0.11.0"), ("gpus", 0, gpus), ("gds", 1, "")]
        out = "".join(f"{FACT_MARK}{k}\n{text}\n@@splitserve-rc {rc}\n" for k, rc, text in sections)
        net.node(host).answers.append((FACT_MARK, subprocess.CompletedProcess(["sh"], 0, out.encode(), b"")))
    return net


TP4_PP2 = (
    "# parallel sizes: tensor 4 x pipeline 2 (auto: 12 heads (4 KV) do not divide over 8 GPUs; "
    "tensor over each node's 4, pipeline over 2 nodes)"
)


def test_dry_run_on_the_fake_network_counts_each_nodes_gpus(tmp_path: Path) -> None:
    """The same on a :class:`FakeNetwork`: the GPUs come from each node's ``nvidia-smi -L``."""
    net = four_gpu_nodes()
    s = spec("vllm", model_dir(tmp_path, 12, 4), [W1], state_dir=str(tmp_path / "st"))
    text = format_plan(plan_launch(s, gather_facts(s, edges=net.edges())))
    assert text.splitlines()[0] == TP4_PP2
    serve = [line for line in text.splitlines() if "vllm serve " in line and not line.startswith("#")]
    assert len(serve) == 2 and all("--tensor-parallel-size 4 --pipeline-parallel-size 2" in line for line in serve)
    assert net.spawned == []


def test_the_models_shape_is_read_once_with_the_nodes_facts(tmp_path: Path) -> None:
    """config.json is read with the facts, once: the plan and the preflight rows take the shape
    from them (the file gone afterwards changes nothing), and it survives the facts' JSON."""
    model = model_dir(tmp_path, 12, 4)
    s = spec("vllm", model, [W1], state_dir=str(tmp_path / "st"))
    gathered = gather_facts(s, edges=four_gpu_nodes().edges())
    (Path(model) / "config.json").unlink()
    assert format_plan(plan_launch(s, gathered)).splitlines()[0] == TP4_PP2
    engines = gathered.nodes
    assert engines is not None and engines.shape is not None and engines.shape.heads == 12
    assert EngineFacts.from_dict(json.loads(json.dumps(engines.as_dict()))) == engines
    gpus = [r for r in backend_checks(s, engines) if r.check == "gpus"]
    assert gpus and all(r.status == "pass" and "4 GPU(s)" in r.message for r in gpus), gpus
    # without the facts' shape the file is read where needed: gone, the heads are unknown
    bare = EngineFacts(engines.nodes)
    assert f"heads unknown (no readable {model}/config.json)" in engine_plan(s, bare).notes[0]
