"""Cluster spec validation: good files load, each mistake names the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve import SpecError
from splitserve.cluster import load_spec, parse_spec
from splitserve.cluster._spec import check_files

GOOD = """
name = "m3"
model = "models/m3.gguf"

[[workers]]
name = "w1"
bind = "10.20.20.2"
port = 50052
devices = ["CUDA0"]

[[workers]]
name = "w2"
port = 50053

[server]
ctx_size = 65536
ubatch = 2048
batch = 2048
cache_type_k = "q8_0"
cache_type_v = "q8_0"
flash_attn = "on"
tensor_split = [1, 1]
extra_args = ["--temp", "1.0", "--top-k", "40"]
"""


def write(tmp_path: Path, text: str, name: str = "cluster.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_spec_loads_and_resolves_model_relative_to_file(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.name == "m3"
    assert spec.model == (tmp_path / "models" / "m3.gguf").resolve()
    assert [w.name for w in spec.workers] == ["w1", "w2"]
    assert spec.workers[0].bind == "10.20.20.2"
    assert spec.workers[1].bind == "127.0.0.1"
    assert spec.workers[0].cache is True
    assert spec.server.ubatch == 2048
    assert spec.server.extra_args == ["--temp", "1.0", "--top-k", "40"]
    assert spec.server.host == "127.0.0.1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('model = "m.gguf"\n[[workers]]\nname = "w1"\nport = 70000\n', "workers[w1].port"),
        ('model = "m.gguf"\n[[workers]]\nname = "w1"\nbogus = 1\n', "workers[w1].bogus: unknown key"),
        ('[[workers]]\nname = "w1"\n', "model: required key is missing"),
        ('model = "m.gguf"\nworkers = []\n', "workers"),
        ('model = "m.gguf"\n[[workers]]\nname = "w1"\n[server]\ncache_type_k = "q3"\n', "server.cache_type_k"),
        ('model = "m.gguf"\n[[workers]]\nname = "w1"\n[server]\nflash_attn = "yes"\n', "'on', 'off' or 'auto'"),
        (
            'model = "m.gguf"\n[[workers]]\nname = "w1"\n[[workers]]\nname = "w1"\nport = 1\n',
            "worker names must be unique; repeated: w1",
        ),
        (
            'model = "m.gguf"\n[[workers]]\nname = "a"\n[[workers]]\nname = "b"\n',
            "two workers listen on the same address: 127.0.0.1:50052",
        ),
        (
            'model = "m.gguf"\n[[workers]]\nname = "w1"\n[server]\ntensor_split = [1, 2, 3]\n',
            "tensor_split has 3 entries; expected 1",
        ),
        ('model = "m.gguf"\n[[workers]]\nname = "w1"\nbind = "box2"\n', "must be an IP address"),
        ('model = "m.gguf"\n[[workers]]\nname = "bad name"\n', "workers[bad name].name"),
        ('model = "m.gguf"\n[[workers]]\nname = "w1"\n[server]\nctx_size = "big"\n', "server.ctx_size"),
        ("model = \n", "not valid TOML"),
        (
            'model = "m.gguf"\n[[workers]]\nname = "w1"\n[server]\nport = 9000\n[gateway]\nport = 9000\n',
            "gateway.port = 9000 is also server.port",
        ),
        (
            'model = "m.gguf"\n[[workers]]\nname = "w1"\nport = 9001\n[gateway]\nport = 9001\n',
            "gateway.port = 9001 is also a local worker's port",
        ),
        (
            'model = "m.gguf"\n[[workers]]\nname = "w1"\n[gateway]\nmodel_format = "nope"\n',
            "gateway.model_format: unknown tool-call format 'nope'; known: plain, minimax-m3",
        ),
        ('model = "m.gguf"\n[[workers]]\nname = "w1"\n[gateway]\nmax_concurrent = 0\n', "gateway.max_concurrent"),
        ('model = "m.gguf"\n[[workers]]\nname = "w1"\n[gateway]\nbogus = 1\n', "gateway.bogus: unknown key"),
        (
            'model = "m.gguf"\n[[workers]]\nname = "w1"\n[gateway]\nhost = "box2"\n',
            "gateway.host: must be an IP address (the interface the gateway listens on)",
        ),
    ],
)
def test_bad_spec_names_file_key_and_rule(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(str(path.resolve()) if "TOML" not in expected else str(path))
    assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize(("bind", "problem"), [("0.0.0.0", "a wildcard address"), ("8.8.8.8", "a public address")])
def test_public_rpc_refused_by_up_unless_allowed(tmp_path: Path, bind: str, problem: str) -> None:
    from splitserve.cluster import up
    from splitserve.cluster._spec import check_binds

    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    path = write(tmp_path, f'model = "m.gguf"\n[[workers]]\nname = "w1"\nbind = "{bind}"\n')
    spec = load_spec(path)  # loads: `preflight` must be able to show the failing bind row
    for refuse in (check_binds, up):
        with pytest.raises(SpecError) as info:
            refuse(spec)  # type: ignore[operator]
        msg = str(info.value)
        assert msg.startswith(str(path)) and f"workers[w1].bind = '{bind}' is {problem}" in msg
        assert "allow_public_rpc = true" in msg and "\n" not in msg
    allowed = load_spec(
        write(
            tmp_path,
            f'model = "m.gguf"\nallow_public_rpc = true\n[[workers]]\nname = "w1"\nbind = "{bind}"\n',
            "ok.toml",
        )
    )
    check_binds(allowed)


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such cluster spec file"):
        load_spec(tmp_path / "nope.toml")


def test_missing_model_is_reported_at_launch_with_the_key(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    with pytest.raises(SpecError, match=r"cluster\.toml: model: .*m3\.gguf does not exist"):
        check_files(spec)


def test_tensor_split_counts_worker_devices_then_head_devices() -> None:
    data = {
        "model": "/m.gguf",
        "head": {"devices": ["CUDA0"]},
        "workers": [{"name": "w1", "devices": ["CUDA0", "CUDA1"]}, {"name": "w2", "port": 2}],
        "server": {"tensor_split": [1, 1, 1, 1]},
    }
    assert parse_spec(data).server.tensor_split == [1, 1, 1, 1]
    data["server"] = {"tensor_split": [1, 1, 1]}
    with pytest.raises(SpecError, match="expected 4"):
        parse_spec(data)


def test_gateway_table_defaults_and_relative_paths(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.gateway.enabled and (spec.gateway.host, spec.gateway.port) == ("127.0.0.1", None)
    text = GOOD + '\n[gateway]\nchat_template_file = "t/m3.jinja"\nkeys_file = "keys.txt"\n'
    spec = load_spec(write(tmp_path, text))
    assert spec.gateway.chat_template_file == (tmp_path / "t" / "m3.jinja").resolve()
    assert spec.gateway.keys_file == (tmp_path / "keys.txt").resolve()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m3.gguf").write_bytes(b"GGUF")
    with pytest.raises(SpecError, match=r"cluster\.toml: gateway\.chat_template_file: .*m3\.jinja does not exist"):
        check_files(spec)


def test_up_refuses_a_gateway_beyond_loopback_without_a_key(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from splitserve.cluster import up

    monkeypatch.delenv("SPLITSERVE_API_KEY", raising=False)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    path = write(tmp_path, 'model = "m.gguf"\n[[workers]]\nname = "w1"\n[gateway]\nhost = "0.0.0.0"\n')
    with pytest.raises(SpecError) as info:
        up(load_spec(path))  # refused before any engine is looked up or process started
    assert "gateway.host = '0.0.0.0' is beyond loopback: set gateway.api_key or gateway.keys_file" in str(info.value)


def test_model_may_be_the_folder_fetch_wrote(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "Q4_K_M"
    folder.mkdir(parents=True)
    for i in (1, 2):
        (folder / f"m3-0000{i}-of-00002.gguf").write_bytes(b"GGUF")
    text = GOOD.replace('model = "models/m3.gguf"', 'model = "models"')
    assert load_spec(write(tmp_path, text)).model == folder / "m3-00001-of-00002.gguf"
    (tmp_path / "models" / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(SpecError, match=r"cluster\.toml: model: .*2 models in this folder"):
        load_spec(write(tmp_path, text))
