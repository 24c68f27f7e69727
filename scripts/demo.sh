#!/usr/bin/env bash
# Quick start, command 1: set everything up, then run the demo
# (SmolLM2-135M split over two local RPC workers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/splitserve demo "$@"
