"""Build progress when stderr is not a terminal (a CI log, `| tee`): plain lines with ninja's
[N/M], the percentage and the elapsed time, a few per build, not one per step."""

from __future__ import annotations

import re
from typing import Any

import pytest

from splitserve.cli import _engine
from splitserve.engine import BuildNote, BuildOptions
from splitserve.engine._build import BuildStep


def test_non_terminal_progress_prints_steps_percent_and_elapsed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_build(options: BuildOptions, on_event: Any) -> tuple[object, bool]:
        on_event(BuildNote("configuring k"))
        for i in range(1, 471):
            on_event(BuildStep(i, 470, f"[{i}/470] Building CXX object x.o"))
        return object(), True

    monkeypatch.setattr(_engine, "build_engine", fake_build)
    _engine.build_with_progress(BuildOptions())
    err = capsys.readouterr().err
    steps = re.findall(r"engine: compiling \[(\d+)/470\] (\d+)% (\d+):(\d\d) elapsed", err)
    assert 15 <= len(steps) <= 25, err
    assert steps[-1][:2] == ("470", "100")
    assert [int(s[0]) for s in steps] == sorted(int(s[0]) for s in steps)
    assert "engine: configuring k" in err


def test_quiet_prints_nothing(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(
        _engine,
        "build_engine",
        lambda o, on_event: (on_event(BuildStep(1, 2, "")), on_event(BuildNote("x")), (None, True))[2],
    )
    _engine.build_with_progress(BuildOptions(), quiet=True)
    assert capsys.readouterr().err == ""
