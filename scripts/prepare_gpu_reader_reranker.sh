#!/usr/bin/env bash
# Builds the carry folder of scripts/gpu_reader_reranker.sh: what a lent GPU machine needs
# besides the repository to continue the shipped reader on 1 + 23 negatives per question (12 of
# them from the gold article) and to train a reranker from its encoder. That machine has no
# data, no package index and no default-model package, and what travels there is at most
# 64 MiB in all: the repository's tracked files (about 40 MB) plus the carried folder. So:
#   CARRY/model/            the shipped reader merged into full weights, in transport form
#                           (device_pack model-pack --int8-matrices --xz: every weight matrix
#                           int8 per row, files over 64 KiB xz-compressed: 21.1 MB with its
#                           tokenizer files)
#   CARRY/examples.json.xz  reader examples (train + held out), each passage stored once
#   CARRY/prepared.json     what they were built from and their sizes
#
#   OMP_NUM_THREADS=1 bash scripts/prepare_gpu_reader_reranker.sh BENCH_ROOT [DATA_DIR] \
#       [WORK_DIR] [CARRY_DIR]
#
# Run it from the repository root. BENCH_ROOT: the --out folder of `convqa data topiocqa-wiki`
# (each subfolder with a turns.jsonl, e.g. full/ and vital/, is used); DATA_DIR (default
# ../shared/data): its squad/ folder's SQuAD-format files present among dev-v2.0,
# squadshifts_{new_wiki,amazon_reviews,reddit}_v1.0 and covidqa_200423 are used; WORK_DIR
# (default /tmp/convqa-gpu-prepare): the examples as built (`convqa train reader --data-only`,
# rerunning reuses them); CARRY_DIR (default .gpu, ignored by git: name it in the run tool's
# carry). Optional settings, as variables: MAX_EXAMPLES (training questions per source, a
# seeded sample; default 500), MAX_HELDOUT (held-out questions per source; default 60),
# DENSE_INDEX (a dense index folder of convqa-dpr-ihn: benchmark turns' mined negatives come
# from it rather than BM25), MODEL (default convqa-reader), LIMIT_MIB (repository + carry;
# default 63). Over the limit the script says so and fails: lower MAX_EXAMPLES. Measured on
# examples built from the 5 SQuAD-format files and the full and vital benchmarks with dense
# negatives: 600 / 80 per source packed to 5.1 MB, 900 / 100 to 6.0 MB, 1500 / 150 to 7.5 MB,
# next to a 38.4 MiB repository and the 20.1 MiB reader: the defaults keep under 63 MiB.
# Building from the full collection with dense negatives reads ~1.6 GB and takes ~10 minutes
# on two busy cores.
set -euo pipefail
BENCH_ROOT=${1:?usage: prepare_gpu_reader_reranker.sh BENCH_ROOT [DATA_DIR] [WORK_DIR] [CARRY_DIR]}
DATA=${2:-../shared/data}
WORK=${3:-/tmp/convqa-gpu-prepare}
CARRY=${4:-.gpu}
MAX_EXAMPLES=${MAX_EXAMPLES:-500}
MAX_HELDOUT=${MAX_HELDOUT:-60}
MODEL=${MODEL:-convqa-reader}
LIMIT_MIB=${LIMIT_MIB:-63}
PY=${PYTHON:-python}
TOOL="$PY -m convqa.front.tools.device_pack"

source "$(dirname "$0")/gpu_prepare_lib.sh"
build_examples "$BENCH_ROOT" "$DATA" "$WORK"

echo "== carry folder $CARRY"
rm -rf "$CARRY.tmp" && mkdir -p "$CARRY.tmp"
rm -rf "$WORK/model-full.tmp"
$TOOL merge "$MODEL" "$WORK/model-full.tmp"
$TOOL model-pack "$WORK/model-full.tmp" "$CARRY.tmp/model" --int8-matrices --xz
rm -rf "$WORK/model-full.tmp"
$TOOL examples-pack "$CARRY.tmp/examples.json.xz" "$WORK/reader-data/data/train.jsonl" \
    "$WORK/reader-data/data/heldout.jsonl"
cp "$WORK/reader-data/data/data.json" "$CARRY.tmp/prepared.json"

REPO_BYTES=$(repo_bytes)
CARRY_BYTES=$(du -sb "$CARRY.tmp" | cut -f1)
TOTAL_MIB=$(( (REPO_BYTES + CARRY_BYTES) / 1048576 ))
echo "repository $(( REPO_BYTES / 1048576 )) MiB + carry $(( CARRY_BYTES / 1048576 )) MiB = $TOTAL_MIB MiB (limit $LIMIT_MIB)"
if [ "$TOTAL_MIB" -ge "$LIMIT_MIB" ]; then
  echo "over the limit: rerun with a smaller MAX_EXAMPLES (now $MAX_EXAMPLES) in a new WORK_DIR" >&2
  rm -rf "$CARRY.tmp"
  exit 1
fi
rm -rf "$CARRY" && mv "$CARRY.tmp" "$CARRY"
echo "done: carry $CARRY/ (name it in the run tool's carry)"
