"""A 401 says auth, in one line, whatever command and step meets it: doctor tools (the model
listing and, with --model, the first probe), eval run, bench speed and tune, each against a real
gateway with a key (uvicorn on loopback, in front of the FakeEngine)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import serve_app
from splitserve._errors import AUTH_FIX, AuthError
from splitserve.engine import FakeEngine, FakeOutput
from splitserve.gateway import GatewayConfig, create_app
from splitserve.gateway._auth import KeyRing, hash_key

KEY = "sk-right-key"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "eval" / "toolery"


def engine() -> FakeEngine:
    def output(body: dict[str, Any]) -> FakeOutput:
        return FakeOutput(["Hi", " there"], final={"tokens_predicted": 2, "tokens_evaluated": 5})

    return FakeEngine(
        output,
        props={
            "chat_template": "{{ messages }}",
            "model_path": "/m/smol.gguf",
            "default_generation_settings": {"n_ctx": 2048},
            "total_slots": 1,
        },
    )


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    config = GatewayConfig(engine_url="http://engine", model_format="hermes", keys=KeyRing({hash_key(KEY): "alice"}))
    with serve_app(create_app(config, engine())) as url:
        yield url


def cli(*args: str, key: str | None = None, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPLITSERVE_API_KEY"}
    if key is not None:
        env["SPLITSERVE_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "splitserve", *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp
    )


def assert_auth_line(res: subprocess.CompletedProcess[str]) -> None:
    assert res.returncode != 0, res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and "splitserve: error:" in ln]
    assert len(lines) == 1, res.stderr
    assert lines[0].endswith(AUTH_FIX), res.stderr
    assert "Traceback" not in res.stderr and "KeyError" not in res.stderr, res.stderr


@pytest.mark.parametrize("extra", [[], ["--model", "smol"]], ids=["model-listing", "first-probe"])
def test_doctor_tools(gateway: str, extra: list[str], tmp_path: Path) -> None:
    res = cli("doctor", "tools", "--url", gateway, *extra, tmp=tmp_path)
    assert_auth_line(res)
    assert res.stdout == ""  # no table of eight 401 rows


def test_doctor_tools_with_the_key_from_the_environment_gets_past_auth(gateway: str, tmp_path: Path) -> None:
    res = cli("doctor", "tools", "--url", gateway, "--json", "--timeout", "30", key=KEY, tmp=tmp_path)
    assert AUTH_FIX not in res.stderr, res.stderr
    import json

    report = json.loads(res.stdout)  # --json: the report on stdout
    assert report["model"] and all(c["http_status"] == 200 for c in report["checks"]), report


def test_doctor_tools_with_a_wrong_key(gateway: str, tmp_path: Path) -> None:
    assert_auth_line(cli("doctor", "tools", "--url", gateway, "--api-key", "sk-wrong", tmp=tmp_path))


def test_eval_run(gateway: str, tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    res = cli("eval", "run", str(FIXTURES), "--url", gateway, "--limit", "1", "-o", str(tmp_path / "run"), tmp=tmp_path)
    assert_auth_line(res)


def test_eval_run_with_a_model_fails_at_the_first_completion_the_same_way(gateway: str, tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    res = cli(
        "eval",
        "run",
        str(FIXTURES),
        "--url",
        gateway,
        "--model",
        "smol",
        "--limit",
        "1",
        "-o",
        str(tmp_path / "run"),
        "--api-key",
        "sk-wrong",
        tmp=tmp_path,
    )
    assert_auth_line(res)


def test_bench_speed(gateway: str, tmp_path: Path) -> None:
    res = cli("bench", "speed", "--url", gateway, "--repeat", "1", "-o", str(tmp_path / "b.json"), tmp=tmp_path)
    assert_auth_line(res)


def test_bench_speed_with_a_model_fails_at_the_first_request_the_same_way(gateway: str, tmp_path: Path) -> None:
    res = cli(
        "bench",
        "speed",
        "--url",
        gateway,
        "--model",
        "smol",
        "--repeat",
        "1",
        "--api-key",
        "sk-wrong",
        "-o",
        str(tmp_path / "b.json"),
        tmp=tmp_path,
    )
    assert_auth_line(res)


class GatewayRestarter:
    """Tune's restarter with the keyed gateway as every point's cluster (no key sent)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.started = 0

    def start(self, values: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        from splitserve.bench import Target

        self.started += 1
        return Target(url=self.url), {"server": values}

    def finish(self) -> str:
        return "the gateway stays"


def test_tune_stops_at_the_first_401_instead_of_scoring_every_point(gateway: str, tmp_path: Path) -> None:
    from splitserve.bench import SpeedOptions
    from splitserve.bench._tune import Axis, TuneOptions, run_tune
    from splitserve.cluster import load_spec

    spec = tmp_path / "cluster.toml"
    spec.write_text('name = "fake"\nmodel = "/m.gguf"\n\n[[workers]]\nname = "w1"\n\n[server]\nport = 8080\n')
    restarter = GatewayRestarter(gateway)
    opts = SpeedOptions(prompt_tokens=[20], gen_tokens=4, concurrency=[1], repeat=1)
    with pytest.raises(AuthError) as info:
        run_tune(
            restarter,
            load_spec(spec),
            [Axis("ubatch", (128, 512))],
            {"ubatch": 512},
            opts,  # type: ignore[arg-type]
            TuneOptions(min_gain=0.02),
            lambda p: None,
            tmp_path / "tune.json",
        )
    assert str(info.value).endswith(AUTH_FIX)
    assert restarter.started == 1
