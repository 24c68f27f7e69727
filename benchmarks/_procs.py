"""Processes the benchmarks start: each with its log in a file, so one that dies early is
reported with how it ended and the last lines it printed (never just "exited")."""

from __future__ import annotations

import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

_LOGS: dict[int, Path] = {}


def spawn(argv: list[str], name: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv)`` with stdout and stderr in ``/tmp/.../<name>.log``."""
    folder = Path(tempfile.gettempdir()) / "splitserve-bench-logs"
    folder.mkdir(exist_ok=True)
    log = Path(tempfile.mkstemp(prefix=f"{name}-", suffix=".log", dir=folder)[1])
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, **kwargs)
    _LOGS[proc.pid] = log
    return proc


def died(proc: subprocess.Popen[bytes], what: str, lines: int = 12) -> str:
    """``<what> was killed by SIGILL; last lines of <log>: ...``."""
    rc = proc.poll()
    how = ("is still running" if rc is None else f"was killed by {signal.Signals(-rc).name}" if rc < 0
           else f"exited with code {rc}")
    log = _LOGS.get(proc.pid)
    if log is None or not log.is_file():
        return f"{what} {how}"
    tail = log.read_text(errors="replace").splitlines()[-lines:]
    return f"{what} {how}; last lines of {log}:\n" + "\n".join(tail)
