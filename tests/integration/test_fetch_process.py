"""``splitserve fetch`` as a real process: SIGKILL and resume, flat memory, the CLI surface."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import ctrl_c_default
from hubserver import HubServer, sha256_file, zeros_sha256
from splitserve.fetch import MANIFEST
from splitserve.fetch._state import partial_path, read_state_segments, state_path

MiB = 1 << 20
REPO = "org/Big-GGUF"
CLI = [sys.executable, "-c", "from splitserve.cli import main; main()"]


def _env(hub: HubServer, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(home / "hf"),
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "COLUMNS": "120",
    }
    return env


def _cli(hub: HubServer, tmp: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*CLI, "fetch", *args], env=_env(hub, tmp), capture_output=True, check=False, text=True, timeout=120
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[HubServer]:
    with HubServer(tmp_path / "srv") as server:
        yield server


@pytest.mark.slow
def test_sigkill_mid_download_then_resume(hub: HubServer, tmp_path: Path) -> None:
    name = "Q4_K_M/Big-Q4_K_M-00001-of-00001.gguf"
    f = hub.add_file(REPO, name, os.urandom(48 * MiB))
    hub.cap_bps = 3 * MiB  # per connection: the first run takes ~4 s, long enough to kill it
    out = tmp_path / "out"
    final = out / name
    args = [REPO, "--quant", "Q4_K_M", "--dir", str(out), "--connections", "4", "--part-size", "2", "--quiet"]
    proc = subprocess.Popen(
        [*CLI, "fetch", *args], env=_env(hub, tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            segs = read_state_segments(final)
            if sum(1 for s, e, d in segs if d == e - s) >= 6:
                break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    at_kill = read_state_segments(final)  # what the killed process had recorded as on disk
    done = [(s, s + d) for s, e, d in at_kill if d > 0]
    finished = [(s, e) for s, e, d in at_kill if d == e - s]
    assert len(finished) >= 6 and not final.exists() and partial_path(final).exists()
    served_before = hub.bytes_served(name)
    assert served_before < f.size

    hub.cap_bps = None
    mark = len(hub.log)
    _cli(hub, tmp_path, *args)
    second = hub.served(name, since=mark)
    # nothing the killed run had recorded was asked for, or sent, again
    for s in second:
        for a, b in done:
            assert s.start + s.sent <= a or s.start >= b, (s, (a, b))
    assert sum(s.sent for s in second) <= f.size - sum(b - a for a, b in done) + 8 * MiB
    assert sha256_file(final) == f.sha256
    assert not state_path(final).exists() and not partial_path(final).exists()


@pytest.mark.slow
def test_ctrl_c_stops_promptly_and_the_next_run_resumes(hub: HubServer, tmp_path: Path) -> None:
    name = "Big-Q8_0.gguf"
    f = hub.add_file(REPO, name, os.urandom(24 * MiB))
    hub.cap_bps = 2 * MiB
    out = tmp_path / "out"
    args = [REPO, "--include", name, "--dir", str(out), "--connections", "4", "--part-size", "1"]
    proc = subprocess.Popen(
        [*CLI, "fetch", *args],
        env=_env(hub, tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_default,
    )
    try:
        while sum(1 for s, e, d in read_state_segments(out / name) if d == e - s) < 4:
            assert proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)  # a stalled read must not hold it up
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "run the same command again to resume" in err
    kept = sum(d for s, e, d in read_state_segments(out / name))
    assert kept >= 4 * MiB and partial_path(out / name).exists()
    hub.cap_bps = None
    mark = len(hub.log)
    _cli(hub, tmp_path, *args)
    assert hub.bytes_served(name, since=mark) <= f.size - kept
    assert sha256_file(out / name) == f.sha256


@pytest.mark.slow
def test_memory_stays_flat_on_a_multi_gb_file(hub: HubServer, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    size = 1024 * MiB
    with open(big, "wb") as fh:
        fh.truncate(size)  # sparse: the server streams holes from disk at no cost
    hub.add_file(REPO, "big.gguf", big, sha256=zeros_sha256(size))
    small_size = 128 * MiB  # big enough that all 16 connections are busy: same working set
    with open(tmp_path / "small.bin", "wb") as fh:
        fh.truncate(small_size)
    hub.add_file(REPO, "small.gguf", tmp_path / "small.bin", sha256=zeros_sha256(small_size))

    def peak_rss(include: str) -> int:
        out = tmp_path / f"out-{include}"
        proc = subprocess.Popen(
            [*CLI, "fetch", REPO, "--include", include, "--dir", str(out), "--connections", "16", "--quiet"],
            env=_env(hub, tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
        return usage.ru_maxrss * 1024  # kilobytes on Linux

    try:
        small = peak_rss("small.gguf")
        large = peak_rss("big.gguf")
        out_big = tmp_path / "out-big.gguf" / "big.gguf"
        assert out_big.stat().st_size == size
    finally:
        for p in (
            big,
            tmp_path / "out-big.gguf" / "big.gguf",
            tmp_path / "small.bin",
            partial_path(tmp_path / "out-big.gguf" / "big.gguf"),
            tmp_path / "out-small.gguf" / "small.gguf",
        ):
            p.unlink(missing_ok=True)
    # 8 times the bytes (and 4 times the part size), yet the peak stays where it was;
    # holding parts in memory would add ~100 MiB here, a leak per byte far more
    assert large - small < 32 * MiB, (small / MiB, large / MiB)


@pytest.fixture()
def small_repo(hub: HubServer) -> HubServer:
    for i in (1, 2, 3):
        hub.add_file(REPO, f"Big-UD-IQ2_XXS-0000{i}-of-00003.gguf", os.urandom(2 * MiB + i))
    hub.add_file(REPO, "Big-Q8_0.gguf", os.urandom(MiB))
    return hub


def test_cli_dry_run_json_lists_the_shard_set(small_repo: HubServer, tmp_path: Path) -> None:
    proc = _cli(
        small_repo, tmp_path, REPO, "--quant", "UD-IQ2_XXS", "--dir", str(tmp_path / "o"), "--dry-run", "--json"
    )
    data = json.loads(proc.stdout)
    assert [f["path"] for f in data["files"]] == [f"Big-UD-IQ2_XXS-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert data["todo"] == data["total"] == 6 * MiB + 6
    assert small_repo.log == [] and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_cli_fetch_then_verify_catches_a_flipped_byte(small_repo: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = _cli(small_repo, tmp_path, REPO, "--quant", "UD-IQ2_XXS", "--dir", str(out), "--json")
    result = json.loads(proc.stdout)
    assert result["models"] == [str(out / "Big-UD-IQ2_XXS-00001-of-00003.gguf")]
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, ".splitserve-fetch.lock"] + [
        f"Big-UD-IQ2_XXS-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    ok = _cli(small_repo, tmp_path, "--verify", str(out))
    assert "3 of 3 files verified" in ok.stdout
    victim = out / "Big-UD-IQ2_XXS-00002-of-00003.gguf"
    with open(victim, "r+b") as fh:
        fh.seek(12345)
        b = fh.read(1)
        fh.seek(12345)
        fh.write(bytes([b[0] ^ 1]))
    (out / "Big-UD-IQ2_XXS-00003-of-00003.gguf").unlink()
    bad = _cli(small_repo, tmp_path, "--verify", str(out), "--json", check=False)
    assert bad.returncode == 1
    status = {i["path"]: i["status"] for i in json.loads(bad.stdout)["files"]}
    assert status == {
        "Big-UD-IQ2_XXS-00001-of-00003.gguf": "ok",
        "Big-UD-IQ2_XXS-00002-of-00003.gguf": "hash",
        "Big-UD-IQ2_XXS-00003-of-00003.gguf": "missing",
    }
    # a second --verify still fails: the corrupt shard stays marked until it is fetched again
    again = _cli(small_repo, tmp_path, "--verify", str(out), check=False)
    assert again.returncode == 1, again.stdout
    assert "1 of 3 files verified" in again.stdout and "corrupt" in again.stdout
    # fetching again repairs exactly the two bad files
    mark = len(small_repo.log)
    _cli(small_repo, tmp_path, REPO, "--quant", "UD-IQ2_XXS", "--dir", str(out))
    assert {s.path for s in small_repo.served(since=mark)} == {
        "Big-UD-IQ2_XXS-00002-of-00003.gguf",
        "Big-UD-IQ2_XXS-00003-of-00003.gguf",
    }
    _cli(small_repo, tmp_path, "--verify", str(out))


def test_cli_user_errors_are_one_line(small_repo: HubServer, tmp_path: Path) -> None:
    bad = _cli(small_repo, tmp_path, REPO, "--quant", "Q2_K", "--dir", str(tmp_path / "o"), check=False)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "UD-IQ2_XXS" in lines[0] and "Traceback" not in bad.stderr
    missing = _cli(small_repo, tmp_path, "org/Nope", check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
