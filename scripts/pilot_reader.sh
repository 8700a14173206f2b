#!/usr/bin/env bash
# Pilot of the larger reader: the extractive reader trained from all-mpnet-base-v2 and from
# all-MiniLM-L6-v2 on the same data (the sources and seed of scripts/reproduce_reader.sh, 1,500
# examples per source), with the same steps and settings, one after the other (mpnet first),
# then both scored with `convqa train reader-eval` on the same held-out questions of each source.
# Every stage resumes when rerun after a stop (training from its last checkpoint).
#
#   OMP_NUM_THREADS=1 bash scripts/pilot_reader.sh [DATA_DIR] [WORK_DIR] [BENCHMARK_DIR] \
#       [STEPS] [QUESTIONS_PER_SOURCE]
#
# Run it from the repository root. BENCHMARK_DIR: an existing full-corpus folder of `convqa data
# topiocqa-wiki` to link instead of building one (with its indexes/bm25 if it has one, else a
# BM25 index is built under WORK_DIR). STEPS: optimizer steps of each run (default 600);
# QUESTIONS_PER_SOURCE: held-out questions scored per source (default 300).
# PRECISION (optional, default auto): the training precision. auto times fp32 against bf16 on
# the first batch at every start: on a CPU without native bf16 (AVX2) that probe of the mpnet
# reader took over 20 minutes under load, for fp32 in the end: give PRECISION=fp32 there.
# Outputs: WORK/reader-<model>/ (run folders, log.jsonl with the held-out curve every 100 steps),
# WORK/heldout/<source>.jsonl (the questions scored) and WORK/scores/<model>-<source>.json.
set -euo pipefail
DATA=${1:-../shared/data}
WORK=${2:-/tmp/convqa-pilot}
BENCH_FROM=${3:-}
STEPS=${4:-600}
PER_SOURCE=${5:-300}
mkdir -p "$WORK"
BENCH="$WORK/bench/full"

if [ ! -f "$BENCH/turns.jsonl" ]; then
  if [ -n "$BENCH_FROM" ]; then
    mkdir -p "$BENCH"
    for entry in "$BENCH_FROM"/*; do
      [ "$(basename "$entry")" = indexes ] || ln -sfn "$(realpath "$entry")" "$BENCH/"
    done
    if [ -d "$BENCH_FROM/indexes/bm25" ]; then
      mkdir -p "$BENCH/indexes" && ln -sfn "$(realpath "$BENCH_FROM/indexes/bm25")" "$BENCH/indexes/"
    fi
  else
    convqa data topiocqa-wiki --data-dir "$DATA" --out "$WORK/bench"
  fi
fi
[ -d "$BENCH/indexes/bm25" ] || convqa index --bm25 --preset topiocqa \
    --passages "$BENCH/passages" --out "$BENCH/indexes/bm25"
convqa models install all-mpnet-base-v2

for MODEL in all-mpnet-base-v2 all-MiniLM-L6-v2; do
  echo "== $MODEL: training ($(date -u +%FT%TZ))"
  convqa train reader --out "$WORK/reader-$MODEL" --model "$MODEL" --benchmark "$BENCH" \
      --squad "$DATA/squad/dev-v2.0.json" --squad "$DATA/squad/squadshifts_new_wiki_v1.0.json" \
      --max-examples 1500 --passages-per-question 4 --batch-size 4 --max-steps "$STEPS" \
      --lr 5e-5 --precision "${PRECISION:-auto}" --checkpoint-every 25 --eval-every 100 --eval-per-source 40 \
      --eval-examples "$PER_SOURCE" --quiet
done

# The two runs built their examples alike; the comparison needs exactly the same questions.
for FILE in train.jsonl heldout.jsonl; do
  cmp -s "$WORK/reader-all-mpnet-base-v2/data/$FILE" "$WORK/reader-all-MiniLM-L6-v2/data/$FILE" \
    || { echo "the two runs' $FILE differ: not a like-for-like pilot" >&2; exit 1; }
done
mkdir -p "$WORK/heldout" "$WORK/scores"
python - "$WORK/reader-all-mpnet-base-v2/data/heldout.jsonl" "$WORK/heldout" "$PER_SOURCE" <<'EOF'
import json, sys
from pathlib import Path
from readers.extractive.data import scoring_convention
rows = {}
for line in open(sys.argv[1], encoding="utf-8"):
    source = json.loads(line).get("source") or "examples"
    rows.setdefault(source, []).append(line)
for source, lines in rows.items():
    name = source.replace(":", "_")
    (Path(sys.argv[2]) / f"{name}.jsonl").write_text("".join(lines[:int(sys.argv[3])]))
    (Path(sys.argv[2]) / f"{name}.convention").write_text(scoring_convention(source))
EOF
for MODEL in all-mpnet-base-v2 all-MiniLM-L6-v2; do
  for HELDOUT in "$WORK"/heldout/*.jsonl; do
    SOURCE=$(basename "$HELDOUT" .jsonl)
    OUT="$WORK/scores/$MODEL-$SOURCE.json"
    [ -f "$OUT" ] || convqa train reader-eval \
        --model "$WORK/reader-$MODEL/model" --examples "$HELDOUT" --quiet --out "$OUT" \
        --convention "$(cat "${HELDOUT%.jsonl}.convention")" > /dev/null
  done
done
python - "$WORK" <<'EOF'
import json, sys
from pathlib import Path
work, models = Path(sys.argv[1]), ("all-MiniLM-L6-v2", "all-mpnet-base-v2")
sources = sorted(p.stem for p in (work / "heldout").glob("*.jsonl"))
print(f"held-out, gold passage, EM / F1 | {' | '.join(models)} | questions")
means = {m: [] for m in models}
for source in sources:
    scores = {m: json.loads((work / "scores" / f"{m}-{source}.json").read_text()) for m in models}
    for m in models:
        means[m].append(scores[m]["f1"])
    print(f"{source} | " + " | ".join(f"{scores[m]['em']:.1f} / {scores[m]['f1']:.1f}"
                                      for m in models) + f" | {scores[models[0]]['count']}")
print("mean F1 over sources | " + " | ".join(f"{sum(v) / len(v):.1f}" for v in means.values()))
EOF
