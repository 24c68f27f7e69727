#!/usr/bin/env bash
# vLLM started by splitserve on one GPU: a tiny random Llama (benchmarks/make_tiny_llama.py),
# `splitserve up` with backend = "vllm" (gateway in front), `bench speed` through the gateway and
# direct to vLLM's /v1, then `splitserve down`.
#
#   benchmarks/gpu_vllm.sh install WHEEL_DIR SITE   # vllm_pruned.zip.part* + dep wheels -> SITE
#   benchmarks/gpu_vllm.sh run OUT SITE             # model, spec, up, bench, down; everything under OUT
#
# For a machine with no package index (the device tool's H200: torch 2.11.0+cu130, no vLLM):
# vllm 0.25.0 (pins torch==2.11.0) travels as a pruned copy of its wheel, cut in parts under
# 64 MiB, and its pure-Python / small dependencies as cp312 manylinux wheels. Here:
#   pip download --no-deps ... vllm==0.25.0; cp vllm-*.whl vllm_pruned.zip
#   zip -d vllm_pruned.zip vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/_moe_C_stable_libtorch.abi3.so \
#       vllm/vllm-rs 'vllm/third_party/deep_gemm/_C.cpython-31[0134]*' 'vllm/third_party/fmha_sm100/*'
#       (FA2, the MoE kernels, the Rust frontend, other CPythons, Blackwell FMHA: 250 -> 108 MB;
#       vLLM imports each of these optionally, and uses FA3 on Hopper)
#   split -b 54250000 -d vllm_pruned.zip vllm_pruned.zip.part
#   pip download (resolving) the Requires-Dist of vllm minus torch/CUDA/kernel packages and minus
#       what the image has (KINDS.md), plus xgrammar and apache-tvm-ffi --no-deps: 51 MB, 93 wheels
# then one `run` call per part (carry .vl1, .vl2, .vl3; copy each to /tmp/w while the machine
# stays warm), and in the last: `benchmarks/gpu_vllm.sh install /tmp/w /tmp/site` and `run`.
# flashinfer is not carried, so VLLM_USE_FLASHINFER_SAMPLER=0 (vLLM 0.25 imports flashinfer for
# its sampler on CUDA unless told not to). PY (default python3) must hold torch == vllm's pin.
# Environment: PROMPT_TOKENS=128 GEN_TOKENS=64 CONCURRENCY=1,4 REPEAT=2 GPU_UTIL=0.3 MAXLEN=2048
# LOAD_TIMEOUT=400 EXTRA_ARGS='"--enforce-eager"' (TOML list items) WORK=/tmp/vllmrun;
# STANDIN=1 MODEL_ARGS=--tokenizer-only rehearses it all without a GPU (a FakeEngine in vLLM's HTTP shape).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
step=$1

if [ "$step" = install ]; then
    W=$2 SITE=$3
    mkdir -p "$SITE"
    cat "$W"/vllm_pruned.zip.part* > /tmp/vllm_pruned.zip
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$W"/*.whl || exit 1
    (cd "$SITE" && $PY -m zipfile -e /tmp/vllm_pruned.zip .) || exit 1
    rm -f /tmp/vllm_pruned.zip
    exit 0
fi

OUT=$(mkdir -p "$2" && cd "$2" && pwd) SITE=$(cd "$3" && pwd)
WORK=${WORK:-/tmp/vllmrun}
mkdir -p "$WORK/bin"
export SPLITSERVE_STATE=$WORK/state SPLITSERVE_CACHE=$WORK/cache PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}  # flashinfer is not carried
export PYTHONPATH=$PWD/src:$SITE HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
REAL_PY=$(command -v "$PY")
# splitserve looks for `vllm` next to the interpreter it is given: a bin folder with both.
cat > "$WORK/bin/python3" <<EOF
#!/bin/sh
export PYTHONPATH=$PYTHONPATH
exec $REAL_PY "\$@"
EOF
cat > "$WORK/bin/vllm" <<EOF
#!/bin/sh
export PYTHONPATH=$PYTHONPATH
exec $REAL_PY -c 'import sys; sys.argv[0] = "vllm"; from vllm.entrypoints.cli.main import main; sys.exit(main())' "\$@"
EOF
if [ -n "${STANDIN:-}" ]; then  # a rehearsal without a GPU: vLLM's API from a FakeEngine (splitserve.engine._fake_http)
    cat > "$WORK/bin/vllm" <<EOF
#!/bin/sh
shift; model=\$1; root=\$1; shift; port=8080
while [ \$# -gt 0 ]; do case \$1 in --port) port=\$2; shift;; --served-model-name) model=\$2; shift;; esac; shift; done
export PYTHONPATH=$PYTHONPATH
exec $REAL_PY -m splitserve.engine._fake_http --shape vllm --model "\$model" --root "\$root" --host 127.0.0.1 --port "\$port"
EOF
    mkdir -p "$SITE/vllm" && [ -f "$SITE/vllm/__init__.py" ] || echo '__version__ = "0.0.0+standin"' > "$SITE/vllm/__init__.py"
fi
chmod +x "$WORK/bin/python3" "$WORK/bin/vllm"

step_log() { echo "== $(date -u +%T) $*"; }

step_log "tiny model"
$PY benchmarks/make_tiny_llama.py "$WORK/tiny-llama" --layers 4 --hidden 256 --vocab 1024 ${MODEL_ARGS:-} || exit 1

cat > "$WORK/spec.toml" <<EOF
name = "vllm1"
backend = "vllm"
load_timeout = ${LOAD_TIMEOUT:-400}

[vllm]
model = "$WORK/tiny-llama"
served_model_name = "tiny-llama"
python = "$WORK/bin/python3"
tensor_parallel_size = 1
gpu_memory_utilization = ${GPU_UTIL:-0.3}
max_model_len = ${MAXLEN:-2048}
port = 8080
extra_args = [${EXTRA_ARGS:-}]
EOF
cp "$WORK/spec.toml" "$OUT/spec.toml"
SS="$PY -m splitserve"

step_log "up --dry-run"
$SS up -c "$WORK/spec.toml" --dry-run 2>&1 | tee "$OUT/up_dry_run.txt"
step_log "up"
t0=$(date +%s.%N)
$SS up -c "$WORK/spec.toml" 2>&1 | tee "$OUT/up.txt"
up_rc=${PIPESTATUS[0]}
t1=$(date +%s.%N)
echo "up rc=$up_rc in $(python3 -c "print(round($t1 - $t0, 1))") s" | tee -a "$OUT/up.txt"
$SS status -c "$WORK/spec.toml" 2>&1 | tee "$OUT/status.txt"
GW=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$OUT/status.txt" | grep -v ':8080' | head -1)
echo "gateway: ${GW:-?}"

if [ "$up_rc" = 0 ]; then
    B="--prompt-tokens ${PROMPT_TOKENS:-128} --gen-tokens ${GEN_TOKENS:-64} --concurrency ${CONCURRENCY:-1,4} --repeat ${REPEAT:-2}"
    step_log "bench speed via gateway $GW"
    $SS bench speed --url "${GW:-http://127.0.0.1:8000}" $B --label gateway -o "$OUT/vllm_speed_gateway.json" 2>&1 | tee "$OUT/bench.txt"
    step_log "bench speed direct to vLLM"
    $SS bench speed --url http://127.0.0.1:8080 $B --label direct -o "$OUT/vllm_speed_direct.json" 2>&1 | tee -a "$OUT/bench.txt"
fi

step_log "down"
$SS down -c "$WORK/spec.toml" 2>&1 | tee "$OUT/down.txt"
sleep 1
echo "left running:"; ps -eo pid,args | grep -E 'vllm|splitserve' | grep -v grep || true
for f in "$SPLITSERVE_STATE"/*/logs/*.log "$SPLITSERVE_STATE"/logs/*.log "$SPLITSERVE_STATE"/*/*.log; do
    [ -f "$f" ] || continue
    echo "== log $f" >> "$OUT/logs_tail.txt"
    tail -n 150 "$f" >> "$OUT/logs_tail.txt"
done
find "$WORK/state" -maxdepth 4 | head -40 > "$OUT/state_files.txt"
