"""GPU clocks and power state from nvidia-smi's CSV (fixtures in its own format), the throttle and
low-power warnings, the preflight row, and the query script's fallback for older drivers."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from splitserve._node import LocalNode
from splitserve.cluster._gpu import GPU_QUERY_SCRIPT, gpu_rows, parse_nvidia_smi, read_gpu_state

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia_smi"


def report(name: str):  # type: ignore[no-untyped-def]
    return parse_nvidia_smi((FIX / name).read_text())


def test_idle_h200s_parse_and_do_not_warn() -> None:
    r = report("h200_idle.csv")
    assert [g.index for g in r.gpus] == [0, 1]
    g = r.gpus[0]
    assert (g.name, g.pstate, g.sm_mhz, g.max_sm_mhz, g.power_w, g.power_limit_w) == (
        "NVIDIA H200",
        "P0",
        345.0,
        1980.0,
        76.12,
        700.0,
    )
    assert g.idle and g.reason_names == ["GPU idle"] and r.warnings() == []
    assert g.text() == "GPU0 NVIDIA H200: P0, SM 345/1980 MHz, 76.1 W (GPU idle)"


def test_a_power_capped_gpu_is_throttled() -> None:
    r = report("h200_busy_power_cap.csv")
    (w,) = r.warnings()
    assert w.startswith("GPU0 (NVIDIA H200) is throttled: SW power cap (SM 1755/1980 MHz)") and "nvidia-smi -pl" in w


def test_a_spark_held_low_while_busy_is_a_low_power_state() -> None:
    r = report("gb10_degraded.csv")
    g = r.gpus[0]
    assert g.power_limit_w is None and g.reasons == 0  # [N/A] on GB10
    (w,) = r.warnings()
    assert "GPU0 (NVIDIA GB10) is in a low power state while not idle (P0, SM 611/3003 MHz)" in w
    assert "USB-PD" in w


def test_hw_slowdown_and_power_brake_name_the_power_supply() -> None:
    warnings = report("gb10_hw_slowdown.csv").warnings()
    assert "throttled: HW slowdown, HW power brake slowdown" in warnings[0] and "240 W adapter" in warnings[0]
    assert len(warnings) == 2  # and 850 of 3003 MHz while busy


def test_thermal_throttling_without_units() -> None:
    r = report("rtx4090_hot_nounits.csv")
    g = r.gpus[0]
    assert (g.sm_mhz, g.max_sm_mhz, g.power_w) == (2205.0, 3120.0, 402.33)
    (w,) = r.warnings()
    assert "SW thermal slowdown, HW thermal slowdown" in w and "cool it down" in w


def test_older_drivers_throttle_reasons_field_and_a_low_pstate() -> None:
    r = report("v100_old_driver.csv")
    assert {g.reasons_field for g in r.gpus} == {"clocks_throttle_reasons.active"}
    (w,) = r.warnings()
    assert w.startswith("GPU1 (Tesla V100-SXM2-32GB) is in a low power state while not idle (P8, SM 135/1530 MHz)")


def test_no_nvidia_smi_or_a_failing_driver_is_a_note() -> None:
    assert parse_nvidia_smi("__splitserve_no_nvidia_smi__\n").note == "no NVIDIA GPU (nvidia-smi not found)"
    r = report("driver_missing.txt")
    assert r.gpus == [] and r.note is not None and r.note.startswith("nvidia-smi failed: NVIDIA-SMI has failed")


def test_preflight_rows() -> None:
    rows = gpu_rows(
        {
            "local": report("h200_idle.csv"),
            "spark2": report("gb10_degraded.csv"),
            "cpu": parse_nvidia_smi("__splitserve_no_nvidia_smi__"),
            "broken": report("driver_missing.txt"),
        },
        {"local": ["head"], "spark2": ["w1"], "cpu": ["w2", "w3"], "broken": ["w4"]},
    )
    by = {r.node: r for r in rows}
    assert by["head"].status == "pass" and by["head"].check == "gpu-state" and "SM 345/1980 MHz" in by["head"].message
    assert by["w1"].status == "warn" and "low power state" in by["w1"].message
    assert by["w1"].fix.startswith("look at `nvidia-smi -q -d PERFORMANCE,POWER` on w1")
    assert by["w2"].status == by["w3"].status == "pass" and by["w2"].message.startswith("no NVIDIA GPU")
    assert by["w4"].status == "warn" and by["w4"].message.startswith("nvidia-smi failed")


@pytest.fixture()
def fake_smi_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An nvidia-smi of an older driver: it refuses clocks_event_reasons the way nvidia-smi does."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in *clocks_event_reasons*) echo \'Field "clocks_event_reasons.active" is not a valid field '
        "to query.'; exit 2;; esac\n"
        f"cat {FIX / 'v100_old_driver.csv'}\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    return smi


def test_the_query_script_falls_back_to_the_older_field(fake_smi_path: Path) -> None:
    r = read_gpu_state(LocalNode())
    assert [g.name for g in r.gpus] == ["Tesla V100-SXM2-32GB"] * 2
    assert "clocks_event_reasons.active" in GPU_QUERY_SCRIPT and "clocks_throttle_reasons.active" in GPU_QUERY_SCRIPT


def test_the_query_script_on_a_machine_without_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sh").symlink_to(shutil.which("sh") or "/bin/sh")
    monkeypatch.setenv("PATH", str(tmp_path))  # sh and nothing else: no nvidia-smi
    assert read_gpu_state(LocalNode()).note == "no NVIDIA GPU (nvidia-smi not found)"


def test_preflight_reads_each_reachable_nodes_gpus(fake_smi_path: Path) -> None:
    from splitserve.cluster import parse_spec
    from splitserve.cluster._preflight import _gpu_state_rows

    spec = parse_spec({"model": "/m.gguf", "workers": [{"name": "w1", "host": "local", "bind": "127.0.0.1"}]})
    rows = _gpu_state_rows(spec, ["local", "gone"], {"local": object(), "gone": None}, {"local": ["head", "w1"]})  # type: ignore[dict-item]
    assert [(r.node, r.status) for r in rows] == [("head", "warn"), ("w1", "warn")]  # the V100 at P8, busy
    assert "GPU1 (Tesla V100-SXM2-32GB) is in a low power state" in rows[0].message


def test_an_idle_h200_as_nvidia_smi_printed_it_is_not_throttled() -> None:
    # Captured on the device machine (driver 580.159.04) with more fields than the check asks
    # for, the event reasons' column twice (its older name is an alias) and the HW slowdown
    # columns as "Not Active": an idle GPU at 345 of 1980 MHz is only "GPU idle".
    r = report("h200_idle_captured.csv")
    [g] = r.gpus
    assert (g.pstate, g.sm_mhz, g.max_sm_mhz, g.power_w, g.reasons) == ("P0", 345.0, 1980.0, 77.05, 1)
    assert g.idle and r.warnings() == []
