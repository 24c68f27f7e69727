"""`up --dry-run` with the real engine build: -ot / --cpu-moe / --n-cpu-moe in
server.extra_args turn the pinned llama.cpp's pipeline parallelism over RPC off, and the dry
run's plan says so next to the flag (the rules themselves: tests/unit/plan/
test_tensor_override_warning.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gguf_factory import dense_llama

pytestmark = [pytest.mark.engine]

SPEC = """
name = "t"
model = "{model}"
[[workers]]
name = "w1"
port = 50052
memory_gib = 2
[[workers]]
name = "w2"
port = 50053
memory_gib = 2
[server]
ctx_size = 2048
extra_args = ["-ncmoe", "2"]
"""


def test_up_dry_run_shows_the_warning(engine: object, tmp_path: Path) -> None:
    [model] = dense_llama(tmp_path / "d.gguf", n_layer=6, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024)
    spec = tmp_path / "c.toml"
    spec.write_text(SPEC.format(model=model))
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "up", "-c", str(spec), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert any("-ncmoe" in ln and "pipeline parallelism" in ln for ln in res.stdout.splitlines()), res.stdout
