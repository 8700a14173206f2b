#!/usr/bin/env bash
# Set up (CPU torch first, so pip never pulls CUDA wheels) and run the default test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev]"
# The demo's browser test drives Debian's headless Chromium; install it where we can (root +
# apt). Elsewhere that test skips and says why.
if ! command -v chromedriver >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q chromium chromium-driver >/dev/null \
        || { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; } \
        || echo "scripts/test.sh: could not install chromium; the browser test will skip" >&2
fi
# One worker per core (at most 4: each holds its own models), a test file per worker at a time so
# module fixtures are built once; tests/conftest.py divides the cores' threads between workers.
python -m pytest -q -n auto --maxprocesses 4 --dist loadfile -m "not slow" "$@"
