"""A node: how splitserve runs commands, starts and watches processes, and reads and writes files on a machine.

:class:`Node` is splitserve's one process interface (the engine build, the engine smoke test and
the cluster all use it): run a shell command, spawn a process with its output going to a log
file, ask whether it is alive, signal and stop it, read its memory and its log, read and write a
file. :class:`LocalNode` runs on this machine;
:class:`~splitserve._ssh.SshNode` does the same over the system OpenSSH client;
:class:`~splitserve._node_fake.FakeNode` is the in-memory one for tests;
:func:`~splitserve.cluster._nodes.node_for` picks one from a spec's ``host``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from ._clock import SYSTEM_CLOCK, Clock
from ._errors import ClusterError


@dataclass(frozen=True)
class ProcessRef:
    """A process as the state file records it: pid plus its start time, so a
    recycled pid is never mistaken for ours."""

    pid: int
    start_ticks: int | None


def sh_path(path: str | Path) -> str:
    """A node's path as a shell word: ``~/x`` and relative paths become ``"$HOME"/x``."""
    text = str(path)
    if text == "~":
        return '"$HOME"'
    if text.startswith("~/"):
        text = text[2:]
    elif text.startswith("/"):
        return shlex.quote(text)
    return '"$HOME"/' + shlex.quote(text)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def remote_env(env: dict[str, str]) -> dict[str, str]:
    """The part of ``env`` meant for a remote process: what differs from this machine's own
    environment (callers may pass a full local environment, as for a local process)."""
    out = {}
    for key, value in env.items():
        local = os.environ.get(key)
        if key == "LD_LIBRARY_PATH" and local and value.endswith(os.pathsep + local):
            value = value[: -len(local) - 1]
        elif local is not None and local == value:
            continue
        out[key] = value
    return out


def sh_env_value(key: str, value: str) -> str:
    """An environment value as a node's shell word: ``LD_LIBRARY_PATH``'s folders as node paths
    (``~`` expanded there) before the node's own library path; other values quoted."""
    if not _ENV_NAME.fullmatch(key):
        raise ClusterError(f"bad environment variable name {key!r}")
    if key == "LD_LIBRARY_PATH":
        parts = ":".join(sh_path(p) for p in value.split(":") if p)
        return f'{parts}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"'
    return shlex.quote(value)


def sh_program(argv: list[str]) -> str:
    """A command line as a node's shell runs it: the program as a node path (``~/x`` is
    ``"$HOME"/x``; a bare name is looked up in the node's PATH), the arguments quoted."""
    first = argv[0]
    program = sh_path(first) if "/" in first or first.startswith("~") else shlex.quote(first)
    return " ".join([program, *(shlex.quote(a) for a in argv[1:])])


def sh_command(argv: list[str], env: dict[str, str]) -> str:
    """One line a node's shell runs as is (what `up --dry-run` prints for a remote process, and
    what :class:`~._ssh.SshNode` starts): ``KEY=value ... program args``."""
    envs = " ".join(f"{k}={sh_env_value(k, v)}" for k, v in env.items())
    return (envs + " " if envs else "") + sh_program(argv)


class Node(ABC):
    """Run commands, start and watch processes, and read and write files on one machine."""

    host: str = "local"

    @abstractmethod
    def run(
        self, script: str, *, input: bytes | None = None, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``script`` with ``sh`` on the node (output captured); raises :class:`ClusterError`
        when the node cannot be reached or, with ``check``, when the script fails."""

    def read_file(self, path: Path | str) -> bytes | None:
        """A file's bytes, or None when there is no such file."""
        res = self.run(f"cat {sh_path(path)} 2>/dev/null || echo __splitserve_missing__ >&2", check=False)
        return None if b"__splitserve_missing__" in res.stderr else res.stdout

    def write_file(self, path: Path | str, data: bytes) -> None:
        """Write a file whole (its folder made), replacing what was there."""
        target = sh_path(path)
        self.run(
            f'mkdir -p "$(dirname {target})" && cat > {target}.partial && mv -f {target}.partial {target}', input=data
        )

    def stop(self, ref: ProcessRef, grace: float = 10.0) -> bool:
        """SIGTERM the process group, then SIGKILL after ``grace`` seconds; True if it is gone."""
        return stop(self, ref, grace)

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
        """The exit status of a process this node started and that has ended, where known."""

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
        """The end of a log file this node writes."""
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


class LocalNode(Node):
    """Processes and files on this machine."""

    host = "local"

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def run(
        self, script: str, *, input: bytes | None = None, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        try:
            res = capture(["sh", "-c", script], input, timeout)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"local command did not finish within {timeout:.0f} s: {script[:80]}") from None
        if check and res.returncode != 0:
            last = (res.stderr or res.stdout).decode("utf-8", "replace").strip().splitlines()
            raise ClusterError(
                f"local command failed (exit {res.returncode}): {last[-1][:300] if last else 'no output'}"
            )
        return res

    def read_file(self, path: Path | str) -> bytes | None:
        try:
            return Path(path).expanduser().read_bytes()
        except FileNotFoundError:
            return None

    def write_file(self, path: Path | str, data: bytes) -> None:
        target = Path(path).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".partial")
        tmp.write_bytes(data)
        tmp.replace(target)

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


def capture(argv: list[str], input: bytes | None, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """``argv`` run here to its end, ``input`` (else nothing) on its stdin, its output captured;
    raises :class:`subprocess.TimeoutExpired` past ``timeout`` seconds (the process killed), and
    :class:`FileNotFoundError` when the program is missing. What :meth:`Node.run` runs on."""
    return subprocess.run(
        argv,
        input=input,
        capture_output=True,
        timeout=timeout,
        check=False,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def run_command(
    argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600.0
) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end on this machine through :meth:`LocalNode.run`: in ``cwd``, with
    ``env``'s variables added to this process's environment, its output captured as text. A
    missing program is exit 127 (the shell's); raises :class:`ClusterError` past ``timeout``
    seconds (the process stopped)."""
    bad = [k for k in env or {} if not _ENV_NAME.fullmatch(k)]
    if bad:
        raise ClusterError(f"bad environment variable name {bad[0]!r}")
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    script = (f"cd {shlex.quote(str(cwd))} && " if cwd is not None else "") + "exec "
    script += (f"env {envs} " if envs else "") + shlex.join(argv)
    res = LocalNode().run(script, check=False, timeout=timeout)
    return subprocess.CompletedProcess(
        argv, res.returncode, res.stdout.decode("utf-8", "replace"), res.stderr.decode("utf-8", "replace")
    )


def wait_reaped(items: list[tuple[Node, ProcessRef]], timeout: float = 3.0, clock: Clock = SYSTEM_CLOCK) -> None:
    """Wait (at most ``timeout`` seconds in all) until stopped processes have left the process
    table: one started by another splitserve process is a zombie until init reaps it, and a
    caller checking "nothing left" right after `down` must not still find it."""
    deadline = clock.monotonic() + timeout
    waiting = list(items)
    while waiting and clock.monotonic() < deadline:
        waiting = [(t, r) for t, r in waiting if t.lingering(r)]
        if waiting:
            clock.sleep(0.02)


def stop(node: Node, ref: ProcessRef, grace: float = 10.0, clock: Clock = SYSTEM_CLOCK) -> bool:
    """SIGTERM the process group, then SIGKILL after ``grace`` seconds; True if it is gone."""
    if not node.alive(ref):
        return True
    node.signal(ref, signal.SIGTERM)
    deadline = clock.monotonic() + grace
    while clock.monotonic() < deadline:
        if not node.alive(ref):
            return True
        clock.sleep(0.05)
    node.signal(ref, signal.SIGKILL)
    deadline = clock.monotonic() + 5
    while clock.monotonic() < deadline:
        if not node.alive(ref):
            return True
        clock.sleep(0.05)
    return not node.alive(ref)
