#!/usr/bin/env bash
# Quick start, command 2: set everything up, then run the whole test suite
# (unit, integration with the real engine and models, multi-host).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
set +e
.venv/bin/python -m pytest -q -ra --timeout=900 --durations=40 "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
