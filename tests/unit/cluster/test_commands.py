"""Command lines built from a spec (plans as values)."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve.cluster import launch_plan, parse_spec
from splitserve.engine import Engine


def fake_engine(root: Path, name: str = "eng") -> Engine:
    return Engine(
        root=root / name,
        bin_dir=root / name / "bin",
        provenance={
            "key": name,
            "backend": "cpu",
            "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server"},
        },
    )


@pytest.fixture()
def engines_for(tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(spec, per_node=None):  # type: ignore[no-untyped-def]
        base = fake_engine(tmp_path)
        engines = {"head": base} | {w.name: base for w in spec.workers}
        engines.update(per_node or {})
        return engines

    return make


def spec_dict(**server: object) -> dict:  # type: ignore[type-arg]
    return {
        "name": "t",
        "model": "/models/m.gguf",
        "state_dir": "/tmp/st",
        "workers": [
            {"name": "w1", "bind": "10.0.0.2", "port": 50052, "devices": ["CUDA0"], "threads": 8},
            {"name": "w2", "port": 50053, "cache": False},
        ],
        "server": server,
    }


def test_worker_command_lines(tmp_path: Path, engines_for) -> None:  # type: ignore[no-untyped-def]
    spec = parse_spec(spec_dict())
    plan = launch_plan(spec, engines_for(spec))
    w1, w2 = plan.workers
    rpc = str(tmp_path / "eng" / "bin" / "ggml-rpc-server")
    assert w1.argv == [rpc, "-H", "10.0.0.2", "-p", "50052", "-d", "CUDA0", "-t", "8", "-c"]
    assert w2.argv == [rpc, "-H", "127.0.0.1", "-p", "50053"]
    assert w1.env["LD_LIBRARY_PATH"] == str(tmp_path / "eng" / "bin")
    assert w1.log == Path("/tmp/st/logs/w1.log")


def test_head_command_line_carries_every_option(tmp_path: Path, engines_for) -> None:  # type: ignore[no-untyped-def]
    spec = parse_spec(
        spec_dict(
            ctx_size=65536,
            parallel=2,
            batch=2048,
            ubatch=2048,
            cache_type_k="q8_0",
            cache_type_v="q4_0",
            flash_attn="on",
            tensor_split=[3, 1],
            threads=4,
            extra_args=["--temp", "1.0", "--jinja"],
        )
    )
    argv = launch_plan(spec, engines_for(spec)).head.argv
    assert argv[0].endswith("/eng/bin/llama-server")

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--model") == "/models/m.gguf"
    assert value("--rpc") == "10.0.0.2:50052,127.0.0.1:50053"
    assert value("-ngl") == "999"
    assert value("--split-mode") == "layer"
    assert value("--ctx-size") == "65536"
    assert value("--parallel") == "2"
    assert value("--batch-size") == "2048"
    assert value("--ubatch-size") == "2048"
    assert value("--cache-type-k") == "q8_0"
    assert value("--cache-type-v") == "q4_0"
    assert value("--flash-attn") == "on"
    assert value("--tensor-split") == "3,1"
    assert value("--host") == "127.0.0.1"
    assert argv[-3:] == ["--temp", "1.0", "--jinja"], "extra args go last, untouched"


def test_tensor_split_from_planner_only_when_spec_has_none(tmp_path: Path, engines_for) -> None:  # type: ignore[no-untyped-def]
    spec = parse_spec(spec_dict())
    argv = launch_plan(spec, engines_for(spec), tensor_split=[0.25, 0.75]).head.argv
    assert argv[argv.index("--tensor-split") + 1] == "0.25,0.75"
    spec = parse_spec(spec_dict(tensor_split=[1, 1]))
    argv = launch_plan(spec, engines_for(spec), tensor_split=[0.25, 0.75]).head.argv
    assert argv[argv.index("--tensor-split") + 1] == "1,1"
    spec = parse_spec(spec_dict())
    assert "--tensor-split" not in launch_plan(spec, engines_for(spec)).head.argv


def test_head_devices_listed_after_rpc_devices(tmp_path: Path, engines_for) -> None:  # type: ignore[no-untyped-def]
    data = spec_dict()
    data["head"] = {"devices": ["CUDA0"]}
    spec = parse_spec(data)
    argv = launch_plan(spec, engines_for(spec)).head.argv
    assert argv[argv.index("--device") + 1] == "RPC0,RPC1,CUDA0"


def test_per_node_engine_and_ipv6_endpoint(tmp_path: Path, engines_for) -> None:  # type: ignore[no-untyped-def]
    data = spec_dict()
    data["workers"][1]["bind"] = "::1"
    spec = parse_spec(data)
    other = fake_engine(tmp_path, "other")
    plan = launch_plan(spec, engines_for(spec, {"w2": other}))
    assert plan.workers[1].argv[0] == str(tmp_path / "other" / "bin" / "ggml-rpc-server")
    assert plan.head.argv[plan.head.argv.index("--rpc") + 1] == "10.0.0.2:50052,[::1]:50053"
    assert plan.engine_endpoint == "http://127.0.0.1:8080"
    assert "ggml-rpc-server -H ::1 -p 50053" in plan.workers[1].shell()


def test_gateway_runs_in_front_of_the_head_by_default(engines_for) -> None:  # type: ignore[no-untyped-def]
    spec = parse_spec(spec_dict())
    plan = launch_plan(spec, engines_for(spec))
    gw = plan.gateway
    assert gw is not None and gw.role == "gateway" and gw.host == "local"
    assert [p.node for p in plan.processes] == ["w1", "w2", "head", "gateway"]
    assert plan.endpoint == "http://127.0.0.1:8000"
    assert plan.engine_endpoint == "http://127.0.0.1:8080"
    assert gw.argv[1:4] == ["-m", "splitserve", "serve"]
    assert gw.argv[gw.argv.index("--engine") + 1] == "http://127.0.0.1:8080"
    assert gw.argv[gw.argv.index("--host") + 1] == "127.0.0.1"
    assert gw.argv[gw.argv.index("--port") + 1] == "8000"
    assert "--model-format" not in gw.argv  # detected from the template by the gateway
    assert gw.log.name == "gateway.log" and gw.log.parent == plan.head.log.parent
    # The port `up` picked when 8000 is taken.
    assert launch_plan(spec, engines_for(spec), gateway_port=8123).endpoint == "http://127.0.0.1:8123"


def test_gateway_options_and_keys_stay_out_of_argv(tmp_path: Path, engines_for) -> None:  # type: ignore[no-untyped-def]
    data = spec_dict(api_key="engine-secret", chat_template_file="/t/server.jinja")
    data["gateway"] = {
        "host": "10.0.0.1",
        "port": 9000,
        "model_format": "minimax-m3",
        "api_key": "client-secret",
        "model_name": "m3",
        "max_concurrent": 4,
        "max_queue": 2,
        "extra_args": ["--log-level", "info"],
    }
    spec = parse_spec(data)
    gw = launch_plan(spec, engines_for(spec)).gateway
    assert gw is not None
    argv = gw.argv
    assert argv[argv.index("--model-format") + 1] == "minimax-m3"
    assert argv[argv.index("--chat-template") + 1] == "/t/server.jinja"  # the server's template by default
    assert argv[argv.index("--model-name") + 1] == "m3"
    assert argv[argv.index("--max-concurrent") + 1] == "4" and argv[argv.index("--max-queue") + 1] == "2"
    assert argv[-2:] == ["--log-level", "info"]
    assert not any("secret" in a for a in argv)
    assert gw.env["SPLITSERVE_API_KEY"] == "client-secret"
    assert gw.env["SPLITSERVE_ENGINE_API_KEY"] == "engine-secret"
    # Secrets never reach a log header or --dry-run.
    plan = launch_plan(spec, engines_for(spec))
    assert "secret" not in gw.shell() and "secret" not in plan.head.shell()
    assert "--api-key '***'" in plan.head.shell() or "--api-key ***" in plan.head.shell()


def test_gateway_disabled_serves_llama_server_directly(engines_for) -> None:  # type: ignore[no-untyped-def]
    data = spec_dict()
    data["gateway"] = {"enabled": False}
    spec = parse_spec(data)
    plan = launch_plan(spec, engines_for(spec))
    assert plan.gateway is None
    assert [p.node for p in plan.processes] == ["w1", "w2", "head"]
    assert plan.endpoint == plan.engine_endpoint == "http://127.0.0.1:8080"
