#!/usr/bin/env bash
# The answer-passage query tower: DPR-IHN's query side trained further on the full collection's
# train turns to find the passage that holds the answer inside its topic article, over
# DPR-IHN's own passage index (unchanged), then exported as a small adapter and scored on both
# collections' dev turns against DPR-IHN. Every stage resumes or is skipped when rerun.
#
#   OMP_NUM_THREADS=1 bash scripts/train_answer_query_tower.sh [DATA_DIR] [WORK_DIR] [BENCH_ROOT]
#
# Run it from the repository root. BENCH_ROOT: the --out folder of `convqa data topiocqa-wiki`
# (built under WORK_DIR when not given); the DPR-IHN index of each collection is built there
# when missing (about 90 minutes for the full one on 2 cores). Outputs: WORK/tower (the run),
# WORK/tower-r32 (the adapter), WORK/retrieval-{full,vital}.{md,json}.
set -euo pipefail
DATA=${1:-../shared/data}
WORK=${2:-/tmp/convqa-answer-tower}
BENCH=${3:-$WORK/bench}
mkdir -p "$WORK"

[ -f "$BENCH/full/turns.jsonl" ] || convqa data topiocqa-wiki --data-dir "$DATA" --out "$BENCH"
for C in full vital; do
  [ -f "$BENCH/$C/indexes/dpr-ihn/dense_index.json" ] || convqa index --dense \
      --model convqa-dpr-ihn --passages "$BENCH/$C/passages" --out "$BENCH/$C/indexes/dpr-ihn"
done

# Rank: each turn's answer passage against 8 of DPR-IHN's top 50 (mostly passages of the same
# article) and the batch's other turns' passages; KD towards DPR-IHN's own embedding of the
# same conversation keeps the query where the rest of the collection is.
convqa train convdr --mode multitask --anchor --kd-weight 4 --rank-weight 1 \
  --out "$WORK/tower" --data "benchmark=$BENCH/full" \
  --teacher convqa-dpr-ihn --index "$BENCH/full/indexes/dpr-ihn" \
  --history oldest_first --history-max-tokens 128 --heldout-fraction 0 --fidelity-examples 0 \
  --epochs 2 --negatives 8 --in-batch-negatives --lr 1e-5 --warmup-ratio 0.05 --bf16 \
  --checkpoint-every 50
[ -f "$WORK/tower-r32/adapter_model.safetensors" ] || python -m convqa.front.tools.export_lora \
  --tuned "$WORK/tower/model" --rank 32 --out "$WORK/tower-r32"

SYSTEMS="$WORK/systems.yaml"
cat > "$SYSTEMS" <<YAML
systems:
  - label: "DPR-IHN"
    retriever: {name: dense, index: "{corpus}/indexes/dpr-ihn", passages: "{corpus}/passages"}
    history: oldest_first
  - label: "DPR-IHN passages, answer-passage query tower"
    retriever: {name: convdr, model: "$WORK/tower-r32", index: "{corpus}/indexes/dpr-ihn", passages: "{corpus}/passages"}
    history: oldest_first
YAML
for C in full vital; do
  convqa eval retrieval --benchmark "$C=$BENCH/$C" --systems "$SYSTEMS" \
    --out "$WORK/retrieval-$C" --no-plots --quiet
done
