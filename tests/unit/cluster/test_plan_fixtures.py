"""`up`'s plan in pyinfra's manner: each ``tests/fixtures/plans/llamacpp/*.json`` (llama.cpp over RPC)
and ``tests/fixtures/plans/launch/*.json`` (vLLM native, vLLM on Ray, the Ray probe, SGLang) holds a spec, the
facts `up` would have gathered (:class:`LaunchFacts` as JSON) and the steps :func:`plan_launch`
must return for them: action, node and the line the dry-run prints for every step, and host,
argv, env, bind, port and log for every process started.

The expected steps are data, reviewed like code. After a deliberate change to the plan, rewrite
them with

    SPLITSERVE_REGEN_FIXTURES=1 .venv/bin/python -m pytest tests/unit/cluster/test_plan_fixtures.py

and read the diff before committing it. ``$PYTHON`` in a fixture stands for the interpreter the
gateway runs under (``sys.executable``, which differs between machines).

A fixture is ``{"about", "spec" (a dict, or TOML text), "facts", "options" (plan_launch's keyword
arguments, optional), "expected": {"endpoint", "engine_endpoint", "tensor_split", "steps"}}``;
``facts.engines`` maps a node to ``{"root", "bin_dir", "provenance"}``, ``facts.remote_engines``
a remote worker to :class:`RemoteBuild`'s fields, ``facts.refusal`` is the planner's message;
``facts.nodes`` (vLLM / SGLang) is every node's :class:`EngineFacts`.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from splitserve import ClusterError
from splitserve.cluster import ClusterSpec, Executor, LaunchFacts, LaunchPlan, format_plan, parse_spec, plan_launch
from splitserve.cluster._engines_plan import EngineFacts
from splitserve.cluster._launch import RemoteBuild, Step
from splitserve.cluster._replicas import spec_topology
from splitserve.engine import Engine

PLANS = Path(__file__).resolve().parents[2] / "fixtures" / "plans"
FIXTURES = PLANS / "llamacpp"
LAUNCH = PLANS / "launch"
"""vLLM and SGLang: the same steps, printer and executor as llama.cpp's."""
REGEN = os.environ.get("SPLITSERVE_REGEN_FIXTURES") == "1"
PYTHON = "$PYTHON"

WANTED = {
    "local-2workers",
    "local-planner-split",
    "ssh-2nodes",
    "ssh-3nodes",
    "ssh-drop-caches",
    "gateway-port-taken",
    "stale-earlier-run",
    "replicas-of-1",
    "replicas-of-2",
}
WANTED_LAUNCH = {
    "vllm-native-tp2-2nodes",
    "vllm-ray-tp3-3nodes",
    "vllm-ray-probe-3nodes",
    "sglang-tp2-2nodes",
    "vllm-replicas-of-2-4nodes",
}


def load_spec_of(fixture: dict[str, Any]) -> ClusterSpec:
    spec = fixture["spec"]
    return parse_spec(tomllib.loads(spec) if isinstance(spec, str) else spec)


def load_facts(data: dict[str, Any]) -> LaunchFacts:
    engines = {
        node: Engine(root=Path(e["root"]), bin_dir=Path(e["bin_dir"]), provenance=e["provenance"])
        for node, e in data["engines"].items()
    }
    refusal = data.get("refusal")
    return LaunchFacts(
        engines=engines,
        architecture=data.get("architecture"),
        planned_split=data.get("planned_split"),
        serving_warnings=list(data.get("serving_warnings", [])),
        stale=list(data.get("stale", [])),
        stale_ports=set(data.get("stale_ports", [])),
        busy_ports=set(data.get("busy_ports", [])),
        spare_port=data.get("spare_port"),
        remote_engines={name: RemoteBuild(**f) for name, f in data.get("remote_engines", {}).items()},
        refusal=ClusterError(refusal) if refusal else None,
        nodes=EngineFacts.from_dict(data["nodes"]) if "nodes" in data else None,
    )


def _portable(value: Any) -> Any:
    """JSON for a step's arguments: exceptions as their message, the interpreter as ``$PYTHON``."""
    if isinstance(value, dict):
        return {str(k): _portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_portable(v) for v in value]
    if isinstance(value, BaseException):
        return str(value)
    if isinstance(value, Path):
        return str(value)
    if value == sys.executable:
        return PYTHON
    return value


def step_json(step: Step) -> dict[str, Any]:
    out: dict[str, Any] = {"action": step.action, "node": step.node, "text": step.text}
    if step.args:
        out["args"] = _portable(step.args)
    p = step.process
    if p is not None:
        out["process"] = p.node
        if step.action == "start":
            out.update(host=p.host, bind=p.bind, port=p.port, log=str(p.log))
            out["argv"] = _portable(p.argv)
            out["env"] = _portable(p.env)
    return out


def plan_json(plan: LaunchPlan) -> dict[str, Any]:
    out: dict[str, Any] = {
        "endpoint": plan.endpoint,
        "engine_endpoint": plan.engine_endpoint,
        "tensor_split": plan.tensor_split,
    }
    if plan.replicas:
        out["topology"] = plan.topology
        out["replicas"] = [r.to_dict() for r in plan.replicas]
    if plan.ranks:  # vLLM / SGLang: what the state records besides the processes
        out["engine"] = plan.engine_name
        out["record"] = _portable(plan.record)
    out["steps"] = [step_json(s) for s in plan.steps]
    return out


def plan_of(fixture: dict[str, Any]) -> LaunchPlan:
    """``facts.topology: true``: the spec's topology as `up` resolves it (no model file here, so as
    the spec asks)."""
    spec = load_spec_of(fixture)
    facts = load_facts(fixture["facts"])
    if fixture["facts"].get("topology"):
        facts.topology = spec_topology(spec)
    return plan_launch(spec, facts, **fixture.get("options", {}))


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.glob("*.json")) + sorted(LAUNCH.glob("*.json"))


def read(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def start_argv(fixture: dict[str, Any], node: str) -> list[str]:
    (step,) = [s for s in fixture["expected"]["steps"] if s["action"] == "start" and s["node"] == node]
    argv: list[str] = step["argv"]
    return argv


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_every_case_has_a_fixture() -> None:
    assert {p.stem for p in FIXTURES.glob("*.json")} >= WANTED
    assert {p.stem for p in LAUNCH.glob("*.json")} >= WANTED_LAUNCH


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.stem)
def test_plan_matches_the_fixture(path: Path) -> None:
    fixture = json.loads(path.read_text())
    got = plan_json(plan_of(fixture))
    if REGEN:
        fixture["expected"] = got
        path.write_text(json.dumps(fixture, indent=2) + "\n")
        return
    want = fixture["expected"]
    # Step by step first, so a failure names the step that differs.
    for i, (g, w) in enumerate(zip(got["steps"], want["steps"], strict=False), 1):
        assert g == w, f"{path.name}: step {i} ({w['action']} {w['node']}) differs"
    assert got == want


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.stem)
def test_the_dry_run_prints_every_command_the_plan_starts(path: Path) -> None:
    plan = plan_of(json.loads(path.read_text()))
    lines = format_plan(plan).splitlines()
    starts = [s for s in plan.steps if s.action == "start"]
    assert starts and all(s.process is not None and s.process.shell() in lines for s in starts)
    numbered = [s for s in plan.steps if s.action != "note"]
    assert [ln for ln in lines if re.match(r"# \d+\. ", ln)] == [
        f"# {i}. {s.node}: {s.text}" for i, s in enumerate(numbered, 1)
    ]
    notes = [f"# {s.text}" for s in plan.steps if s.action == "note"]
    assert lines[len(plan.topology) : len(plan.topology) + len(notes)] == notes, "the notes come first"


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.stem)
def test_the_one_executor_carries_out_every_step(path: Path) -> None:
    plan = plan_of(json.loads(path.read_text()))
    assert all(callable(getattr(Executor, "do_" + s.action, None)) for s in plan.steps), [s.action for s in plan.steps]


# What the fixtures must show, said outright (so a regenerated fixture cannot quietly lose it).


def test_local_order_is_gateway_workers_head_after_the_port_checks() -> None:
    actions = [(s["action"], s["node"]) for s in read("local-2workers")["expected"]["steps"]]
    assert actions == [
        ("preflight", "cluster"),
        ("prefill", "w1"),
        ("prefill", "w2"),
        ("check_port", "w1"),
        ("check_port", "w2"),
        ("check_port", "head"),
        ("check_port", "gateway"),
        ("start", "gateway"),
        ("start", "w1"),
        ("start", "w2"),
        ("wait_workers", "cluster"),
        ("rpc_hello", "w1"),
        ("rpc_hello", "w2"),
        ("start", "head"),
        ("wait_ready", "head"),
        ("wait_gateway", "gateway"),
        ("report", "head"),
    ]


def test_the_planners_split_is_on_the_heads_command_line() -> None:
    fixture = read("local-planner-split")
    split = fixture["facts"]["planned_split"]
    assert "tensor_split" not in fixture["spec"].get("server", {})
    assert flag(start_argv(fixture, "head"), "--tensor-split") == ",".join(f"{x:g}" for x in split)
    assert fixture["expected"]["tensor_split"] == split
    assert flag(start_argv(read("local-2workers"), "head"), "--tensor-split") is None


def test_remote_workers_run_the_engine_argv_on_their_host_with_the_copied_engine() -> None:
    fixture = read("ssh-3nodes")
    for name, host, bind in (("spark2", "spark2", "10.20.20.2"), ("spark3", "spark3", "10.20.20.3")):
        (step,) = [s for s in fixture["expected"]["steps"] if s["action"] == "start" and s["node"] == name]
        assert step["host"] == host
        # The plan holds the engine's own argv; the SshNode wraps it when it runs it.
        assert step["argv"][0] == "~/.cache/splitserve/engines/b4000-cpu/ggml-rpc-server"
        assert step["argv"][1:5] == ["-H", bind, "-p", "50052"]
        assert step["log"].startswith("~/.cache/splitserve/clusters/")
    head = start_argv(fixture, "head")
    assert flag(head, "--rpc") == "10.20.20.2:50052,10.20.20.3:50052"
    assert flag(head, "--flash-attn") == "on", "minimax-m3 (from the facts) needs flash attention"
    modes = {s["node"]: s["args"]["mode"] for s in fixture["expected"]["steps"] if s["action"] == "engine"}
    assert modes == {"spark2": "present", "spark3": "copy"}


def test_drop_caches_runs_on_every_host_before_anything_starts() -> None:
    steps = read("ssh-drop-caches")["expected"]["steps"]
    drops = [i for i, s in enumerate(steps) if s["action"] == "drop_caches"]
    assert [steps[i]["node"] for i in drops] == ["local", "spark2"]
    assert max(drops) < min(i for i, s in enumerate(steps) if s["action"] == "start")
    assert all("drop_caches" not in s["action"] for s in read("ssh-2nodes")["expected"]["steps"])


def test_a_taken_gateway_port_moves_the_gateway_to_the_spare_port_and_says_so() -> None:
    fixture = read("gateway-port-taken")
    spare = fixture["facts"]["spare_port"]
    assert flag(start_argv(fixture, "gateway"), "--port") == str(spare)
    assert fixture["expected"]["endpoint"] == f"http://127.0.0.1:{spare}"
    (warn,) = [s for s in fixture["expected"]["steps"] if s["action"] == "warn"]
    assert warn["node"] == "gateway" and warn["text"].startswith(f"port 8000 is taken; the gateway listens on {spare}")


def test_a_stale_run_is_stopped_first() -> None:
    steps = read("stale-earlier-run")["expected"]["steps"]
    assert (steps[0]["action"], steps[0]["node"]) == ("stop_stale", "cluster")
    assert steps[0]["text"].endswith("left running: gateway, head, w1, w2")
    assert all(s["action"] != "stop_stale" for s in read("local-2workers")["expected"]["steps"])


def test_fixture_paths_are_machine_independent() -> None:
    for path in fixture_files():
        text = path.read_text()
        assert sys.executable not in text and "/tmp/" not in text and str(Path.home()) not in text, path.name


def test_a_worker_that_serves_a_replica_runs_no_rpc_server_and_gets_no_prefill() -> None:
    steps = read("replicas-of-2")["expected"]["steps"]
    assert [s["node"] for s in steps if s["action"] == "prefill"] == ["spark2", "spark4"]
    starts = [(s["node"], Path(s["argv"][0]).name) for s in steps if s["action"] == "start"]
    assert ("spark3", "llama-server") in starts and ("spark3", "ggml-rpc-server") not in starts
    (engine,) = [s for s in steps if s["action"] == "engine" and s["node"] == "spark3"]
    assert engine["args"]["server"] is True, "its engine copy includes llama-server"


# vLLM / SGLang (tests/fixtures/plans/launch/): what the steps must show, said outright.


def launch(name: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = json.loads((LAUNCH / f"{name}.json").read_text())["expected"]["steps"]
    return steps


def test_ray_workers_join_once_the_gcs_port_answers_and_vllm_serves_a_token_before_the_gateway() -> None:
    steps = launch("vllm-ray-tp3-3nodes")
    order = [
        (s["action"], s["node"], Path(s.get("argv", [""])[0]).name if s["node"] != "gateway" else "")
        for s in steps
        if s["action"] in ("start", "wait_port", "wait_token", "wait_gateway")
    ]
    assert order == [
        ("start", "head", "ray"),
        ("wait_port", "head", ""),
        ("start", "spark2", "ray"),
        ("start", "spark3", "ray"),
        ("start", "head", "vllm"),
        ("wait_token", "head", ""),
        ("start", "gateway", ""),
        ("wait_gateway", "gateway", ""),
    ]
    actions = [s["action"] for s in steps]
    assert actions[:5] == ["note"] * 5, "the fixes come first"
    last_check = max(i for i, a in enumerate(actions) if a == "check_port")
    assert last_check < actions.index("start"), "every port is checked before anything starts"


def test_the_ray_probe_clears_its_old_report_and_waits_for_every_node() -> None:
    steps = launch("vllm-ray-probe-3nodes")
    actions = [s["action"] for s in steps]
    i = actions.index("clear_report")
    assert steps[i + 1]["action"] == "start" and "splitserve.cluster._ray_probe" in steps[i + 1]["argv"]
    (wait,) = [s for s in steps if s["action"] == "wait_probe"]
    assert wait["args"]["expected"] == 3 and wait["args"]["path"] == steps[i]["args"]["path"]
    assert "wait_token" not in actions and "wait_gateway" not in actions, "the probe serves no engine"


def test_native_and_sglang_start_every_rank_then_wait_for_a_streamed_token() -> None:
    for name, roles in (
        ("vllm-native-tp2-2nodes", ["vllm", "vllm_headless"]),
        ("sglang-tp2-2nodes", ["sglang", "sglang"]),
    ):
        steps = launch(name)
        engine = [s for s in steps if s["action"] == "start" and s["node"] != "gateway"]
        assert [s["process"] for s in engine] == ["head", engine[1]["node"]]
        (token,) = [s for s in steps if s["action"] == "wait_token"]
        endpoint = json.loads((LAUNCH / f"{name}.json").read_text())["expected"]["engine_endpoint"]
        assert endpoint == f"{name.split('-')[0]}+{token['args']['url']}" and "(not /health)" in token["text"]
        assert [s["action"] for s in steps].index("wait_token") > steps.index(engine[-1])
        record = json.loads((LAUNCH / f"{name}.json").read_text())["expected"]["record"]
        assert record["backend"] == name.split("-")[0] and record["notes"]
        assert len(roles) == len(engine)
    assert launch("vllm-native-tp2-2nodes")[0]["action"] == "stop_stale"


def test_each_vllm_replica_waits_for_its_own_token() -> None:
    steps = launch("vllm-replicas-of-2-4nodes")
    tokens = [(s["node"], s["args"]["url"]) for s in steps if s["action"] == "wait_token"]
    assert len(tokens) == 2 and tokens[0][1] != tokens[1][1]
    assert all(s["args"].get("replica") for s in steps if s["action"] == "wait_token")
