"""Processes on another machine, through the system OpenSSH client.

Using ``ssh`` itself (not a Python SSH library) means the user's
``~/.ssh/config``, agents, jump hosts and known-hosts files just work. Every
call uses:

- ``BatchMode=yes``: a missing key fails at once instead of hanging on a
  password prompt;
- ``ConnectTimeout``: an unreachable box fails in seconds;
- ``ControlMaster=auto`` with a ``ControlPersist`` socket: the first call opens
  the connection, the next ones reuse it (a few milliseconds each), which is
  what makes polling ``alive`` every half second cheap.

A remote process is started detached (``setsid``) with its output appended to
a log file on the remote node; a small ``sh`` wrapper waits for it and appends
``# splitserve: exit status N`` to the log, so the exit code of a process that
is nobody's child is still known. The pid recorded is the real program's, and
its start time (``/proc/PID/stat`` field 22) guards against recycled pids.

Remote paths may start with ``~/`` or be relative: both mean the remote home.

:class:`SshNode` is the SSH implementation of the root process interface
(:class:`~splitserve._node.Node`), beside :class:`~splitserve._node.LocalNode` and the in-memory
fake; the cluster picks one per spec host (:func:`~splitserve.cluster._nodes.node_for`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ._errors import ClusterError
from ._node import Node, ProcessRef, capture, remote_env, sh_env_value, sh_path, sh_program

EXIT_MARK = "# splitserve: exit status "
_EXIT_RE = re.compile(re.escape(EXIT_MARK) + r"(\d+)")


def _control_dir() -> Path:
    # Unix socket paths are limited to ~108 bytes: keep it short and private.
    path = Path(tempfile.gettempdir()) / f"splitserve-ssh-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def exit_status_from_log(text: str) -> int | None:
    """The wrapper's last recorded exit status, as :class:`subprocess.Popen` reports it
    (negative for a signal)."""
    hits = _EXIT_RE.findall(text)
    if not hits:
        return None
    status = int(hits[-1])
    return -(status - 128) if status > 128 else status


class SshNode(Node):
    """Processes on ``host`` (``user@box2``, ``box2`` or an ssh config alias)."""

    def __init__(
        self, host: str, *, config: Path | None = None, options: Sequence[str] = (), connect_timeout: float = 10.0
    ) -> None:
        self.host = host
        self.config = config
        self.options = list(options)
        self.connect_timeout = connect_timeout

    # -- running commands -------------------------------------------------------------------

    def ssh_argv(self) -> list[str]:
        """The ``ssh`` command line up to (and including) the destination."""
        argv = ["ssh"]
        if self.config is not None:
            argv += ["-F", str(self.config)]
        argv += [
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={max(1, round(self.connect_timeout))}",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={_control_dir()}/%C",
            "-o",
            "ControlPersist=120",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
            "-o",
            "LogLevel=ERROR",
        ]
        for opt in self.options:
            argv += ["-o", opt]
        return argv + ["-T", self.host]

    def run(
        self, script: str, *, input: bytes | None = None, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``script`` with ``sh`` on the node; raises :class:`ClusterError` when ssh itself
        fails (exit 255) or, with ``check``, when the script fails."""
        argv = [*self.ssh_argv(), "exec sh -c " + shlex.quote(script)]
        try:
            res = capture(argv, input, timeout)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"{self.host}: ssh did not answer within {timeout:.0f} s") from None
        except FileNotFoundError:
            raise ClusterError(
                "the OpenSSH client (`ssh`) is not installed on this machine; install openssh-client"
            ) from None
        if res.returncode == 255:
            raise ClusterError(
                f"{self.host}: ssh failed: {_last_line(res.stderr) or 'exit 255'}; check that "
                f"`ssh {self.host} true` works without a password prompt"
            ) from None
        if check and res.returncode != 0:
            raise ClusterError(
                f"{self.host}: remote command failed (exit {res.returncode}): "
                f"{_last_line(res.stderr) or _last_line(res.stdout) or 'no output'}"
            )
        return res

    def text(self, script: str, timeout: float = 60.0) -> str:
        return self.run(script, timeout=timeout).stdout.decode("utf-8", "replace")

    def close(self) -> None:
        """Close the shared connection (``ssh -O exit``)."""
        subprocess.run(
            [*self.ssh_argv()[:-2], "-O", "exit", self.host],
            capture_output=True,
            check=False,
            stdin=subprocess.DEVNULL,
            timeout=10,
        )

    # -- processes --------------------------------------------------------------------------

    def new_log(self, log_path: Path, header: str) -> None:
        log = sh_path(log_path)
        self.run(
            f'mkdir -p "$(dirname {log})" && {{ [ ! -e {log} ] || mv -f {log} {log}.1; }} && '
            f"printf '%s\\n' {shlex.quote(header)} > {log}"
        )

    def spawn(self, argv: list[str], env: dict[str, str], log_path: Path) -> ProcessRef:
        env = remote_env(env)
        log = sh_path(log_path)
        try:
            exports = [f"export {key}={sh_env_value(key, value)}" for key, value in env.items()]
        except ClusterError as exc:
            raise ClusterError(f"{self.host}: {exc}") from None
        program = sh_program(argv)  # as `up --dry-run` prints it (sh_command)
        # The wrapper: starts the program, tells us its pid, waits, records the exit status.
        wrapper = f'"$@" & echo $! > "$SPLITSERVE_PIDFILE"; wait $!; echo "{EXIT_MARK}$?" >> "$SPLITSERVE_LOG"'
        script = "\n".join(
            [
                "set -e",
                f'mkdir -p "$(dirname {log})"',
                *exports,
                "SPLITSERVE_PIDFILE=$(mktemp)",
                f"SPLITSERVE_LOG={log}",
                "export SPLITSERVE_PIDFILE SPLITSERVE_LOG",
                "if command -v stdbuf >/dev/null 2>&1; then buf='stdbuf -oL -eL'; else buf=''; fi",
                f"setsid sh -c {shlex.quote(wrapper)} sh $buf {program} >> {log} 2>&1 < /dev/null &",
                'i=0; while [ ! -s "$SPLITSERVE_PIDFILE" ] && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done',
                'pid=$(cat "$SPLITSERVE_PIDFILE"); rm -f "$SPLITSERVE_PIDFILE"',
                '[ -n "$pid" ] || { echo "the process did not start" >&2; exit 3; }',
                "ticks=$(sed 's/.*) //' /proc/$pid/stat 2>/dev/null | cut -d' ' -f20 || true)",
                'echo "$pid ${ticks:-none}"',
            ]
        )
        out = self.text(script).split()
        if len(out) < 2 or not out[0].isdigit():
            raise ClusterError(f"{self.host}: could not start {argv[0]} (got {' '.join(out) or 'nothing'})")
        return ProcessRef(int(out[0]), int(out[1]) if out[1].isdigit() else None)

    def _stat(self, ref: ProcessRef) -> tuple[str, int | None, int | None] | None:
        """(state, start ticks, process group) of a remote pid, or None when it is gone."""
        res = self.run(f"sed 's/.*) //' /proc/{int(ref.pid)}/stat 2>/dev/null | cut -d' ' -f1,3,20", check=False)
        parts = res.stdout.decode().split()
        if len(parts) < 3:
            return None
        return parts[0], int(parts[2]) if parts[2].isdigit() else None, int(parts[1]) if parts[1].isdigit() else None

    def alive(self, ref: ProcessRef) -> bool:
        stat = self._stat(ref)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        return ref.start_ticks is None or stat[1] == ref.start_ticks

    def signal(self, ref: ProcessRef, sig: int) -> None:
        stat = self._stat(ref)
        if stat is None or stat[0] in ("Z", "X") or (ref.start_ticks is not None and stat[1] != ref.start_ticks):
            return
        pgid = stat[2]
        pid = int(ref.pid)
        # The wrapper's session leads the group: signal the whole group (program and wrapper).
        target = f"-- -{pgid}" if pgid and pgid > 1 else str(pid)
        self.run(f"kill -{int(sig)} {target} 2>/dev/null || kill -{int(sig)} {pid} 2>/dev/null || true", check=False)

    def exit_code(self, ref: ProcessRef) -> int | None:
        return None  # read from the log by exit_code_from_log (the wrapper writes it)

    def rss_bytes(self, ref: ProcessRef) -> int | None:
        res = self.run(f"grep VmRSS /proc/{int(ref.pid)}/status 2>/dev/null", check=False)
        parts = res.stdout.decode().split()
        return int(parts[1]) * 1024 if len(parts) >= 2 and parts[1].isdigit() else None

    def read_log(self, log_path: Path, max_bytes: int = 1 << 20) -> str:
        res = self.run(f"tail -c {int(max_bytes)} {sh_path(log_path)} 2>/dev/null", check=False)
        return res.stdout.decode("utf-8", "replace")

    def read_log_since(self, log_path: Path, offset: int, max_bytes: int = 1 << 20) -> tuple[str, int]:
        log = sh_path(log_path)
        res = self.run(
            f'f={log}; [ -e "$f" ] || exit 0; s=$(wc -c < "$f"); echo $s; '
            f'if [ $s -ge {int(offset)} ]; then tail -c +{int(offset) + 1} "$f" | head -c {int(max_bytes)}; '
            f'else head -c {int(max_bytes)} "$f"; fi',
            check=False,
        )
        raw = res.stdout
        if not raw:
            return "", offset
        first, _, body = raw.partition(b"\n")
        size = int(first) if first.strip().isdigit() else offset
        start = offset if size >= offset else 0
        return body.decode("utf-8", "replace"), start + len(body)


def _last_line(raw: bytes) -> str:
    lines = [ln.strip() for ln in raw.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


__all__ = ["EXIT_MARK", "SshNode", "exit_status_from_log", "remote_env", "sh_path"]
