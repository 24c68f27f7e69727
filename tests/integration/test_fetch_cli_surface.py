"""``splitserve fetch`` spoken the way huggingface-cli users speak: --local-dir, --token; and the
messages for a wrong revision and a folder that is not there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hubserver import HubServer, sha256_file

REPO = "org/Tiny-GGUF"
CLI = [sys.executable, "-c", "from splitserve.cli import main; main()"]


def _fetch(hub: HubServer, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    return subprocess.run([*CLI, "fetch", *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def _one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("splitserve: error:") and needle in lines[0], proc.stderr


def test_token_flag_and_local_dir(tmp_path: Path) -> None:
    data = os.urandom(300_000)
    with HubServer(tmp_path / "srv", token="hf_sekret") as hub:  # every repository private
        f = hub.add_file(REPO, "Q8_0/Tiny-Q8_0.gguf", data)
        out = tmp_path / "models"
        denied = _fetch(hub, tmp_path, REPO, "--quant", "Q8_0", "--local-dir", str(out), "-q")
        _one_line_error(denied, "HF_TOKEN")
        ok = _fetch(
            hub, tmp_path, REPO, "--quant", "Q8_0", "--local-dir", str(out), "--token", "hf_sekret", "-n", "2", "-q"
        )
        assert ok.returncode == 0, ok.stderr
        got = out / "Q8_0" / "Tiny-Q8_0.gguf"
        assert sha256_file(got) == f.sha256
        assert "hf_sekret" not in ok.stdout + ok.stderr


def test_unknown_revision_and_missing_folder_are_named(tmp_path: Path) -> None:
    with HubServer(tmp_path / "srv") as hub:
        hub.add_file(REPO, "config.json", b"{}")
        _one_line_error(
            _fetch(hub, tmp_path, REPO, "--revision", "no-such-branch", "--dir", str(tmp_path / "o")),
            "no revision 'no-such-branch'",
        )
        _one_line_error(
            _fetch(hub, tmp_path, "org/Missing", "--revision", "v1", "--dir", str(tmp_path / "o")),
            "repository not found",
        )
        _one_line_error(_fetch(hub, tmp_path, "--verify", str(tmp_path / "nowhere")), "no such folder")


def test_files_named_after_the_repo_like_huggingface_cli(tmp_path: Path) -> None:
    with HubServer(tmp_path / "srv") as hub:
        hub.add_file(REPO, "config.json", b"{}")
        hub.add_file(REPO, "README.md", b"# hi")
        hub.add_file(REPO, "Q8_0/Tiny-Q8_0.gguf", os.urandom(100_000))
        out = tmp_path / "o"
        ok = _fetch(hub, tmp_path, REPO, "config.json", "*.md", "--dir", str(out), "-q")
        assert ok.returncode == 0, ok.stderr
        assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["README.md", "config.json"]
        _one_line_error(_fetch(hub, tmp_path, REPO, "nothere.bin", "--dir", str(out)), "'nothere.bin'")
        _one_line_error(_fetch(hub, tmp_path, REPO, "config.json", "--verify", str(out)), "leave out REPO")


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    with HubServer(tmp_path / "srv") as hub:
        hub.add_file(REPO, "config.json", b"{}")
        afile = tmp_path / "afile"
        afile.write_text("x")
        _one_line_error(_fetch(hub, tmp_path, REPO, "--dir", str(afile)), "that is a file, not a folder")
        _one_line_error(
            _fetch(hub, tmp_path, REPO, "--dir", str(tmp_path / "o"), "--stall-timeout", "0"), "--stall-timeout 0"
        )
        _one_line_error(_fetch(hub, tmp_path, REPO, "--dir", str(tmp_path / "o"), "--retries", "-1"), "--retries -1")
        _one_line_error(_fetch(hub, tmp_path, "a/b/c", "--dir", str(tmp_path / "o")), "not a repository id")
        _one_line_error(_fetch(hub, tmp_path, "org/Missing", "--dir", str(tmp_path / "o")), "not found")
