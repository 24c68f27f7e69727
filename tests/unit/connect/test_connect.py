"""``splitserve connect``: the pure builders (every generated TOML/JSON/YAML parses and says
what each client needs), writing into a throwaway home where each client reads its files,
discovery from a real gateway over the scripted engine, and the CLI."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import splitserve.cli._connect  # noqa: F401  (registers the command with the lazy app)
from splitserve._errors import UsageError
from splitserve.cli._app import app
from splitserve.connect import (
    CLIENTS,
    KEY_ENV,
    PLACEHOLDER_KEY,
    Endpoint,
    claude_code_settings,
    connect_config,
    discover,
    write_setup,
)

EP = Endpoint(url="http://127.0.0.1:8000/v1", model="qwen3-coder-30b", context=65536, api_key="sk-local")
NOKEY = Endpoint(url="http://127.0.0.1:8000", model="smollm2", context=8192)


def test_claude_code_env_points_at_the_gateway_with_the_served_context() -> None:
    s = connect_config("claude-code", EP)
    env = s.env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000"  # the client adds /v1/messages
    assert env["ANTHROPIC_AUTH_TOKEN"] == "sk-local" and "ANTHROPIC_API_KEY" not in env
    for var in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL"):
        assert env[var] == "qwen3-coder-30b"
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "65536"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "16384"  # a quarter of the context
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS" not in env  # the shorter first prompt (see docs)
    assert connect_config("claude-code", EP, disable_betas=True).env["CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS"] == "1"
    settings = json.loads(s.files[".claude/settings.json"])
    assert settings == {"env": env}
    assert "export ANTHROPIC_BASE_URL=http://127.0.0.1:8000\n" in s.shell()


def test_output_cap_is_claude_codes_default_at_most_and_fits_a_small_context() -> None:
    assert connect_config("claude-code", NOKEY).env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "2048"
    big = Endpoint(url="http://h:1", model="m", context=1_000_000)
    assert connect_config("claude-code", big).env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "32000"
    unknown = Endpoint(url="http://h:1", model="m")
    env = connect_config("claude-code", unknown).env
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS" not in env and env["ANTHROPIC_AUTH_TOKEN"] == PLACEHOLDER_KEY


def test_claude_code_settings_merge_keeps_the_users_other_keys() -> None:
    old = json.dumps({"permissions": {"allow": ["Bash(ls)"]}, "env": {"FOO": "1", "ANTHROPIC_MODEL": "old"}})
    merged = json.loads(claude_code_settings({"ANTHROPIC_MODEL": "new"}, old))
    assert merged == {"permissions": {"allow": ["Bash(ls)"]}, "env": {"FOO": "1", "ANTHROPIC_MODEL": "new"}}
    with pytest.raises(UsageError, match="not a JSON object"):
        claude_code_settings({}, "[1, 2]")


def test_codex_config_is_a_responses_provider_with_a_freeform_apply_patch_catalog() -> None:
    s = connect_config("codex", EP, home="/home/u")
    cfg = tomllib.loads(s.files[".codex/config.toml"])
    assert cfg["model"] == "qwen3-coder-30b" and cfg["model_provider"] == "splitserve"
    provider = cfg["model_providers"]["splitserve"]
    assert provider == {
        "name": "splitserve",
        "base_url": "http://127.0.0.1:8000/v1",
        "wire_api": "responses",
        "env_key": KEY_ENV,
    }
    assert cfg["model_context_window"] == 65536
    assert cfg["model_catalog_json"] == "/home/u/.codex/splitserve-models.json"
    (entry,) = json.loads(s.files[".codex/splitserve-models.json"])["models"]
    assert entry["slug"] == "qwen3-coder-30b"
    assert entry["apply_patch_tool_type"] == "freeform"
    assert entry["context_window"] == 65536
    assert s.env == {KEY_ENV: "sk-local"}
    # no key on the gateway: no env_key (Codex would refuse to start without the variable)
    assert (
        "env_key"
        not in tomllib.loads(connect_config("codex", NOKEY).files[".codex/config.toml"])["model_providers"][
            "splitserve"
        ]
    )


def test_opencode_config_is_an_openai_compatible_provider() -> None:
    cfg = json.loads(connect_config("opencode", EP).files[".config/opencode/opencode.json"])
    provider = cfg["provider"]["splitserve"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8000/v1", "apiKey": "{env:SPLITSERVE_API_KEY}"}
    assert provider["models"]["qwen3-coder-30b"]["limit"] == {"context": 65536, "output": 16384}
    assert cfg["model"] == "splitserve/qwen3-coder-30b"


def test_aider_config_metadata_and_settings_parse_and_agree() -> None:
    s = connect_config("aider", EP, home="/home/u")
    conf = yaml.safe_load(s.files[".aider.conf.yml"])
    assert conf["openai-api-base"] == "http://127.0.0.1:8000/v1"
    assert conf["openai-api-key"] == "sk-local"
    assert conf["model"] == "openai/qwen3-coder-30b"
    assert conf["model-metadata-file"] == "/home/u/.aider.model.metadata.json"
    meta = json.loads(s.files[".aider.model.metadata.json"])
    assert meta["openai/qwen3-coder-30b"]["max_input_tokens"] == 65536
    (settings,) = yaml.safe_load(s.files[".aider.model.settings.yml"])
    assert settings["name"] == "openai/qwen3-coder-30b" and settings["edit_format"] == "diff"
    assert s.env["OPENAI_API_BASE"] == "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        (Endpoint(url="127.0.0.1:8000", model="m"), "http"),
        (Endpoint(url="http://h:1", model='a"b'), "quote"),
        (Endpoint(url="http://h:1", model="m", context=0), "positive"),
    ],
)
def test_bad_endpoints_are_one_line_errors(endpoint: Endpoint, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        connect_config("codex", endpoint)
    with pytest.raises(UsageError, match="one of claude-code, codex, opencode, aider"):
        connect_config("cursor", EP)


def test_write_into_a_home_puts_each_file_where_its_client_reads_it(tmp_path: Path) -> None:
    where = {
        "claude-code": [".claude/settings.json"],
        "codex": [".codex/config.toml", ".codex/splitserve-models.json"],
        "opencode": [".config/opencode/opencode.json"],
        "aider": [".aider.conf.yml", ".aider.model.metadata.json", ".aider.model.settings.yml"],
    }
    for client in CLIENTS:
        home = tmp_path / client
        written = write_setup(connect_config(client, EP, home=str(home)), home)
        assert sorted(p.relative_to(home).as_posix() for p in written) == sorted(where[client])
    codex = tomllib.loads((tmp_path / "codex/.codex/config.toml").read_text())
    assert Path(codex["model_catalog_json"]).is_file()  # the catalog path it names exists
    aider = yaml.safe_load((tmp_path / "aider/.aider.conf.yml").read_text())
    assert Path(aider["model-settings-file"]).is_file()
    assert os.stat(tmp_path / "claude-code/.claude/settings.json").st_mode & 0o077 == 0


def test_write_merges_an_existing_claude_settings_file(tmp_path: Path) -> None:
    path = tmp_path / ".claude/settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"theme": "dark"}))
    write_setup(connect_config("claude-code", EP), tmp_path)
    data = json.loads(path.read_text())
    assert data["theme"] == "dark" and data["env"]["ANTHROPIC_MODEL"] == "qwen3-coder-30b"


# -- discovery and the CLI against a real gateway on the scripted engine --------------------


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The gateway app over a FakeEngine, reached through httpx's ASGI transport by the
    module's ``httpx.get`` (the discovery's one request)."""
    import anyio
    import httpx

    from splitserve.engine import FakeEngine
    from splitserve.gateway import GatewayConfig, KeyRing, create_app

    engine = FakeEngine(
        props={
            "chat_template": "{{ messages }}",
            "model_path": "/models/Tiny-Model.gguf",
            "default_generation_settings": {"n_ctx": 12288},
            "total_slots": 1,
        }
    )
    app = create_app(GatewayConfig(engine_url="fake://", keys=KeyRing.build("sk-local")), engine)
    seen: list[httpx.Request] = []

    def get(url: str, headers: dict[str, str] | None = None, timeout: float = 0) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as c:
                r = await c.get(url, headers=headers)
                seen.append(r.request)
                await r.aread()
                return r

        return anyio.run(go)

    monkeypatch.setattr(httpx, "get", get)
    return seen


def test_discover_reads_the_served_model_and_context(gateway: Any) -> None:
    ep = discover("http://127.0.0.1:8000", None, api_key="sk-local")
    assert (ep.model, ep.context, ep.api_key) == ("Tiny-Model", 12288, "sk-local")
    assert gateway[0].url.path == "/v1/models"
    with pytest.raises(UsageError, match="key was refused"):
        discover("http://127.0.0.1:8000", None, api_key="wrong")
    with pytest.raises(UsageError, match="exactly one of --url"):
        discover(None, None)


def test_cli_prints_and_writes_a_codex_setup(gateway: Any, tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["connect", "codex", "--url", "http://127.0.0.1:8000", "--api-key", "sk-local"])
    assert r.exit_code == 0, r.output
    assert 'wire_api = "responses"' in r.output and "export SPLITSERVE_API_KEY=sk-local" in r.output
    assert (
        f'model_catalog_json = "{Path.home()}/.codex/splitserve-models.json"' in r.output
    )  # an absolute path, not "~"
    r = runner.invoke(
        app,
        [
            "connect",
            "codex",
            "--url",
            "http://127.0.0.1:8000",
            "--api-key",
            "sk-local",
            "--write",
            "--home",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    cfg = tomllib.loads((tmp_path / ".codex/config.toml").read_text())
    assert cfg["model_context_window"] == 12288 and cfg["model"] == "Tiny-Model"
    r = runner.invoke(app, ["connect", "claude-code", "--url", "http://127.0.0.1:8000", "--api-key", "bad"])
    assert r.exit_code != 0 and "key was refused" in r.output


def test_cli_write_without_home_uses_a_throwaway_one(gateway: Any) -> None:
    r = CliRunner().invoke(
        app, ["connect", "claude-code", "--url", "http://127.0.0.1:8000", "--api-key", "sk-local", "--write"]
    )
    assert r.exit_code == 0, r.output
    home = next(line.split(": ", 1)[1] for line in r.output.splitlines() if line.startswith("home: "))
    settings = json.loads((Path(home) / ".claude/settings.json").read_text())
    assert settings["env"]["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "12288"


def _spec(tmp_path: Path) -> Path:
    (tmp_path / "m.gguf").touch()
    spec = tmp_path / "cluster.toml"
    spec.write_text(
        f'name = "cc"\nmodel = "{tmp_path}/m.gguf"\nstate_dir = "{tmp_path}/state"\n\n'
        '[gateway]\napi_key = "sk-local"\n\n[[workers]]\nname = "w1"\nhost = "local"\n'
    )
    return spec


def test_discover_from_a_spec_uses_the_running_clusters_endpoint_and_key(gateway: Any, tmp_path: Path) -> None:
    from splitserve._errors import NotRunningError
    from splitserve.cluster import ClusterState
    from splitserve.cluster._state import write_state

    spec = _spec(tmp_path)
    with pytest.raises(NotRunningError, match="not running"):
        discover(None, spec)
    write_state(
        tmp_path / "state",
        ClusterState(name="cc", spec_file=str(spec), model="/m.gguf", endpoint="http://127.0.0.1:8123", engine="x"),
    )
    ep = discover(None, spec)  # the key comes from the spec's [gateway]
    assert (ep.root, ep.model, ep.context, ep.api_key) == ("http://127.0.0.1:8123", "Tiny-Model", 12288, "sk-local")
    assert str(gateway[-1].url) == "http://127.0.0.1:8123/v1/models"
