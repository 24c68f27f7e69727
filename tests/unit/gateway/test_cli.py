"""The gateway's commands refuse bad input in one line, without a traceback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from splitserve.cli import _gateway  # noqa: F401  (registers the commands)
from splitserve.cli._app import app
from splitserve.gateway import KeyRing


def test_serve_refuses_to_bind_beyond_loopback_without_a_key() -> None:
    res = CliRunner().invoke(app, ["serve", "--engine", "http://127.0.0.1:1", "--host", "0.0.0.0"])
    assert res.exit_code == 2
    assert "binds beyond loopback" in res.output and "Traceback" not in res.output
    assert "gateway on" not in res.output


def test_serve_refuses_an_unknown_format() -> None:
    res = CliRunner().invoke(app, ["serve", "--engine", "http://x", "--model-format", "nope"])
    assert res.exit_code == 2 and "unknown tool-call format 'nope'" in res.output


def test_serve_refuses_a_bad_port_or_engine_url_before_serving() -> None:
    res = CliRunner().invoke(app, ["serve", "--engine", "http://127.0.0.1:1", "--port", "99999"])
    assert res.exit_code == 2 and "--port 99999: a TCP port is 1 to 65535" in res.output
    res = CliRunner().invoke(app, ["serve", "--engine", "notaurl"])
    assert res.exit_code == 2 and "--engine notaurl: give llama-server's base URL" in res.output
    assert "gateway on" not in res.output


def test_keys_add_prints_the_key_once_and_stores_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    res = CliRunner().invoke(app, ["keys", "add", str(path), "--name", "alice"])
    assert res.exit_code == 0
    key = res.output.strip()
    assert KeyRing.build(None, path).check(f"Bearer {key}") == "alice"
    assert key not in path.read_text()
    again = CliRunner().invoke(app, ["keys", "add", str(path), "--name", "alice"])
    assert again.exit_code == 2 and "exists already" in again.output


def test_keys_add_to_an_unwritable_place_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = CliRunner().invoke(app, ["keys", "add", str(blocker / "keys"), "--name", "x"])
    assert res.exit_code == 2
    assert "cannot write the keys file" in res.output and "Traceback" not in res.output
