#!/usr/bin/env bash
# The gateway's cost on one GPU: benchmarks/bench_gateway.py against a CUDA llama-server
# serving a synthetic 12-layer MoE (one process, no RPC), and against the rate-fixed stand-in
# engine (benchmarks/fake_sse_engine.py) at 600 tokens/s, for each source tree given.
#
#   benchmarks/gpu_gateway.sh prepare WORK SOURCE.tar.gz
#   benchmarks/gpu_gateway.sh run WORK OUT SRC_DIR[,SRC_DIR...]   # e.g. src or an older tree's src
#
# Environment: CUDA_ARCH=90, JOBS=16, ROUNDS=10, MAX_TOKENS=128, CONCURRENCY=1,8, SIDES="engine fake",
# REPEATS=1 (the trees in turn, this many times: OUT/gateway-TAG-SIDE[-N].json), SETTLE=15 (seconds
# to wait first, for the host to settle after a build). The stand-in alone (SIDES=fake) needs no
# `prepare`: only Python with the project's dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
step=$1 WORK=$(mkdir -p "$2" && cd "$2" && pwd)
export SPLITSERVE_CACHE=$WORK/cache SPLITSERVE_STATE=$WORK/state

if [ "$step" = prepare ]; then
    PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} python3 -m splitserve engine build --backend cuda \
        --cuda-arch "${CUDA_ARCH:-90}" --jobs "${JOBS:-16}" --source "$3"
    python3 benchmarks/make_synthetic_moe.py "$WORK/moe12.gguf" --layers 12 --embd 2048 --heads 16 \
        --kv-heads 4 --experts 32 --used 4 --ff-exp 768 --vocab 32000 --qtype Q4_K
    exit 0
fi

OUT=$(mkdir -p "$3" && cd "$3" && pwd)
SIDES=${SIDES:-engine fake} REPEATS=${REPEATS:-1}
if [[ " $SIDES " == *" engine "* ]]; then
    SERVER=$(ls -d "$SPLITSERVE_CACHE"/engines/*cuda*/build/bin/llama-server | head -1)
fi
base=${PYTHONPATH:-}
IFS=, read -ra trees <<< "$4"
sleep "${SETTLE:-15}"
for rep in $(seq "$REPEATS"); do
    suffix=$([ "$REPEATS" -gt 1 ] && echo "-$rep" || true)
    for tree in "${trees[@]}"; do
        tag=$(basename "$(dirname "$(cd "$tree" && pwd)")")
        export PYTHONPATH=$(cd "$tree" && pwd)${base:+:$base}
        for side in $SIDES; do
            if [ $side = engine ]; then
                args=(--server "$SERVER" --model "$WORK/moe12.gguf" --server-arg=-ngl --server-arg=999
                      --server-arg=-fa --server-arg=on --threads 8 --parallel 8 --ctx 16384)
            else
                args=(--fake-rate 600)
            fi
            echo "== $tag $side${suffix}"
            python3 benchmarks/bench_gateway.py "${args[@]}" --concurrency "${CONCURRENCY:-1,8}" \
                --rounds "${ROUNDS:-10}" --max-tokens "${MAX_TOKENS:-128}" --ttft-pairs 60 \
                --out "$OUT/gateway-$tag-$side$suffix.json"
        done
    done
done
