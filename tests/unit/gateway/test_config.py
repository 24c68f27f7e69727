"""One list of gateway settings: the spec's ``[gateway]`` table, ``splitserve serve``'s flags and
``GatewayConfig`` are the same fields (``cluster.GatewaySettings``), with one-line errors for bad
values in each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from splitserve._errors import SpecError, UsageError
from splitserve.cli import _gateway  # noqa: F401  (registers serve)
from splitserve.cli._app import app
from splitserve.cluster import GatewaySettings, GatewaySpec, load_spec
from splitserve.cluster._commands import gateway_plan
from splitserve.gateway import GatewayConfig, KeyRing

KEY = "sk-config-test"


def _spec(tmp_path: Path, gateway: str) -> Path:
    (tmp_path / "m.gguf").write_bytes(b"")
    path = tmp_path / "c.toml"
    path.write_text(
        f'model = "m.gguf"\n[[workers]]\nname = "w1"\n[server]\napi_key = "sk-engine"\n[gateway]\n{gateway}'
    )
    return path


def _serve_config(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> GatewayConfig:
    """The GatewayConfig ``splitserve serve ARGV`` would serve (uvicorn not started)."""
    seen: list[GatewayConfig] = []
    monkeypatch.setattr("splitserve.gateway.serve", lambda config, **_kw: seen.append(config))
    res = CliRunner().invoke(app, argv, env=env)
    assert res.exit_code == 0, res.output
    [config] = seen
    return config


def test_the_spec_table_and_the_serve_flags_give_the_same_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t.jinja").write_text("{{ messages }}")
    spec = load_spec(
        _spec(
            tmp_path,
            f'host = "127.0.0.1"\nport = 8123\napi_key = "{KEY}"\nmodel_format = "hermes"\n'
            'chat_template_file = "t.jinja"\nmodel_name = "m"\nmax_concurrent = 3\nmax_queue = 0\n'
            "restore_reasoning = false\nstrict_model_names = true\nmax_body_bytes = 4096\n"
            "max_header_bytes = 2048\nmax_headers = 20\nheader_timeout = 2.5\nbody_timeout = 7\n"
            'keep_alive_timeout = 1.5\nroute = "least-loaded"\n',
        )
    )
    plan = gateway_plan(spec, "http://127.0.0.1:8080", tmp_path / "gateway.log")
    assert plan.argv[3] == "serve" and KEY not in plan.argv  # the key travels in the environment
    served = _serve_config(plan.argv[3:], plan.env, monkeypatch)
    table = spec.gateway.model_dump(exclude={"enabled", "extra_args"})
    expected = GatewayConfig(engine_url="http://127.0.0.1:8080", engine_api_key="sk-engine", **table)
    assert served == expected
    assert served.keys.check(f"Bearer {KEY}") == "default" and served.chat_template == "{{ messages }}"
    assert (served.port, served.max_queue, served.route, served.header_timeout) == (8123, 0, "least-loaded", 2.5)


def test_defaults_are_the_same_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(_spec(tmp_path, ""))
    plan = gateway_plan(spec, "http://127.0.0.1:8080", tmp_path / "gateway.log", port=8000)
    assert plan.argv[4:] == [
        "--engine",
        "http://127.0.0.1:8080",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--max-concurrent",
        "16",
        "--max-queue",
        "64",
    ]
    served = _serve_config(["serve", "--engine", "http://127.0.0.1:8080"], {}, monkeypatch)
    assert served == GatewayConfig(engine_url="http://127.0.0.1:8080")
    assert served.model_dump(include=set(GatewaySettings.model_fields)) == GatewaySettings().model_dump()


def test_every_setting_is_a_serve_flag() -> None:
    command: Any = typer.main.get_command(app)
    serve = command.commands["serve"]
    flags = {opt for p in serve.params for opt in [*p.opts, *p.secondary_opts]}
    flipped: dict[str, Any] = {
        n: not f.default for n, f in GatewaySettings.model_fields.items() if f.annotation is bool
    }
    argv = GatewaySettings(
        model_format="hermes",
        chat_template_file=Path("t"),
        keys_file=Path("k"),
        model_name="m",
        max_body_bytes=1,
        max_header_bytes=2000,
        max_headers=9,
        header_timeout=1,
        body_timeout=1,
        keep_alive_timeout=1,
        route="round-robin",
        **flipped,
    ).serve_args()
    given = {a for a in argv if a.startswith("--")}
    assert given <= flags
    assert len(given) == len(GatewaySettings.model_fields) - 1  # all but api_key (environment)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("port = 99999\n", "gateway.port: a TCP port is 1 to 65535"),
        ('route = "nope"\n', "gateway.route: choose affinity, round-robin or least-loaded"),
        ("max_headers = 4\n", "gateway.max_headers: Input should be greater than or equal to 8"),
        ("header_timeout = 0\n", "gateway.header_timeout: Input should be greater than 0"),
        ('host = "gateway.example"\n', "gateway.host: must be an IP address"),
        ('model_format = "nope"\n', "gateway.model_format: unknown tool-call format 'nope'"),
        ("prot = 8000\n", "gateway.prot: unknown key in [gateway]; did you mean port"),
    ],
)
def test_bad_spec_values_name_the_file_and_key(tmp_path: Path, table: str, message: str) -> None:
    path = _spec(tmp_path, table)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path.resolve()}: ") and message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "99999"], "--port 99999: a TCP port is 1 to 65535"),
        (["--route", "nope"], "--route nope: choose affinity, round-robin or least-loaded"),
        (["--max-headers", "4"], "--max-headers 4: Input should be greater than or equal to 8"),
        (["--max-queue", "-1"], "--max-queue -1: Input should be greater than or equal to 0"),
        (["--keep-alive-timeout", "0"], "--keep-alive-timeout 0.0: Input should be greater than 0"),
        (["--host", "gateway.example"], "--host gateway.example: must be an IP address"),
        (["--model-format", "nope"], "--model-format nope: unknown tool-call format 'nope'"),
    ],
)
def test_bad_serve_flags_are_one_line_errors(argv: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["serve", "--engine", "http://127.0.0.1:1", *argv])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and message in lines[0], res.output
    assert "gateway on" not in res.output


def test_keys_and_template_come_from_their_files_unless_given(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.txt"
    from splitserve.gateway import add_key

    alice = add_key(keys_file, "alice")
    config = GatewayConfig(engine_url="fake://", api_key=KEY, keys_file=keys_file)
    assert config.keys.check(f"Bearer {alice}") == "alice" and config.keys.check(f"Bearer {KEY}") == "default"
    given = KeyRing({})
    assert GatewayConfig(engine_url="fake://", api_key=KEY, keys=given).keys is given
    assert not GatewayConfig(engine_url="fake://").keys.enabled
    with pytest.raises(UsageError, match="cannot read the chat template"):
        GatewayConfig(engine_url="fake://", chat_template_file=tmp_path / "missing.jinja")
    assert (
        GatewayConfig(engine_url="fake://", chat_template="x", chat_template_file=tmp_path / "m").chat_template == "x"
    )
    assert KEY not in repr(GatewayConfig(engine_url="fake://", api_key=KEY))


def test_the_spec_only_keys_are_not_serve_settings() -> None:
    extra: dict[str, Any] = {"enabled": False, "extra_args": ["--http", "h11"]}
    assert GatewaySpec(**extra).port is None  # `up` picks 8000 or a free port
    with pytest.raises(UsageError, match="--enabled"):
        GatewayConfig.from_flags(engine_url="http://x", enabled=False)
