"""Prepare build/linkdelay/ for bench_link_delay_llamabench.py on a bare machine (the GPU box):
the engine's ggml-rpc-server, llama-bench and their libraries, and a GGUF with SmolLM2-135M's
shape (30 layers, 576 wide, 49152 vocab, Q4_1) and zero weights, gzipped (a few hundred KB).

    .venv/bin/python benchmarks/make_linkdelay_kit.py
    # then, there: gunzip -k build/linkdelay/zero.gguf.gz &&
    #   python3 benchmarks/bench_link_delay_llamabench.py --bin build/linkdelay/bin --model build/linkdelay/zero.gguf
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf_factory import dense_llama  # noqa: E402

from splitserve.engine import get_engine  # noqa: E402


def main() -> None:
    kit = ROOT / "build" / "linkdelay"
    bin_dir = kit / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    engine = get_engine()
    for f in engine.bin_dir.iterdir():
        if f.name in ("ggml-rpc-server", "llama-bench") or f.name.startswith(("libggml", "libllama", "libmtmd")):
            dest = bin_dir / f.name
            dest.unlink(missing_ok=True)
            if f.is_symlink():
                dest.symlink_to(f.readlink())
            else:
                shutil.copy2(f, dest)
    raw = kit / "zero.gguf"
    dense_llama(raw, n_layer=30, n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, n_vocab=49152, qtype=Q.Q4_1,
                tied=True, n_ctx_train=8192)
    with open(raw, "rb") as src, gzip.open(kit / "zero.gguf.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    raw.unlink()
    print(f"wrote {kit} (engine {engine.key})")


if __name__ == "__main__":
    main()
