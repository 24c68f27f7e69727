"""Bad command lines: one line on stderr naming the command and the problem, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["bench", "speed", "--gen-tokens", "abc"], "splitserve bench speed: Invalid value for '--gen-tokens'"),
        (["nosuch"], "No such command 'nosuch'"),
        (["up"], "splitserve up: Missing option '-c' / '--config'"),
        (["status", "--bogus"], "splitserve status: No such option: --bogus"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], expected: str) -> None:
    res = subprocess.run([sys.executable, "-m", "splitserve", *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("splitserve: error: ")
    assert expected in res.stderr
    assert res.stdout == ""


def test_no_arguments_still_prints_the_help() -> None:
    res = subprocess.run([sys.executable, "-m", "splitserve"], capture_output=True, text=True, timeout=60)
    assert "Usage: splitserve" in res.stdout + res.stderr and "up" in res.stdout + res.stderr


def test_version_and_a_top_level_error_name_splitserve_once() -> None:
    from splitserve import __version__

    res = subprocess.run([sys.executable, "-m", "splitserve", "--version"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout == f"splitserve {__version__}\n"
    res = subprocess.run([sys.executable, "-m", "splitserve", "--nope"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.startswith("splitserve: error: No such option: --nope")
    assert res.stderr.count("splitserve") == 2  # the prefix and the `splitserve --help` hint
