#!/usr/bin/env bash
# Pilot of the larger reranker: the cross-encoder trained from all-MiniLM-L6-v2 and from
# all-mpnet-base-v2 on the same examples (benchmark train turns of both collections and SQuAD
# v2.0 training articles; same-article and BM25-mined negatives), with the same steps and
# settings, then both ranking the same held-out questions (`OUT/eval.json` of each run).
# Every stage resumes when rerun after a stop (training from its last checkpoint).
#
#   OMP_NUM_THREADS=1 bash scripts/pilot_reranker.sh [DATA_DIR] [WORK_DIR] [BENCH_ROOT] \
#       [STEPS] [QUESTIONS_PER_SOURCE]
#
# Run it from the repository root. BENCH_ROOT: the --out folder of `convqa data topiocqa-wiki`
# (full/ and vital/ inside; built under WORK_DIR when not given). STEPS: optimizer steps of
# each run (default 150); QUESTIONS_PER_SOURCE: held-out questions ranked per source (default
# 100). PRECISION (optional, default auto): the training precision; on a CPU without native
# bf16 (AVX2) give PRECISION=fp32 (auto's probe of mpnet is slow there).
# Outputs: WORK/examples.jsonl.xz, WORK/reranker-<model>/ (run folders with eval.json) and a
# table on standard output.
set -euo pipefail
DATA=${1:-../shared/data}
WORK=${2:-/tmp/convqa-reranker-pilot}
BENCH=${3:-$WORK/bench}
STEPS=${4:-150}
PER_SOURCE=${5:-100}
mkdir -p "$WORK"

[ -f "$BENCH/full/turns.jsonl" ] || convqa data topiocqa-wiki --data-dir "$DATA" --out "$BENCH"
convqa models install all-mpnet-base-v2
EXAMPLES="$WORK/examples.jsonl.xz"
[ -f "$EXAMPLES" ] || convqa train reranker-examples --out "$EXAMPLES" \
    --benchmark "$BENCH/full" --benchmark "$BENCH/vital" --squad "$DATA/squad/dev-v2.0.json" \
    --article-negatives 8 --mined-negatives 8 --max-examples 1500 --max-heldout "$PER_SOURCE"

for MODEL in all-MiniLM-L6-v2 all-mpnet-base-v2; do
  echo "== $MODEL: training ($(date -u +%FT%TZ))"
  convqa train reranker --out "$WORK/reranker-$MODEL" --examples "$EXAMPLES" \
      --init-model "$MODEL" --negatives 3 --batch-size 4 --lora 0 --lr 3e-5 \
      --max-steps "$STEPS" --precision "${PRECISION:-auto}" --checkpoint-every 25 \
      --eval-examples "$PER_SOURCE" --quiet
done

python - "$WORK" <<'EOF'
import json, sys
from pathlib import Path
work, models = Path(sys.argv[1]), ("all-MiniLM-L6-v2", "all-mpnet-base-v2")
evals = {m: json.loads((work / f"reranker-{m}" / "eval.json").read_text()) for m in models}
print(json.dumps(evals, indent=1))
EOF
