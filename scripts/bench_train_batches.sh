#!/usr/bin/env bash
# Seconds per step the extractive reader's training waits for its batches, built in the training
# process (--loader-workers 0) or ahead by one worker process (convqa/front/tools/
# bench_train_batches.py): first the batches of a GPU-sized step (16 questions x 24 passages)
# drawn alone, then a few real training steps of a smaller one (4 x 8, MiniLM, fp32).
#
#   OMP_NUM_THREADS=1 bash scripts/bench_train_batches.sh [SQUAD_FILE] [STEPS]
#
# Run it from the repository root; SQUAD_FILE defaults to ../shared/data/squad/dev-v2.0.json,
# STEPS to 6 (the first is left out). About 3 minutes on one busy AVX2 core.
set -euo pipefail
SQUAD=${1:-../shared/data/squad/dev-v2.0.json}
STEPS=${2:-6}
python -m convqa.front.tools.bench_train_batches --squad "$SQUAD" --batch-size 16 \
    --passages 24 --steps "$STEPS" --workers 0 1
python -m convqa.front.tools.bench_train_batches --squad "$SQUAD" --batch-size 4 \
    --passages 8 --steps "$STEPS" --workers 0 1 --train
