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
from ._transport import ProcessRef

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

    @property
    def engine_url(self) -> str:
        """llama-server's base URL, for its native endpoints (/completion, /props, /slots)."""
        return self.engine_endpoint or self.endpoint

    @property
    def gateway(self) -> ProcessRecord | None:
        return next((p for p in self.processes if p.role == "gateway"), None)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        data = json.loads(text)
        procs = [ProcessRecord(**p) for p in data.pop("processes", [])]
        return cls(processes=procs, **data)


def read_state(root: Path) -> ClusterState | None:
    path = root / STATE_FILE
    try:
        return ClusterState.from_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise ClusterError(f"{path}: unreadable cluster state ({exc}); remove it once no process of "
                           "the cluster runs") from None


def write_state(root: Path, state: ClusterState) -> None:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (STATE_FILE + ".tmp")
    tmp.write_text(state.to_json())
    os.replace(tmp, root / STATE_FILE)


def clear_state(root: Path) -> None:
    (root / STATE_FILE).unlink(missing_ok=True)
