"""llama-server beyond loopback needs a key, as the gateway does: `up` refuses (one line naming
server.host / server.api_key and the fix, before anything starts) and preflight shows a failing row."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve import SpecError
from splitserve.cluster import load_spec, up
from splitserve.cluster._preflight import _auth_rows
from splitserve.cluster._spec import check_server_auth


def _spec(tmp_path: Path, server: str, gateway: str = "") -> Path:
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    path = tmp_path / "c.toml"
    path.write_text(f'model = "m.gguf"\n[[workers]]\nname = "w1"\n[server]\n{server}\n[gateway]\n{gateway}\n')
    return path


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "8.8.8.8", "head.lan"])
def test_beyond_loopback_without_a_key_is_refused_before_anything_starts(tmp_path: Path, host: str) -> None:
    path = _spec(tmp_path, f'host = "{host}"')
    spec = load_spec(path)  # loads: `preflight` must be able to show the failing row
    for refuse in (check_server_auth, up):
        with pytest.raises(SpecError) as info:
            refuse(spec)  # type: ignore[operator]
        msg = str(info.value)
        assert msg.startswith(str(path)) and f"server.host = '{host}' is beyond loopback" in msg
        assert "set server.api_key" in msg and 'server.host = "127.0.0.1"' in msg and "\n" not in msg
    rows = {r.node: r for r in _auth_rows(spec)}
    assert rows["head"].status == "fail" and "without a key" in rows["head"].message
    assert "server.api_key" in rows["head"].fix


@pytest.mark.parametrize(
    "server",
    [
        'api_key = "s3cret"',
        'extra_args = ["--api-key", "s3cret"]',
        'extra_args = ["--api-key-file", "/etc/keys"]',
        'env = { LLAMA_API_KEY = "k" }',
    ],
)
def test_beyond_loopback_with_a_key_is_accepted(tmp_path: Path, server: str) -> None:
    spec = load_spec(_spec(tmp_path, f'host = "0.0.0.0"\n{server}'))
    check_server_auth(spec)
    rows = {r.node: r for r in _auth_rows(spec)}
    assert rows["head"].status == "pass" and "with a key" in rows["head"].message


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_no_key(tmp_path: Path, host: str) -> None:
    spec = load_spec(_spec(tmp_path, f'host = "{host}"'))
    check_server_auth(spec)
    assert {r.node: r.status for r in _auth_rows(spec)} == {"head": "pass", "gateway": "pass"}


def test_the_gateway_rule_is_a_preflight_row_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPLITSERVE_API_KEY", raising=False)
    spec = load_spec(_spec(tmp_path, "", 'host = "0.0.0.0"'))
    rows = {r.node: r for r in _auth_rows(spec)}
    assert rows["gateway"].status == "fail" and "gateway.api_key" in rows["gateway"].fix
    spec = load_spec(_spec(tmp_path, "", 'host = "0.0.0.0"\napi_key = "k"'))
    assert {r.node: r.status for r in _auth_rows(spec)}["gateway"] == "pass"
