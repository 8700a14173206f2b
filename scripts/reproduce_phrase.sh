#!/usr/bin/env bash
# Reproduce the shipped phrase model (convqa/assets/phrase-model, alias convqa-phrase) and its
# measurements (docs/results/phrase.md) from ../shared/data. On 2 CPU cores: ~35 min per
# training run when the machine is quiet, ~3 min per vital index. Every stage resumes when
# rerun after a stop.
#
#   bash scripts/reproduce_phrase.sh [DATA_DIR] [WORK_DIR]
set -euo pipefail
DATA=${1:-../shared/data}
WORK=${2:-/tmp/convqa-phrase-repro}
mkdir -p "$WORK"

[ -f "$WORK/bench/full/turns.jsonl" ] || convqa data topiocqa-wiki --data-dir "$DATA" --out "$WORK/bench"
[ -d "$WORK/bench/vital/indexes/dpr-ihn" ] || convqa index --dense --model convqa-dpr-ihn \
    --passages "$WORK/bench/vital/passages" --out "$WORK/bench/vital/indexes/dpr-ihn"

# 2,500 examples per source (seeded): SQuAD v2.0 dev, SQuADShifts new_wiki (10% of articles held
# out) and the TopiOCQA x Wikipedia train turns of both corpora; distilled from the shipped
# extractive reader; 450 phrase-stage steps of 16 questions, then 80 query-side steps.
COMMON=(--benchmark "$WORK/bench/full" --benchmark "$WORK/bench/vital"
        --squad "$DATA/squad/dev-v2.0.json" --squad "$DATA/squad/squadshifts_new_wiki_v1.0.json"
        --max-examples 2500 --batch-size 16 --lr 1e-4 --max-steps 450 --query-max-steps 80
        --query-lr 2e-5 --pool-passages 1000 --max-answer-tokens 20 --bf16 --export-lora 32
        --eval-examples 200 --checkpoint-every 25)
[ -f "$WORK/phrase-v2/model/config.json" ] || convqa train phrase --out "$WORK/phrase-v2" "${COMMON[@]}"
# the ablation without L_turn: the same run with lambda2 = 0
[ -f "$WORK/phrase-v2-noturn/model/config.json" ] || \
    convqa train phrase --out "$WORK/phrase-v2-noturn" --turn-weight 0 "${COMMON[@]}"

# indexes of the vital corpus (int8, every token kept, IVF-PQ chosen by size)
for run in phrase-v2 phrase-v2-noturn; do
    [ -f "$WORK/bench/vital/indexes/$run/phrase_index.json" ] || convqa index --phrase \
        --model "$WORK/$run/model" --passages "$WORK/bench/vital/passages" \
        --out "$WORK/bench/vital/indexes/$run" --int8
done

# EM/F1 and Hits@k on the vital dev turns: with / without query-side fine-tuning (the phrase
# stage's model searches the same index), without L_turn (its own index)
python -m convqa.front.tools.phrase_ablation --index "$WORK/bench/vital/indexes/phrase-v2" \
    --model "with=$WORK/phrase-v2/model" --model "without query-side=$WORK/phrase-v2/phrase/model" \
    --benchmark "$WORK/bench/vital" --json "$WORK/ablation-v2.json"
python -m convqa.front.tools.phrase_ablation --index "$WORK/bench/vital/indexes/phrase-v2-noturn" \
    --model "without L_turn=$WORK/phrase-v2-noturn/model" --benchmark "$WORK/bench/vital" \
    --json "$WORK/ablation-v2-noturn.json"
# speed and size against DPR-IHN + the extractive reader, same turns, one run, one thread
python -m convqa.front.tools.bench_phrase --phrase-index "$WORK/bench/vital/indexes/phrase-v2" \
    --phrase-model "$WORK/phrase-v2/model" --dense-index "$WORK/bench/vital/indexes/dpr-ihn" \
    --benchmark "$WORK/bench/vital" --turns 90 --threads 1 --json "$WORK/bench-v2.json"
