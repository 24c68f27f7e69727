"""The README's fetch line, run as written against a local stand-in of the hub, puts the model
where the README's spec says and ends by printing that very ``model = "..."`` line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from hubserver import HubServer

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_fetch_prints_the_readme_model_line(tmp_path: Path) -> None:
    text = README.read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("splitserve fetch ")]
    command = line.split("  #", 1)[0].strip()
    spec_block = next(b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if b.startswith("# cluster.toml"))
    model_line = next(ln for ln in spec_block.splitlines() if ln.startswith("model"))
    model = tomllib.loads(spec_block)["model"]

    words = command.split()
    repo = words[2]
    shard = Path(model).name
    total = int(re.search(r"-of-(\d+)\.gguf$", shard).group(1))  # type: ignore[union-attr]
    home = tmp_path / "home"
    home.mkdir()
    with HubServer(tmp_path / "srv") as hub:
        quant = words[words.index("--quant") + 1]
        for i in range(1, total + 1):
            name = shard.replace("-00001-of-", f"-{i:05d}-of-")
            hub.add_file(repo, f"{quant}/{name}", os.urandom(50_000))
        hub.add_file(repo, "Q8_0/other-Q8_0.gguf", os.urandom(1000))
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env |= {"HOME": str(home), "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf")}
        # `splitserve` as the README's shell runs it: ~ expanded by bash, this checkout's CLI.
        shim = tmp_path / "bin"
        shim.mkdir()
        (shim / "splitserve").write_text(f'#!/bin/sh\nexec {sys.executable} -m splitserve "$@"\n')
        (shim / "splitserve").chmod(0o755)
        env["PATH"] = f"{shim}:{env['PATH']}"
        proc = subprocess.run(
            ["bash", "-c", command + " -q"], env=env, capture_output=True, text=True, timeout=120, check=False
        )
    assert proc.returncode == 0, proc.stderr
    printed = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert printed[-1] == f'model = "{model}"', proc.stdout
    assert model_line.split("#")[0].strip() == printed[-1]
    assert Path(model.replace("~", str(home), 1)).is_file()
