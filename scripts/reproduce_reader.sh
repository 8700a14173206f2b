#!/usr/bin/env bash
# Reproduce the shipped extractive reader (convqa/assets/reader-extractive) from ../shared/data:
# about 1 h on 2 CPU cores (training ~1 h at one thread, held-out scoring a few minutes). Every
# stage resumes when rerun after a stop.
#
#   bash scripts/reproduce_reader.sh [DATA_DIR] [WORK_DIR]
set -euo pipefail
DATA=${1:-../shared/data}
WORK=${2:-/tmp/convqa-repro}
mkdir -p "$WORK"

[ -f "$WORK/bench/full/turns.jsonl" ] || convqa data topiocqa-wiki --data-dir "$DATA" --out "$WORK/bench"
[ -d "$WORK/bench/full/indexes/bm25" ] || convqa index --bm25 --preset topiocqa \
    --passages "$WORK/bench/full/passages" --out "$WORK/bench/full/indexes/bm25"
# 3,500 examples per source (seeded sample): TopiOCQA x Wikipedia train turns whose answer
# occurs in a passage (BM25 negatives from other articles), SQuAD v2.0 dev and SQuADShifts
# new_wiki answerable questions (10% of articles held out); 4 passages per question.
OMP_NUM_THREADS=1 convqa train reader --out "$WORK/reader" --benchmark "$WORK/bench/full" \
    --squad "$DATA/squad/dev-v2.0.json" --squad "$DATA/squad/squadshifts_new_wiki_v1.0.json" \
    --max-examples 3500 --passages-per-question 4 --batch-size 4 --max-steps 900 --lr 5e-5 \
    --bf16 --checkpoint-every 100 --eval-examples 300
python -m convqa.front.tools.export_lora --tuned "$WORK/reader/model" --rank 64 --exact-embeddings \
    --out "$WORK/reader-extractive"
convqa train reader-eval --model "$WORK/reader-extractive" --examples "$WORK/reader/data/heldout.jsonl" \
    --out "$WORK/reader-extractive-heldout.json"
