#!/usr/bin/env bash
# The full collection's measurements that wait on its DPR-IHN index. Builds the index (or
# resumes it: the encoding is sharded, so rerunning the script after a stop loses at most one
# shard), then, on the full collection's answer-evaluable dev turns:
#   1. the latency of the full-collection cascade per stage (the tower, convqa-reranker top 50
#      then convqa-reranker-large top 5 where the first is not sure, the reader at top 5), the
#      first stage rescoring all 50 and within 2.5, the first 40 dev turns, one after the other
#      (first, while nothing else runs);
#   2. the first reranking stage rescoring only the hits within 2.5 / 3.5 standard deviations
#      of the retriever's best (benchmarks/answer_systems_rescore_within.yaml);
#   3. stopping after a sure first passage against reading every passage
#      (benchmarks/answer_systems_stop_when_sure.yaml);
#   4. the shortlist that also keeps the hits whose words match the question
#      (benchmarks/answer_systems_word_matches.yaml).
# Results: docs/results/answers-rescore-within-full.md, answers-stop-when-sure-full.md,
# answers-word-matches-full.md and the
# bench-answer-avx512-full-cascade-* files (docs/reranker.md, "Rescoring only what can still win").
# Each step is skipped when its output exists, so the script resumes where it stopped.
#
#   bash scripts/full_collection_checks.sh BENCH OUT
#
# BENCH: a `convqa data topiocqa-wiki` folder. The encoding of its 220,873 passages took about
# 43-45 minutes on two threads of an AVX512 AMD EPYC (bf16) and runs at ~9-10 passages/s (6-7 h) on an
# AVX2 AMD EPYC family 23 model 1; start it in the background:
#   nohup bash scripts/full_collection_checks.sh BENCH OUT > OUT.log 2>&1 &
set -euo pipefail
B=${1:?usage: full_collection_checks.sh BENCH OUT}
OUT=${2:?usage: full_collection_checks.sh BENCH OUT}
B=$(cd "$B" && pwd)
mkdir -p "$OUT"
INDEXES=$B/full/indexes

[ -f "$INDEXES/dpr-ihn/dense_index.json" ] || convqa index --dense --model convqa-dpr-ihn \
    --passages "$B/full/passages" --out "$INDEXES/dpr-ihn"

for gap in all 2.5; do
    within=""
    [ "$gap" = all ] || within=", rescore_within: $gap"
    cat > "$OUT/pipeline-within-$gap.yaml" <<EOF
passages: $B/full/passages
retriever: {name: convdr, model: convqa-dpr-ihn-answer, index: $INDEXES/dpr-ihn}
history: oldest_first
reranker: {name: cross_encoder, model: convqa-reranker, top_n: 50$within, second_stage: {model: convqa-reranker-large, top_n: 5}}
reader: {name: extractive, model: convqa-reader}
top_k: 5
EOF
    [ -f "$OUT/bench-within-$gap.json" ] || python -m convqa.front.tools.bench_answer \
        --config "$OUT/pipeline-within-$gap.yaml" --benchmark "$B/full" --turns 40 \
        --threads 2 --json "$OUT/bench-within-$gap.json"
done

for rows in rescore_within stop_when_sure word_matches; do
    [ -f "$OUT/$rows.json" ] || convqa eval answers --benchmark "full=$B/full" --split dev \
        --systems "benchmarks/answer_systems_$rows.yaml" --out "$OUT/$rows"
done

echo "full-collection checks written to $OUT"
