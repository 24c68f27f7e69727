#!/usr/bin/env bash
# Lint (src/ and tests/) and type checks (src/ strict, tests/ with check_untyped_defs) with the versions pinned in pyproject's `lint` extra
# (scripts/setup.sh installs them): ruff's rules, ruff's format, mypy --strict, and the import rules
# (import-linter's contracts in pyproject.toml: layers, no cycles, no private cross-package imports).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "lint: ruff check src tests" >&2
.venv/bin/ruff check src tests
echo "lint: ruff format --check src tests" >&2
.venv/bin/ruff format --check src tests
echo "lint: mypy --strict src" >&2
.venv/bin/mypy --strict src
echo "lint: mypy tests (pyproject.toml [tool.mypy]: every test file once, bodies checked)" >&2
.venv/bin/mypy tests
echo "lint: lint-imports (pyproject.toml [tool.importlinter])" >&2
.venv/bin/lint-imports --no-cache --no-logo
