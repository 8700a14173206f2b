#!/usr/bin/env bash
# After a `convqa train reader` run that continues convqa-reader: export its weights as a
# rank-64 adapter, calibrate the export's no-answer confidence on training questions (its
# passage fusion kept), compare it held out with the shipped reader and keep it in
# candidates/convqa-reader when it reads better than both the shipped reader and the candidate
# kept there (`promote_reader --dry-run --keep`), then ask it the README's two questions.
# Nothing under convqa/assets changes: installing needs the full-collection rows re-measured
# (docs/readers.md, "Distilling a large reader into the fast one").
#
#   bash scripts/reader_candidate.sh RUN BENCH [DATA_DIR]
#
# BENCH is a `convqa data topiocqa-wiki` folder with BENCH/vital/indexes/dpr-ihn built. Each
# stage reuses what an earlier call left (the export, the reads under RUN-reads).
set -euo pipefail
RUN=${1:?usage: reader_candidate.sh RUN BENCH [DATA_DIR]}
B=${2:?usage: reader_candidate.sh RUN BENCH [DATA_DIR]}
DATA=${3:-../shared/data}
S=$DATA/squad
EXPORT=$RUN-export

[ -f "$EXPORT/convqa_reader.json" ] || python -m convqa.front.tools.export_lora \
    --tuned "$RUN/model" --rank 64 --exact-embeddings --out "$EXPORT"
convqa train reader-decoding --reader "$EXPORT" --keep-fusion --benchmark "$B/vital" \
    --retriever "{name: dense, index: $B/vital/indexes/dpr-ihn}" --history oldest_first \
    --turns 300 --unanswerable 300 --absent-article 300 --k 5 --ks 1 5 \
    --squad "$S/dev-v2.0.json" --squad-questions 300 --cache "$RUN-reads" \
    --report "$RUN-decoding.json" --write
python -m convqa.front.tools.promote_reader "$RUN" --decoding "$EXPORT" --dry-run --curve '' \
    --keep candidates/convqa-reader
for question in "What is the capital of Australia?" "Who directed 2001: A Space Odyssey?"; do
    convqa answer "$question" --set reader.model="$EXPORT"
done
