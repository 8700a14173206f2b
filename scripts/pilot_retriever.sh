#!/usr/bin/env bash
# Pilot of the larger retriever: the dual encoder trained from all-MiniLM-L6-v2 and from
# all-mpnet-base-v2 on the same full-collection train turns with the same steps and settings
# (DPR iteration 1: in-batch negatives, query = the conversation oldest first), each then
# indexing the vital collection and retrieving for its dev turns (article- and answer-level
# Hits@k, `convqa eval retrieval`). Every stage resumes or is skipped when rerun.
#
#   OMP_NUM_THREADS=1 bash scripts/pilot_retriever.sh [DATA_DIR] [WORK_DIR] [BENCH_ROOT] [STEPS]
#
# Run it from the repository root. BENCH_ROOT: the --out folder of `convqa data topiocqa-wiki`
# (full/ and vital/ inside; built under WORK_DIR when not given). STEPS: optimizer steps of each
# run (default 150, batch 16). BF16=0 trains in fp32 (for a CPU without native bf16).
# Outputs: WORK/dpr-<model>/ (runs), WORK/index-<model>/ (vital indexes),
# WORK/retrieval.{md,json} (the table).
set -euo pipefail
DATA=${1:-../shared/data}
WORK=${2:-/tmp/convqa-retriever-pilot}
BENCH=${3:-$WORK/bench}
STEPS=${4:-150}
mkdir -p "$WORK"
BF16=$([ "${BF16:-1}" = 1 ] && echo --bf16 || true)

[ -f "$BENCH/full/turns.jsonl" ] || convqa data topiocqa-wiki --data-dir "$DATA" --out "$BENCH"
convqa models install all-mpnet-base-v2

SYSTEMS="$WORK/systems.yaml"
echo "systems:" > "$SYSTEMS"
for MODEL in all-MiniLM-L6-v2 all-mpnet-base-v2; do
  echo "== $MODEL: training ($(date -u +%FT%TZ))"
  convqa train dpr --benchmark "$BENCH/full" --out "$WORK/dpr-$MODEL" --iterations 1 \
      --init-model "$MODEL" --batch-size 16 --max-steps "$STEPS" --lr 2e-5 $BF16 \
      --checkpoint-every 25 --quiet
  echo "== $MODEL: indexing the vital collection ($(date -u +%FT%TZ))"
  [ -f "$WORK/index-$MODEL/dense_index.json" ] || convqa index --dense \
      --model "$WORK/dpr-$MODEL/iter1/model" --passages "$BENCH/vital/passages" \
      --out "$WORK/index-$MODEL" --quiet
  cat >> "$SYSTEMS" <<EOF
  - label: "$MODEL, DPR iteration 1, $STEPS steps"
    retriever: {name: dense, index: "$WORK/index-$MODEL", passages: "{corpus}/passages"}
    history: oldest_first
EOF
done
echo "== retrieval ($(date -u +%FT%TZ))"
convqa eval retrieval --benchmark vital="$BENCH/vital" --systems "$SYSTEMS" \
    --out "$WORK/retrieval" --no-plots
