#!/usr/bin/env bash
# Set up (CPU torch first, so pip never pulls CUDA wheels) and run the default test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev]"
python -m pytest -q -m "not slow" "$@"
