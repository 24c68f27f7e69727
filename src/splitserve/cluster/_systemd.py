"""systemd unit files for a cluster (`splitserve systemd -c cluster.toml`).

- ``splitserve-<name>.service`` on the head: runs ``splitserve run -c FILE``,
  the supervisor that starts the workers (over SSH for remote ones) and the
  head, and restarts all of them in order when one dies. This is the one to
  install.
- ``splitserve-<name>-<worker>.service``, one per worker: ggml-rpc-server
  alone, for a box whose RPC server should be managed by its own systemd
  instead (then do not also let `run` start that worker).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from ..engine import Engine
from ._commands import launch_plan
from ._spec import ClusterSpec


def _exec(argv: list[str]) -> str:
    # systemd's ExecStart= quoting is close to the shell's for plain words and quotes.
    return " ".join(shlex.quote(a) for a in argv)


def splitserve_command() -> list[str]:
    exe = shutil.which("splitserve")
    return [exe] if exe else [sys.executable, "-m", "splitserve"]


def systemd_units(
    spec: ClusterSpec, engines: dict[str, Engine], spec_file: Path, command: list[str] | None = None
) -> dict[str, str]:
    """Unit file name -> text."""
    cmd = command or splitserve_command()
    units: dict[str, str] = {}
    units[f"splitserve-{spec.name}.service"] = "\n".join(
        [
            "[Unit]",
            (
                f"Description=splitserve cluster {spec.name}: llama-server{', the gateway' if spec.gateway.enabled else ''} "
                f"and {len(spec.workers)} RPC workers, supervised"
            ),
            "Wants=network-online.target",
            "After=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            f"ExecStart={_exec([*cmd, 'run', '-c', str(spec_file.resolve())])}",
            "# `run` restarts the cluster itself (in order, with backoff); systemd restarts `run`.",
            "Restart=on-failure",
            "RestartSec=10",
            "KillMode=mixed",
            "KillSignal=SIGTERM",
            "TimeoutStopSec=90",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )
    plan = launch_plan(spec, engines)
    for proc in plan.workers:
        env = " ".join(shlex.quote(f"{k}={v.replace('~/', '%h/')}") for k, v in proc.env.items())
        units[f"splitserve-{spec.name}-{proc.node}.service"] = "\n".join(
            [
                "[Unit]",
                f"Description=splitserve cluster {spec.name}: RPC worker {proc.node} on {proc.bind}:{proc.port}",
                "Wants=network-online.target",
                "After=network-online.target",
                "",
                "[Service]",
                "Type=simple",
                f"# Install on {proc.host if proc.host != 'local' else 'the head'}; paths are that node's.",
                *([f"Environment={env}"] if env else []),
                f"ExecStart={_exec([p.replace('~/', '%h/', 1) if i == 0 else p for i, p in enumerate(proc.argv)])}",
                "Restart=always",
                "RestartSec=2",
                "",
                "[Install]",
                "WantedBy=multi-user.target",
                "",
            ]
        )
    return units


__all__ = ["splitserve_command", "systemd_units"]
