#!/usr/bin/env bash
# Reproduce the shipped DPR-IHN retriever adapter (convqa/assets/retriever-dpr-ihn) and its
# rows of docs/results/retrieval.md from ../shared/data. About 1 h 15 min on 2 CPU cores
# (training ~40 min, mining ~25 min); every stage resumes when rerun after a stop.
#
#   bash scripts/reproduce_retriever.sh [DATA_DIR] [WORK_DIR]
set -euo pipefail
DATA=${1:-../shared/data}
WORK=${2:-/tmp/convqa-repro}
mkdir -p "$WORK"

convqa data topiocqa-wiki --data-dir "$DATA" --out "$WORK/bench"
# hard negatives are mined from a 34k-passage sub-store (2 passages per article + 20k sampled)
convqa train mining-corpus --benchmark "$WORK/bench/full" --out "$WORK/mine" \
    --per-article 2 --sample 20000
convqa train dpr --benchmark "$WORK/bench/full" --out "$WORK/dpr-ihn" --iterations 3 --bf16 \
    --mining-corpus "$WORK/mine" --batch-size 16 --epochs 1 --hard-negatives 1
# the shortcut model of the table: trained on X_t without q_t
convqa train dpr --benchmark "$WORK/bench/full" --out "$WORK/dpr-shortcut" --iterations 1 \
    --history history_only --bf16 --batch-size 16 --epochs 1
# the shipped adapter: rank-32 SVD of iteration 3's weight changes
python -m convqa.front.tools.export_lora --tuned "$WORK/dpr-ihn/iter3/model" --rank 32 \
    --out "$WORK/retriever-dpr-ihn"
for name in ibn:iter1 ihn2:iter2 ihn3:iter3 shortcut:; do
    label=${name%%:*}; iter=${name#*:}
    model="$WORK/dpr-ihn/$iter/model"; [ -z "$iter" ] && model="$WORK/dpr-shortcut/iter1/model"
    convqa index --dense --model "$model" --passages "$WORK/bench/vital/passages" \
        --out "$WORK/bench/vital/indexes/dpr-$label" --quiet
done
convqa index --dense --model all-MiniLM-L6-v2 --passages "$WORK/bench/vital/passages" \
    --out "$WORK/bench/vital/indexes/minilm" --quiet
convqa index --dense --model "$WORK/retriever-dpr-ihn" --passages "$WORK/bench/vital/passages" \
    --out "$WORK/bench/vital/indexes/dpr-ihn" --quiet
python -m convqa.front.tools.retrieval_table --corpus vital="$WORK/bench/vital" \
    --corpus full="$WORK/bench/full" --systems benchmarks/retrieval_systems.yaml
