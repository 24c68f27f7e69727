"""-ot / --cpu-moe / --n-cpu-moe in server.extra_args turn the pinned llama.cpp's pipeline
parallelism over RPC off without a word: `plan` and `up` warn, naming the effect and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gguf_factory import dense_llama
from splitserve.cluster import load_spec
from splitserve.cluster._down import check_serving
from splitserve.plan import tensor_override_warning
from splitserve.plan._spec import tensor_override_flags

SPEC = """
name = "t"
model = "{model}"
{workers}
[server]
ctx_size = 2048
extra_args = {extra}
"""
WORKER = '\n[[workers]]\nname = "w{i}"\nport = {port}\nmemory_gib = 2\n'


def spec(tmp_path: Path, extra: str, n_workers: int = 2) -> Path:
    [model] = dense_llama(tmp_path / "d.gguf", n_layer=6, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024)
    workers = "".join(WORKER.format(i=i + 1, port=50052 + i) for i in range(n_workers))
    f = tmp_path / "c.toml"
    f.write_text(SPEC.format(model=model, workers=workers, extra=extra))
    return f


def test_the_override_flags_in_every_spelling() -> None:
    assert tensor_override_flags(["-ot", "exps=CPU"]) == ["-ot"]
    assert tensor_override_flags(["--override-tensor=exps=CPU", "--cpu-moe"]) == ["--override-tensor", "--cpu-moe"]
    assert tensor_override_flags(["-ncmoe", "8", "--n-cpu-moe", "8"]) == ["-ncmoe", "--n-cpu-moe"]
    # the draft model's own offload and unrelated flags are not overrides of the split model
    assert tensor_override_flags(["--spec-draft-cpu-moe", "-cmoed", "--threads", "8", "exps=CPU"]) == []
    assert tensor_override_warning([]) is None


def test_warning_names_the_flag_the_effect_and_the_fix() -> None:
    w = tensor_override_warning(["--n-cpu-moe", "12"])
    assert w is not None
    assert "--n-cpu-moe" in w and "pipeline parallelism" in w and "silently" in w and "tensor_split" in w


@pytest.mark.parametrize("extra", ['["-ot", "ffn_.*=CPU"]', '["--cpu-moe"]', '["--n-cpu-moe", "4"]'])
def test_up_warns_before_it_starts(tmp_path: Path, extra: str) -> None:
    warnings = check_serving(load_spec(spec(tmp_path, extra)))  # the first thing `up` (and --dry-run) reads
    assert any("pipeline parallelism" in w for w in warnings), warnings


def test_up_without_overrides_has_no_such_warning(tmp_path: Path) -> None:
    warnings = check_serving(load_spec(spec(tmp_path, '["--threads", "4"]')))
    assert not any("pipeline parallelism" in w for w in warnings)


def test_plan_prints_the_warning(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "plan", "-c", str(spec(tmp_path, '["--cpu-moe"]'))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("warning:")]
    assert any("--cpu-moe" in ln and "pipeline parallelism over RPC off" in ln for ln in lines), res.stdout
    clean = subprocess.run(
        [sys.executable, "-m", "splitserve", "plan", "-c", str(spec(tmp_path, "[]"))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert clean.returncode == 0 and "pipeline parallelism" not in clean.stdout + clean.stderr
