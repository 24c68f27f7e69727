"""A fetched split GGUF lands the way llama.cpp expects, and loads."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gguf_factory import dense_llama
from hubserver import HubServer
from splitserve.fetch import FetchOptions
from splitserve.fetch._fetch import fetch
from splitserve.fetch._hub import HfHub
from splitserve.model import inspect_model, shard_paths

REPO = "org/Tiny-GGUF"


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[HubServer, list[Path]]]:
    src = tmp_path / "src"
    src.mkdir()
    shards = dense_llama(
        src / "Tiny-Q8_0.gguf", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=512, n_shards=3
    )
    other = dense_llama(src / "Tiny-F16.gguf", n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)
    with HubServer(tmp_path / "srv") as hub:
        for p in shards:
            hub.add_file(REPO, f"Q8_0/{p.name}", p)
        hub.add_file(REPO, other[0].name, other[0])
        hub.add_file(REPO, "config.json", b"{}")
        yield hub, shards


def test_quant_lands_as_one_folder_of_llama_cpp_shards(served: tuple[HubServer, list[Path]], tmp_path: Path) -> None:
    hub, shards = served
    out = tmp_path / "models"
    result = fetch(
        FetchOptions(REPO, quants=["Q8_0"], dir=out, connections=4), hub=HfHub(endpoint=hub.endpoint, token="")
    )
    first = out / "Q8_0" / "Tiny-Q8_0-00001-of-00003.gguf"
    assert result.models == [first]
    assert sorted(p.name for p in (out / "Q8_0").iterdir()) == [p.name for p in shards]
    assert not (out / "Tiny-F16.gguf").exists()
    # the model layer (what `inspect` and `plan` use) reads the result directly
    assert shard_paths(first) == [out / "Q8_0" / p.name for p in shards]
    info = inspect_model(first)
    assert info.architecture == "llama" and info.n_layer == 4
    # and so does `splitserve inspect`, on the path the fetch printed
    proc = subprocess.run(
        [sys.executable, "-c", "from splitserve.cli import main; main()", "inspect", str(first)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "3 shards" in proc.stdout


@pytest.mark.engine
def test_llama_cpp_loads_the_fetched_shards(
    served: tuple[HubServer, list[Path]], tmp_path: Path, engine: object
) -> None:
    hub, _ = served
    out = tmp_path / "models"
    result = fetch(
        FetchOptions(REPO, quants=["Q8_0"], dir=out, connections=4), hub=HfHub(endpoint=hub.endpoint, token="")
    )
    bench = engine.bench  # type: ignore[attr-defined]
    proc = subprocess.run(
        [str(bench), "-m", str(result.models[0]), "-p", "8", "-n", "0", "-r", "1", "-t", "1", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"n_prompt": 8' in proc.stdout
