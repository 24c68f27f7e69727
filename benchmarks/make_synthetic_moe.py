"""Write a synthetic Qwen3-MoE GGUF for speed measurements (no real weights exist here).

    python benchmarks/make_synthetic_moe.py OUT.gguf [--layers 32] [--embd 4096] [--experts 64]
        [--used 8] [--ff-exp 1536] [--qtype Q4_K]

The tensor table is what a real model of that shape has; the data is zeros
(a valid bit pattern for every GGML type) except the expert routers
(``ffn_gate_inp``), which get random values so tokens spread over the experts
as they do in a trained model. Speed only: the model's text is meaningless.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gguf import GGMLQuantizationType, GGUFReader  # noqa: E402

from gguf_factory import moe_qwen3  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--embd", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--used", type=int, default=8)
    ap.add_argument("--ff-exp", type=int, default=1536)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--qtype", default="Q4_K")
    ap.add_argument("--ctx-train", type=int, default=131072, help="the model's training context")
    args = ap.parse_args()
    qtype = GGMLQuantizationType[args.qtype]
    (path,) = moe_qwen3(args.out, n_layer=args.layers, n_embd=args.embd, n_head=args.heads,
                        n_head_kv=args.kv_heads, d=args.embd // args.heads, n_expert=args.experts,
                        n_expert_used=args.used, n_ff_exp=args.ff_exp, n_vocab=args.vocab, qtype=qtype,
                        n_ctx_train=args.ctx_train)
    rng = np.random.default_rng(0)
    reader = GGUFReader(path)
    routers = [(int(t.data_offset), int(t.n_bytes)) for t in reader.tensors if "ffn_gate_inp" in t.name]
    norms = [(int(t.data_offset), int(t.n_bytes)) for t in reader.tensors if t.name.endswith("norm.weight")]
    del reader
    with open(path, "r+b") as fh:
        for offset, size in routers:
            fh.seek(offset)
            fh.write(rng.standard_normal(size // 4).astype(np.float32).tobytes())
        for offset, size in norms:  # RMS-norm weights of 1, as in a fresh model
            fh.seek(offset)
            fh.write(np.ones(size // 4, dtype=np.float32).tobytes())
    print(f"wrote {path} ({path.stat().st_size / 2**30:.2f} GiB, {len(routers)} routers randomised)")


if __name__ == "__main__":
    main()
