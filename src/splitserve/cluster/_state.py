"""The state folder of a running cluster: which processes `up` started (pid and
start time, node, port, log), the endpoint and the load figures. `down`,
`status` and `logs` read it; nothing is ever found by process name."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ClusterError
from .._node import ProcessRef
from ._spec import SshSpec

STATE_FILE = "state.json"


@dataclass
class ProcessRecord:
    node: str
    role: str
    host: str
    pid: int
    start_ticks: int | None
    bind: str
    port: int
    log: str
    argv: list[str]

    @property
    def ref(self) -> ProcessRef:
        return ProcessRef(self.pid, self.start_ticks)


@dataclass
class ClusterState:
    name: str
    spec_file: str | None
    model: str
    endpoint: str
    """What clients use: the gateway's URL, or llama-server's when the gateway is off."""
    engine: str
    phase: str = "starting"
    """``starting``, ``ready`` or ``failed``."""
    started_at: float = 0.0
    ready_at: float | None = None
    load_seconds: float | None = None
    """From starting llama-server to its first successful completion."""
    up_seconds: float | None = None
    """The whole of `up`, from reading the spec to ready."""
    processes: list[ProcessRecord] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    engine_endpoint: str | None = None
    """llama-server's own URL (None in states written before the gateway was started by `up`)."""
    ssh: SshSpec | None = None
    """How `down`, `status` and the supervisor reach the remote nodes: the spec's ``[ssh]`` at `up`
    (None: the plain ``ssh`` defaults)."""

    @property
    def engine_url(self) -> str:
        """llama-server's base URL, for its native endpoints (/completion, /props, /slots)."""
        return self.engine_endpoint or self.endpoint

    @property
    def gateway(self) -> ProcessRecord | None:
        return next((p for p in self.processes if p.role == "gateway"), None)

    def to_json(self) -> str:
        data = asdict(self)
        data["ssh"] = self.ssh.model_dump(mode="json") if self.ssh is not None else None
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        data = json.loads(text)
        procs = [ProcessRecord(**p) for p in data.pop("processes", [])]
        # states written before ``ssh`` was a field kept it under ``extra``
        ssh = data.pop("ssh", None) or (data.get("extra") or {}).pop("ssh", None)
        return cls(processes=procs, ssh=SshSpec.model_validate(ssh) if ssh is not None else None, **data)


def read_state(root: Path) -> ClusterState | None:
    path = root / STATE_FILE
    try:
        return ClusterState.from_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise ClusterError(
            f"{path}: unreadable cluster state ({exc}); remove it once no process of the cluster runs"
        ) from None


def write_state(root: Path, state: ClusterState) -> None:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (STATE_FILE + ".tmp")
    tmp.write_text(state.to_json())
    os.replace(tmp, root / STATE_FILE)


def clear_state(root: Path) -> None:
    (root / STATE_FILE).unlink(missing_ok=True)


# -- the supervisor's lock -------------------------------------------------------------------

LOCK_FILE = "supervisor.lock"
"""Held (``flock``) by `up --foreground` / `run` for its whole life; holds its pid and start."""


@dataclass
class LockHolder:
    """The supervisor that holds a cluster's lock."""

    pid: int
    start_ticks: int | None = None
    started_at: float = 0.0
    command: str = ""

    def describe(self) -> str:
        import time

        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at)) if self.started_at else "?"
        return f"pid {self.pid} ({self.command or 'splitserve up --foreground / run'}, since {since})"


def _read_holder(fd: int) -> LockHolder | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096).decode("utf-8", "replace")
    try:
        data = json.loads(raw)
        return LockHolder(
            int(data["pid"]), data.get("start_ticks"), float(data.get("started_at", 0.0)), str(data.get("command", ""))
        )
    except (ValueError, KeyError, TypeError):
        return None


def lock_holder(root: Path) -> LockHolder | None:
    """The supervisor holding ``root``'s lock, or None when no process holds it (a supervisor
    killed with SIGKILL leaves the file, but the kernel has released its lock)."""
    import fcntl
    import time

    try:
        fd = os.open(root / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        for _ in range(50):  # the holder writes its pid right after taking the lock
            holder = _read_holder(fd)
            if holder is not None:
                return holder
            time.sleep(0.02)
        return LockHolder(0, command="a process that wrote no pid")
    finally:
        os.close(fd)


class SupervisorLock:
    """The lock a supervisor holds on its cluster's state folder (``flock``, so the kernel drops
    it when the process ends however it ends; the descriptor is not inherited by the cluster's
    processes)."""

    def __init__(self, root: Path, name: str, command: str = "") -> None:
        self.root = root
        self.name = name
        self.command = command
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`ClusterError` naming the supervisor that holds it."""
        import fcntl
        import sys
        import time

        from .._node import start_ticks

        if self._fd is not None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = None
            for _ in range(50):
                holder = _read_holder(fd)
                if holder is not None:
                    break
                time.sleep(0.02)
            os.close(fd)
            raise ClusterError(supervised_message(self.name, holder or LockHolder(0))) from None
        os.ftruncate(fd, 0)
        command = self.command or " ".join(["splitserve", *sys.argv[1:]])[:300]
        os.pwrite(
            fd,
            json.dumps(
                {
                    "pid": os.getpid(),
                    "start_ticks": start_ticks(os.getpid()),
                    "started_at": time.time(),
                    "command": command,
                }
            ).encode(),
            0,
        )
        self._fd = fd

    def release(self) -> None:
        import fcntl

        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def supervised_message(name: str, holder: LockHolder) -> str:
    return (
        f"cluster {name} is held by its supervisor, {holder.describe()}, which restarts it itself; "
        "`splitserve down` asks the supervisor to stop (then `up` may start it again)"
    )
