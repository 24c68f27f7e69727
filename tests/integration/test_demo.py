"""`splitserve demo`: SmolLM2 over two local RPC workers, one chat through the gateway, speeds and
memory per worker, then nothing left running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.engine]


def test_demo_runs_and_leaves_nothing(engine, state_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "demo.json"
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "demo", "-o", str(out)], capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(out.read_text())
    assert data["reply"].strip() and data["completion_tokens"] >= 1
    assert data["prompt_per_second"] > 0 and data["predicted_per_second"] > 0  # timings via the gateway
    assert {d["node"] for d in data["memory"] if d["model_bytes"] > 0} >= {"w1", "w2"}
    assert "stopped everything" in res.stdout
    assert not list(Path(state_home).rglob("state.json"))  # down cleared the state
