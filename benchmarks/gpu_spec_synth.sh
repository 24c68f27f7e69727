#!/usr/bin/env bash
# Speculation over RPC on one GPU machine: the head plus one loopback RPC worker on the same
# GPU (every token crosses one RPC hop), a synthetic Qwen3-MoE target and a tiny synthetic draft
# of the same vocabulary, then benchmarks/bench_spec_synth.py.
#
#   benchmarks/gpu_spec_synth.sh prepare WORK SOURCE.tar.gz   # CUDA engine + the two models
#   benchmarks/gpu_spec_synth.sh run WORK OUT K_LIST [ACCEPT_LIST] [--no-baseline]
#
# WORK keeps the engine (SPLITSERVE_CACHE=WORK/cache) and the models between the two steps.
# Environment: CUDA_ARCH=90, JOBS=16, DECODE_BOUND (t/s, the planner's bound for the target).
set -euo pipefail
cd "$(dirname "$0")/.."
step=$1 WORK=$(mkdir -p "$2" && cd "$2" && pwd)
export SPLITSERVE_CACHE=$WORK/cache SPLITSERVE_STATE=$WORK/state
SS="python3 -m splitserve"

if [ "$step" = prepare ]; then
    $SS engine build --backend cuda --cuda-arch "${CUDA_ARCH:-90}" --jobs "${JOBS:-16}" --source "$3"
    python3 benchmarks/make_synthetic_moe.py "$WORK/moe.gguf" --layers 24 --embd 4096 --heads 32 \
        --kv-heads 4 --experts 64 --used 8 --ff-exp 1024 --vocab 32000 --qtype Q4_K
    python3 benchmarks/make_synthetic_moe.py "$WORK/draft.gguf" --layers 2 --embd 256 --heads 4 \
        --kv-heads 2 --experts 4 --used 2 --ff-exp 128 --vocab 32000 --qtype Q8_0
    ls -la "$WORK"
    exit 0
fi

OUT=$3 KS=$4 ACCEPT=${5:-0,0.5,1}
ENGINE=$($SS engine info --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['root'])" \
         || ls -d "$SPLITSERVE_CACHE"/engines/*cuda* | head -1)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cat > "$WORK/spec.toml" <<EOF
name = "specsynth"
model = "$WORK/moe.gguf"
engine = "$ENGINE"

[head]
devices = ["CUDA0"]

[[workers]]
name = "w1"
bind = "127.0.0.1"
port = $(free_port)
devices = ["CUDA0"]
cache = false

[server]
host = "127.0.0.1"
port = $(free_port)
ctx_size = 4096
parallel = 1
flash_attn = "on"

[gateway]
enabled = false
EOF
python3 benchmarks/bench_spec_synth.py --spec "$WORK/spec.toml" --draft "$WORK/draft.gguf" --out "$OUT" \
    --draft-lengths "$KS" --accept "$ACCEPT" ${DECODE_BOUND:+--decode-bound $DECODE_BOUND} \
    --title "1x H200, head + loopback RPC worker, synthetic Qwen3-MoE 20.5B (10.8 GiB)" "${@:6}"
