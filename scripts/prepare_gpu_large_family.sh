#!/usr/bin/env bash
# Builds the two carry folders of scripts/gpu_large_family.sh (the large reader and reranker
# from all-mpnet-base-v2 on a lent GPU machine). That machine has no data, no package index and
# no model packages; a call carries at most 64 MiB with the repository, whose shipped models
# stay here for the calls (scripts/gpu_assets.sh untrack: ~5 MiB travel). So:
#   CARRY/1/carry.tar.000-of-002   the first half of mpnet in transport form (device_pack
#                                  model-pack --int8-matrices --xz, then split: ~93 MiB)
#   CARRY/2/carry.tar.001-of-002   the second half
#   CARRY/2/examples.json.xz       reader examples (train + held out), each passage stored once
#   CARRY/2/prepared.json          what they were built from and their sizes
#   CARRY/2/base_name.txt          the name the adapters coming back load over
#
#   OMP_NUM_THREADS=1 bash scripts/prepare_gpu_large_family.sh BENCH_ROOT [DATA_DIR] \
#       [WORK_DIR] [CARRY_DIR]
#
# Run it from the repository root. BENCH_ROOT: the --out folder of `convqa data topiocqa-wiki`
# (each subfolder with a turns.jsonl is used); DATA_DIR (default ../shared/data): its squad/
# folder's SQuAD-format files (scripts/gpu_prepare_lib.sh lists them); WORK_DIR (default
# /tmp/convqa-gpu-large-prepare): the examples as built and the base's transport form
# (rerunning reuses both; another BASE_MODEL needs a new WORK_DIR); CARRY_DIR (default
# .gpu-large, ignored by git). Settings, as variables: MAX_EXAMPLES (training questions per
# source; default 1500), MAX_HELDOUT (default 100), DENSE_INDEX and EXAMPLE_FLAGS (see
# gpu_prepare_lib.sh), LIMIT_MIB (per call, repository without its assets + carry; default
# 63), BASE_MODEL (default all-mpnet-base-v2, installed into the convqa cache
# first if it is not there; or an encoder folder).
set -euo pipefail
BENCH_ROOT=${1:?usage: prepare_gpu_large_family.sh BENCH_ROOT [DATA_DIR] [WORK_DIR] [CARRY_DIR]}
DATA=${2:-../shared/data}
WORK=${3:-/tmp/convqa-gpu-large-prepare}
CARRY=${4:-.gpu-large}
MAX_EXAMPLES=${MAX_EXAMPLES:-1500}
MAX_HELDOUT=${MAX_HELDOUT:-100}
LIMIT_MIB=${LIMIT_MIB:-63}
BASE_MODEL=${BASE_MODEL:-all-mpnet-base-v2}
PY=${PYTHON:-python}
TOOL="$PY -m convqa.front.tools.device_pack"
source "$(dirname "$0")/gpu_prepare_lib.sh"

build_examples "$BENCH_ROOT" "$DATA" "$WORK"

echo "== $BASE_MODEL in transport form"
if [ -d "$BASE_MODEL" ]; then
  BASE_DIR=$BASE_MODEL BASE_MODEL=$(cd "$BASE_MODEL" && pwd)
else
  $PY -m convqa.front.cli.main models install "$BASE_MODEL"
  BASE_DIR=$($PY -c "import sys; from convqa.models import resolve_model; print(resolve_model(sys.argv[1]))" "$BASE_MODEL")
fi
[ -d "$WORK/base-pack" ] || $TOOL model-pack "$BASE_DIR" "$WORK/base-pack" --int8-matrices --xz

echo "== carry folders $CARRY/1 and $CARRY/2"
rm -rf "$CARRY.tmp" && mkdir -p "$CARRY.tmp/2"
$TOOL split "$WORK/base-pack" "$CARRY.tmp/chunks" --pieces 2
mv "$CARRY.tmp/chunks" "$CARRY.tmp/1"
mv "$CARRY.tmp/1/carry.tar.001-of-002" "$CARRY.tmp/2/"
$TOOL examples-pack "$CARRY.tmp/2/examples.json.xz" "$WORK/reader-data/data/train.jsonl" \
    "$WORK/reader-data/data/heldout.jsonl"
cp "$WORK/reader-data/data/data.json" "$CARRY.tmp/2/prepared.json"
echo "$BASE_MODEL" > "$CARRY.tmp/2/base_name.txt"

REPO_BYTES=$(repo_bytes convqa/assets)
for call in 1 2; do
  CARRY_BYTES=$(du -sb "$CARRY.tmp/$call" | cut -f1)
  TOTAL_MIB=$(( (REPO_BYTES + CARRY_BYTES + 1048575) / 1048576 ))
  echo "call $call: repository without convqa/assets $(( REPO_BYTES / 1048576 )) MiB + carry $(( CARRY_BYTES / 1048576 )) MiB = $TOTAL_MIB MiB (limit $LIMIT_MIB)"
  if [ "$TOTAL_MIB" -gt "$LIMIT_MIB" ]; then
    echo "call $call is over the limit: rerun with a smaller MAX_EXAMPLES (now $MAX_EXAMPLES) in a new WORK_DIR" >&2
    rm -rf "$CARRY.tmp"
    exit 1
  fi
done
rm -rf "$CARRY" && mv "$CARRY.tmp" "$CARRY"
cat <<DONE
done: $CARRY/1 and $CARRY/2. Next, from the repository root:
  bash scripts/gpu_assets.sh untrack
  run  command: bash scripts/gpu_large_family.sh stash $CARRY/1       carry: ["$CARRY/1"]  timeout_s: 120
  run  command: bash scripts/gpu_large_family.sh train $CARRY/2 540   carry: ["$CARRY/2"]  timeout_s: 590
  run  command: bash scripts/gpu_large_family.sh teach - 170          timeout_s: 190  (if ~200 s are left)
  bash scripts/gpu_assets.sh restore
DONE
