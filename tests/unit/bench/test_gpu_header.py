"""bench records each GPU's clocks and power state in its run header (none on a CPU machine,
said so), and warns before a benchmark when a GPU is throttled or held low."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

import splitserve.cli._bench  # noqa: F401  (registers bench)
from splitserve.bench._machine import gpu_clocks_text, machine_info
from splitserve.bench._records import BenchRun
from splitserve.bench._report import _header
from splitserve.cli._app import app
from splitserve.cluster._gpu import parse_nvidia_smi

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia_smi"


def machine(fixture: str) -> dict[str, object]:
    return {"hostname": "box", "gpu_state": parse_nvidia_smi((FIX / fixture).read_text()).as_dict()}


def test_the_header_has_each_gpus_clocks() -> None:
    text = gpu_clocks_text(machine("h200_idle.csv"))
    assert text == (
        "GPU0 NVIDIA H200 P0, SM 345/1980 MHz, 76 W (GPU idle); GPU1 NVIDIA H200 P0, SM 345/1980 MHz, 75 W (GPU idle)"
    )
    header = _header(BenchRun(kind="speed", id="speed-x", machine=machine("h200_idle.csv")))
    assert f"- GPU clocks at the start: {text}" in header and "- warning:" not in header


def test_a_throttled_gpu_is_a_warning_in_the_header() -> None:
    header = _header(BenchRun(kind="speed", id="speed-x", machine=machine("gb10_degraded.csv")))
    assert "- GPU clocks at the start: GPU0 NVIDIA GB10 P0, SM 611/3003 MHz, 11 W" in header
    assert "- warning: GPU0 (NVIDIA GB10) is in a low power state while not idle" in header


def test_a_cpu_machine_says_it_has_none() -> None:
    assert gpu_clocks_text({"gpu_state": parse_nvidia_smi("__splitserve_no_nvidia_smi__").as_dict()}) == (
        "none (no NVIDIA GPU (nvidia-smi not found))"
    )
    assert gpu_clocks_text({}) == "not recorded"  # a run file from before


@pytest.fixture()
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-smi printing the power-capped H200 fixture."""
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\ncat {FIX / 'h200_busy_power_cap.csv'}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_machine_info_records_the_gpu_state(smi: None) -> None:
    state = machine_info()["gpu_state"]
    assert [g["sm_mhz"] for g in state["gpus"]] == [1755.0, 1980.0]
    assert state["warnings"][0].startswith("GPU0 (NVIDIA H200) is throttled: SW power cap")


def test_bench_warns_before_it_starts(smi: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # the warning comes before anything is measured (here a bad option ends the command)
    res = CliRunner().invoke(app, ["bench", "speed", "--url", "http://127.0.0.1:1", "--concurrency", "x"])
    assert res.exit_code != 0
    warning = res.stderr.index("warning: GPU0 (NVIDIA H200) is throttled: SW power cap")
    assert warning < res.stderr.index("splitserve: error: --concurrency")
