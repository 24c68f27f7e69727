"""The root process interface's run-and-capture for argv (what the engine build's git, pip and
probes use): the working folder, added variables, arguments passed as they are, a missing
program, and the time limit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from splitserve import ClusterError
from splitserve._node import run_command


def test_runs_argv_in_a_folder_with_added_variables_and_arguments_as_they_are(tmp_path: Path) -> None:
    code = "import os, sys; print(os.getcwd()); print(os.environ['SPLITSERVE_X']); print(sys.argv[1:])"
    odd = ["a b", "it's", "$HOME", "*"]
    res = run_command([sys.executable, "-c", code, *odd], cwd=tmp_path, env={"SPLITSERVE_X": "one two"})
    assert res.returncode == 0, res.stderr
    cwd, value, args = res.stdout.splitlines()
    assert Path(cwd) == tmp_path and value == "one two" and args == repr(odd)


def test_exit_status_and_stderr_come_back(tmp_path: Path) -> None:
    res = run_command([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"])
    assert res.returncode == 3 and res.stderr == "boom\n" and res.stdout == ""
    missing = run_command([str(tmp_path / "no-such-program")])
    assert missing.returncode == 127


def test_a_bad_variable_name_and_the_time_limit_are_errors() -> None:
    with pytest.raises(ClusterError, match="bad environment variable name"):
        run_command(["true"], env={"A B": "x"})
    with pytest.raises(ClusterError, match="did not finish within"):
        run_command([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
