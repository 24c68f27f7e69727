"""``splitserve bench`` with bad input: one line naming what and where, a non-zero exit, no run left."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import splitserve.cli._bench  # noqa: F401  (registers bench)
from splitserve.cli._app import app


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["speed"], "exactly one of --url URL or -c"),
        (["speed", "--url", "http://127.0.0.1:1", "--concurrency", "x"], "--concurrency: 'x'"),
        (["context", "--url", "http://127.0.0.1:1", "--lengths", "8q"], "--lengths: '8q'"),
        (["context", "--url", "http://127.0.0.1:1", "--depths", "1.5"], "--depths: 1.5"),
        (["engine", "-m", "no-such-model.gguf"], "-m no-such-model.gguf: no such model file"),
        (["engine", "-m", "no-such-model.gguf", "-fa", "maybe"], "--flash-attn 'maybe'"),
        (["report", "no-such-run.json"], "no-such-run.json: no such run file"),
    ],
)
def test_bad_input_is_one_line(args: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["bench", *args])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.lstrip().startswith("bench ")]
    assert r.exit_code != 0
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception  # no traceback
    assert len(lines) == 1 and lines[0].startswith("splitserve: error:") and needle in lines[0], r.stderr
    assert not (tmp_path / "bench-runs").exists() or not list((tmp_path / "bench-runs").glob("*.json"))
