#!/usr/bin/env bash
# Speed figures on one GPU machine: a head plus one loopback RPC worker, then
# `bench speed`, `bench sweep --set ubatch=...`, `bench context`, `bench engine`
# and a report of all of them.
#
#   benchmarks/gpu_bench.sh ENGINE_DIR MODEL.gguf OUT_DIR
#
# ENGINE_DIR: an engine folder (`splitserve engine info` -> root) or a folder of
# llama.cpp binaries (llama-server, ggml-rpc-server, llama-bench).
# Everything binds to 127.0.0.1.  Settings (environment, with defaults):
#   WORKER_DEVICES=CUDA0   devices the RPC worker offers (empty: all)
#   HEAD_DEVICES=CUDA0     the head's own devices (empty: let llama.cpp pick)
#   FLASH_ATTN=on          SPEED_CTX=65536 SPEED_PARALLEL=8
#   PROMPTS=512,4096       GEN=128  CONCURRENCY=1,2,4,8  REPEAT=3
#   UBATCHES=512,1024,2048 SWEEP_PROMPT=4096
#   LENGTHS=8k,32k,64k     DEPTHS=0.1,0.5,0.9  CONTEXT_CTX=(longest length + 1024)
#   WORKER_CACHE=true      the RPC worker's tensor cache (-c); false for big synthetic models
#   DECODE_BOUND=          decode upper bound in t/s, for the efficiency line
#   MACHINE=               a name for the machine in the reports (SPLITSERVE_MACHINE)
#   SPLITSERVE=splitserve  the command to run
# A synthetic model is fine for speed (retrieval will then miss: it cannot read).
# Prefer random weights: with all-zero weights (tests/gguf_factory.py writes
# zero data) every token routes to the same experts, which flatters MoE prefill
# and concurrent decode.
set -euo pipefail

if [ $# -lt 3 ]; then
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
ENGINE_DIR=$(cd "$1" && pwd)
MODEL=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
OUT=$3
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

SS=${SPLITSERVE:-splitserve}
WORKER_DEVICES=${WORKER_DEVICES-CUDA0}
HEAD_DEVICES=${HEAD_DEVICES-CUDA0}
FLASH_ATTN=${FLASH_ATTN:-on}
SPEED_CTX=${SPEED_CTX:-65536}
SPEED_PARALLEL=${SPEED_PARALLEL:-8}
PROMPTS=${PROMPTS:-512,4096}
GEN=${GEN:-128}
CONCURRENCY=${CONCURRENCY:-1,2,4,8}
REPEAT=${REPEAT:-3}
UBATCHES=${UBATCHES:-512,1024,2048}
SWEEP_PROMPT=${SWEEP_PROMPT:-4096}
LENGTHS=${LENGTHS:-8k,32k,64k}
DEPTHS=${DEPTHS:-0.1,0.5,0.9}
export SPLITSERVE_MACHINE=${MACHINE:-${SPLITSERVE_MACHINE:-}}
export SPLITSERVE_STATE=${SPLITSERVE_STATE:-$OUT/state}

longest=$(python3 -c "import sys; print(max(int(float(x[:-1])*1024) if x.lower().endswith('k') else int(x) for x in sys.argv[1].split(',')))" "$LENGTHS")
CONTEXT_CTX=${CONTEXT_CTX:-$((longest + 1024))}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
WORKER_PORT=$(free_port)
HEAD_PORT=$(free_port)

toml_list() {  # "A,B" -> ["A", "B"]
    local IFS=, out="" x
    for x in $1; do out="$out${out:+, }\"$x\""; done
    echo "[$out]"
}

# write_spec FILE CTX PARALLEL [UBATCH]
write_spec() {
    cat > "$1" <<EOF
name = "gpubench"
model = "$MODEL"
engine = "$ENGINE_DIR"

[head]
devices = $(toml_list "$HEAD_DEVICES")

[[workers]]
name = "w1"
bind = "127.0.0.1"
port = $WORKER_PORT
devices = $(toml_list "$WORKER_DEVICES")
cache = ${WORKER_CACHE:-true}

[server]
host = "127.0.0.1"
port = $HEAD_PORT
ctx_size = $2
parallel = $3
flash_attn = "$FLASH_ATTN"
${4:+ubatch = $4}
EOF
}

cleanup() { "$SS" down -c "$OUT/speed.toml" >/dev/null 2>&1 || true; }
trap cleanup EXIT

{
    echo "date: $(date -u +%FT%TZ)"
    echo "engine: $ENGINE_DIR"
    echo "model: $MODEL ($(du -h "$MODEL" | cut -f1))"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
} | tee "$OUT/machine.txt"

echo "== speed (ctx $SPEED_CTX, parallel $SPEED_PARALLEL)"
write_spec "$OUT/speed.toml" "$SPEED_CTX" "$SPEED_PARALLEL"
"$SS" up -c "$OUT/speed.toml"
"$SS" bench speed -c "$OUT/speed.toml" --prompt-tokens "$PROMPTS" --gen-tokens "$GEN" \
    --concurrency "$CONCURRENCY" --repeat "$REPEAT" --label http -o "$OUT/speed.json"

echo "== engine (llama-bench through the same RPC worker)"
"$SS" bench engine -c "$OUT/speed.toml" -p "$PROMPTS" -n "$GEN" -r "$REPEAT" ${FLASH_ATTN:+--fa $FLASH_ATTN} \
    --label llama-bench -o "$OUT/engine.json"
"$SS" down -c "$OUT/speed.toml"

echo "== sweep ubatch=$UBATCHES (prompt $SWEEP_PROMPT, parallel 1)"
write_spec "$OUT/sweep.toml" "$SPEED_CTX" 1
"$SS" bench sweep -c "$OUT/sweep.toml" --set "ubatch=$UBATCHES" --prompt-tokens "$SWEEP_PROMPT" \
    --gen-tokens "$GEN" --repeat "$REPEAT" --label ubatch -o "$OUT/sweep.json"

echo "== context $LENGTHS (ctx $CONTEXT_CTX, parallel 1)"
write_spec "$OUT/context.toml" "$CONTEXT_CTX" 1
"$SS" up -c "$OUT/context.toml"
"$SS" bench context -c "$OUT/context.toml" --lengths "$LENGTHS" --depths "$DEPTHS" --control \
    --label context -o "$OUT/context.json" || true
"$SS" down -c "$OUT/context.toml"

echo "== reports"
bound=${DECODE_BOUND:+--decode-bound $DECODE_BOUND}
for r in speed engine sweep context; do
    [ -f "$OUT/$r.json" ] && "$SS" bench report "$OUT/$r.json" -o "$OUT/$r" $bound > /dev/null
done
"$SS" bench report "$OUT/speed.json" "$OUT/engine.json" -o "$OUT/serving-cost" $bound > /dev/null
echo "results in $OUT (speed/, engine/, sweep/, context/, serving-cost/ each with report.md)"
