"""How splitserve starts and watches processes on a node.

:class:`Transport` is the one I/O boundary of the cluster layer: spawn a
process with its output going to a log file, ask whether it is alive, signal
it, read its memory and its log. :class:`LocalTransport` runs on this machine;
:class:`~splitserve.cluster._ssh.SshTransport` does the same over the system
OpenSSH client; :func:`transport_for` picks one from a spec's ``host``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ClusterError


@dataclass(frozen=True)
class ProcessRef:
    """A process as the state file records it: pid plus its start time, so a
    recycled pid is never mistaken for ours."""

    pid: int
    start_ticks: int | None


class Transport(ABC):
    """Start and watch processes on one node."""

    host: str = "local"

    @abstractmethod
    def spawn(self, argv: list[str], env: dict[str, str], log_path: Path) -> ProcessRef:
        """Start ``argv`` in a new session with stdout+stderr appended to ``log_path``."""

    @abstractmethod
    def alive(self, ref: ProcessRef) -> bool:
        """Whether the process still runs (a zombie does not count)."""

    @abstractmethod
    def signal(self, ref: ProcessRef, sig: int) -> None:
        """Send ``sig`` to the process group the process leads."""

    @abstractmethod
    def exit_code(self, ref: ProcessRef) -> int | None:
        """The exit status of a process this transport started and that has ended, where known."""

    def rss_bytes(self, ref: ProcessRef) -> int | None:
        """Resident memory of the process, where known."""
        return None

    def lingering(self, ref: ProcessRef) -> bool:
        """Whether a stopped process is still in the process table (a zombie not yet reaped)."""
        return False

    def new_log(self, log_path: Path, header: str) -> None:
        """Start a fresh log (the previous one kept as ``NAME.1``) holding ``header``."""
        if log_path.exists():
            log_path.replace(log_path.with_name(log_path.name + ".1"))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(header + "\n")

    def read_log_since(self, log_path: Path, offset: int, max_bytes: int = 1 << 20) -> tuple[str, int]:
        """What was appended to a log since byte ``offset``, and the new offset (from 0 when the
        file was replaced by a shorter one)."""
        try:
            with open(log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                start = offset if size >= offset else 0
                fh.seek(start)
                data = fh.read(max_bytes)
        except FileNotFoundError:
            return "", offset
        return data.decode("utf-8", "replace"), start + len(data)

    def read_log(self, log_path: Path, max_bytes: int = 1 << 20) -> str:
        """The end of a log file this transport writes."""
        return read_tail(log_path, max_bytes)


def _proc_stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Field 2 (comm) may hold spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest  # rest[0] is field 3 (state); field 22 (starttime) is rest[19]


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    rest = _proc_stat(pid)
    return int(rest[19]) if rest and len(rest) > 19 else None


def read_tail(path: Path, max_bytes: int = 1 << 20) -> str:
    """The last ``max_bytes`` of a local file as text ("" when there is no such file)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            return fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


class LocalTransport(Transport):
    """Processes on this machine."""

    host = "local"

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def spawn(self, argv: list[str], env: dict[str, str], log_path: Path) -> ProcessRef:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # Line-buffered stdio, so the log shows what the process printed as it happens
        # (ggml-rpc-server's printf output would otherwise sit in a pipe buffer).
        stdbuf = shutil.which("stdbuf")
        if stdbuf:
            argv = [stdbuf, "-oL", "-eL", *argv]
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise ClusterError(f"cannot start {argv[0]}: {exc.strerror}") from None
        self._children[proc.pid] = proc
        return ProcessRef(proc.pid, start_ticks(proc.pid))

    def _same(self, ref: ProcessRef) -> bool:
        if ref.start_ticks is None:
            return _proc_stat(ref.pid) is not None
        return start_ticks(ref.pid) == ref.start_ticks

    def alive(self, ref: ProcessRef) -> bool:
        child = self._children.get(ref.pid)
        if child is not None:
            return child.poll() is None
        rest = _proc_stat(ref.pid)
        if rest is None or rest[0] in ("Z", "X"):
            return False
        return self._same(ref)

    def exit_code(self, ref: ProcessRef) -> int | None:
        child = self._children.get(ref.pid)
        return child.poll() if child is not None else None

    def lingering(self, ref: ProcessRef) -> bool:
        child = self._children.get(ref.pid)
        if child is not None:
            child.poll()  # reaps our own child
        return _proc_stat(ref.pid) is not None and self._same(ref)

    def signal(self, ref: ProcessRef, sig: int) -> None:
        if not self.alive(ref):
            return
        try:
            os.killpg(ref.pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(ref.pid, sig)

    def rss_bytes(self, ref: ProcessRef) -> int | None:
        if not self.alive(ref):
            return None
        try:
            for line in Path(f"/proc/{ref.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None


def wait_reaped(items: list[tuple[Transport, ProcessRef]], timeout: float = 3.0) -> None:
    """Wait (at most ``timeout`` seconds in all) until stopped processes have left the process
    table: one started by another splitserve process is a zombie until init reaps it, and a
    caller checking "nothing left" right after `down` must not still find it."""
    deadline = time.monotonic() + timeout
    waiting = list(items)
    while waiting and time.monotonic() < deadline:
        waiting = [(t, r) for t, r in waiting if t.lingering(r)]
        if waiting:
            time.sleep(0.02)


def stop(transport: Transport, ref: ProcessRef, grace: float = 10.0) -> bool:
    """SIGTERM the process group, then SIGKILL after ``grace`` seconds; True if it is gone."""
    if not transport.alive(ref):
        return True
    transport.signal(ref, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not transport.alive(ref):
            return True
        time.sleep(0.05)
    transport.signal(ref, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not transport.alive(ref):
            return True
        time.sleep(0.05)
    return not transport.alive(ref)


_TRANSPORTS: dict[object, Transport] = {}


def transport_for(host: str, ssh: Any = None) -> Transport:
    """The transport for a spec's ``host`` value (one shared instance per host and ssh settings).

    ``ssh`` is the spec's :class:`~splitserve.cluster.SshSpec` (or its dict form from a state
    file); without it the plain ``ssh`` defaults apply."""
    if host in ("local", "localhost", "127.0.0.1"):
        return _TRANSPORTS.setdefault("local", LocalTransport())
    from ._ssh import SshTransport

    if isinstance(ssh, dict):
        cfg, options, timeout = ssh.get("config"), ssh.get("options") or [], ssh.get("connect_timeout", 10.0)
    elif ssh is not None:
        cfg, options, timeout = ssh.config, ssh.options, ssh.connect_timeout
    else:
        cfg, options, timeout = None, [], 10.0
    key = (host, str(cfg) if cfg else None, tuple(options), float(timeout))
    if key not in _TRANSPORTS:
        _TRANSPORTS[key] = SshTransport(
            host, config=Path(cfg) if cfg else None, options=options, connect_timeout=float(timeout)
        )
    return _TRANSPORTS[key]
