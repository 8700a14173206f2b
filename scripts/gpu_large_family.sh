#!/usr/bin/env bash
# Device driver for the large family: on a lent GPU machine, (1) an extractive reader trained
# from all-mpnet-base-v2 on 1 positive + 23 negatives per question (12 from the gold article),
# (2) a cross-encoder reranker trained from that reader's encoder (every weight) on the same
# questions; each comes back as a rank-64 fp16 LoRA adapter over all-mpnet-base-v2, which
# `convqa models install all-mpnet-base-v2` gives here. (3), optional, the two score the
# training examples for the fast models' distillation.
#
# mpnet in transport form is ~93 MiB and a call carries 64 MiB with the repository, so it
# travels in two calls; the machine keeps what a call leaves in ignored folders of the
# repository (.gpu-stash/, .gpu-work/) while it stays warm, about 30 s after a call: make each
# call right after the one before. Prepare here with scripts/prepare_gpu_large_family.sh, then:
#     bash scripts/gpu_assets.sh untrack      # the shipped models stay here
#     run  command: bash scripts/gpu_large_family.sh stash .gpu-large/1
#          carry: [".gpu-large/1"]  timeout_s: 120
#     run  command: bash scripts/gpu_large_family.sh train .gpu-large/2 540
#          carry: [".gpu-large/2"]  timeout_s: 590
#     run  command: bash scripts/gpu_large_family.sh teach - 170      (if 200 s are left)
#          timeout_s: 190
#     bash scripts/gpu_assets.sh restore
# (the machine's start, a minute or two, comes on top of the first call.)
#
#   bash scripts/gpu_large_family.sh stash CARRY_DIR
#   bash scripts/gpu_large_family.sh train CARRY_DIR [SECONDS] [OUT_DIR]
#   bash scripts/gpu_large_family.sh teach - [SECONDS] [OUT_DIR]
#
# stash: keeps CARRY_DIR's chunks in .gpu-stash/ for the train call.
# train: joins the chunks of .gpu-stash/ and CARRY_DIR (the second call's), unpacks mpnet and
# the examples and trains within SECONDS (default 540). 12 calibration steps time each
# trainer. After the reader's calibration, what is left less the fixed costs (AFTER_READER
# seconds for its held-out reading and export, default 60; 30 for the reranker's calibration;
# RESERVE for the reranker's held-out ranking and export, default 60) is shared: READER_SHARE
# percent (default 55) to the reader's steps, the rest to the reranker's. The held-out
# reading and ranking take EVAL_EXAMPLES questions per source (default 100).
# teach: with the train call's models and examples still on the machine, the reranker scores
# every candidate of the training examples, then the reader keeps its selection logit and its
# 5 best answer starts and ends per passage (`convqa train reranker-teacher` / `reader-teacher`):
# the targets the fast models distil from here. Only files complete within SECONDS come back.
# READER_FLAGS, RERANKER_FLAGS: added to the trainers' flags; STEPS_CAP caps the steps (a dry
# run on a CPU); STASH and WORK_DIR (default .gpu-work) move the stash and the work folder.
# A missing chunk or a missing train call ends the call at once with one line saying so.
# OUT_DIR (default $OUT, the run tool's folder that comes back):
#   reader/export.tar.*     the reader as a rank-64 fp16 adapter over all-mpnet-base-v2, with
#                           its eval.json (held-out questions, full weights), training.json,
#                           log.jsonl and calibration-log.jsonl (export_report.json in the
#                           folder: the SVD energy kept per layer)
#   reranker/export.tar.*   the reranker, the same way
#   teacher.tar.xz          (teach) reranker-scores.jsonl and reader-targets.jsonl with their
#                           .json, on the examples prepare_gpu_large_family.sh built here,
#                           which the students must be given (the same settings rebuild them)
#   run.log                 this script's output
# Back here (FILES: the run tool's files_at):
#   python -m convqa.front.tools.device_pack import-back FILES/reader runs/gpu-reader-large
#   python -m convqa.front.tools.device_pack import-back FILES/reranker runs/gpu-reranker-large
# gives runs/gpu-*-large/model (adapter folders that load over the installed mpnet) and logs.
set -uo pipefail
MODE=${1:?usage: gpu_large_family.sh stash|train|teach CARRY_DIR [SECONDS] [OUT_DIR]}
CARRY=${2:?give the carried folder (teach: -)}
STASH=${STASH:-.gpu-stash}
PY=${PYTHON:-python3}

if [ "$MODE" = stash ]; then
  mkdir -p "$STASH" && cp "$CARRY"/carry.tar.* "$STASH"/ || exit 1
  ls -la "$STASH"
  exit 0
fi
case "$MODE" in
  train|teach) ;;
  *) echo "gpu_large_family.sh: mode $MODE: expected stash, train or teach" >&2; exit 2 ;;
esac

SECONDS_TOTAL=${3:-540}
OUT_DIR=${4:-${OUT:?give OUT_DIR or run under the run tool, which sets OUT}}
READER_SHARE=${READER_SHARE:-55}
AFTER_READER=${AFTER_READER:-60}
RESERVE=${RESERVE:-60}
EVAL=${EVAL_EXAMPLES:-100}
RANK=${RANK:-64}
W=${WORK_DIR:-.gpu-work}
source "$(dirname "$0")/gpu_device_lib.sh"

# -- teach: the targets the fast models distil from -----------------------------------------
if [ "$MODE" = teach ]; then
  if [ ! -d "$W/reader/model" ] || [ ! -f "$W/examples/train.jsonl" ]; then
    echo "gpu_large_family.sh: no trained reader in $W: the train call comes first, on the same machine" >&2
    exit 3
  fi
  start_run "$W" "$OUT_DIR" keep
  T=$W/teacher
  rm -rf "$T" "$W/student" && mkdir -p "$T" "$W/student/data"
  cp "$W/examples/train.jsonl" "$W/student/data/train.jsonl"
  if [ -d "$W/reranker/model" ]; then
    within "$(( $(left) - 20 ))" $CLI train reranker-teacher --teacher "$W/reranker/model" \
        --examples "$W/examples/train.jsonl" --examples "$W/examples/heldout.jsonl" \
        --out "$T/reranker-scores.jsonl" --precision bf16 --quiet | tail -1
    say "reranker scores done"
  fi
  within "$(( $(left) - 10 ))" $CLI train reader-teacher --teacher "$W/reader/model" \
      --run "$W/student" --top-k 5 --out "$T/reader-targets.jsonl" --precision bf16 --quiet \
      | tail -1
  # a complete teacher file has its .json beside it; parts of an unfinished one stay behind
  DONE=()
  for name in reranker-scores reader-targets; do
    [ -f "$T/$name.jsonl" ] && [ -f "$T/$name.jsonl.json" ] && DONE+=("$name.jsonl" "$name.jsonl.json")
  done
  [ ${#DONE[@]} -gt 0 ] || { say "no teacher file was complete in time"; exit 1; }
  tar cJf "$OUT_DIR/teacher.tar.xz" -C "$T" "${DONE[@]}"
  if [ "$(stat -c %s "$OUT_DIR/teacher.tar.xz")" -gt 16000000 ]; then
    say "teacher targets over 16 MB: the reranker's scores alone come back"
    tar cJf "$OUT_DIR/teacher.tar.xz" -C "$T" reranker-scores.jsonl reranker-scores.jsonl.json \
      || { rm -f "$OUT_DIR/teacher.tar.xz"; exit 1; }
  fi
  say "teacher targets: ${DONE[*]}"
  exit 0
fi

# -- train: setup ---------------------------------------------------------------------------
BASE_NAME=$(cat "$CARRY/base_name.txt" 2>/dev/null || echo all-mpnet-base-v2)
start_run "$W" "$OUT_DIR"
SOURCES=("$CARRY")
[ -d "$STASH" ] && SOURCES+=("$STASH")
if ! $TOOL join "$W/mpnet-pack" "${SOURCES[@]}"; then
  say "failed: mpnet's chunks are not all here; make the stash call, then this one at once"
  exit 3
fi
$TOOL model-unpack "$W/mpnet-pack" "$W/mpnet" || exit 1
say "base: $BASE_NAME (the adapters coming back load over it)"
$TOOL examples-unpack "$CARRY/examples.json.xz" "$W/examples" || exit 1
EX=(--examples "$W/examples/train.jsonl" --examples "$W/examples/heldout.jsonl")
say "unpacked mpnet and $(wc -l < "$W/examples/train.jsonl") training, $(wc -l < "$W/examples/heldout.jsonl") held-out questions"

# export_adapter NAME TRAINED_DIR FILES...: the trained folder as an adapter over mpnet, sent back
export_adapter() {
  local name=$1 trained=$2; shift 2
  rm -rf "$W/$name-adapter"
  $PY -m convqa.front.tools.export_lora --tuned "$trained" --base "$W/mpnet" \
      --base-name "$BASE_NAME" --rank "$RANK" --half --exact-embeddings \
      --out "$W/$name-adapter" > "$W/$name-export.log" 2>&1 || { tail -3 "$W/$name-export.log"; return 1; }
  $TOOL export-back "$W/$name-adapter" "$OUT_DIR/$name" "$@"
}

# -- reader ---------------------------------------------------------------------------------
R=(--init-model "$W/mpnet" --passages-per-question 24 --batch-size 16 --lr 5e-5
   --warmup-ratio 0.05 --epochs 50 --precision bf16 --window-chunk 0 --loader-workers auto
   --quiet ${READER_FLAGS:-})
calibrate reader "$(left)" "${EX[@]}" "${R[@]}"
SHARED=$(( $(left) - AFTER_READER - 30 - RESERVE ))
BUDGET=$(( SHARED * READER_SHARE / 100 ))
train_for reader "$BUDGET" "$(( BUDGET + AFTER_READER + 30 ))" "${EX[@]}" "${R[@]}" \
    --eval-examples "$EVAL"
cp "$W/reader-calibration/log.jsonl" "$W/calibration-log.jsonl"
export_adapter reader "$W/reader/model" "$W/reader/eval.json" "$W/reader/training.json" \
    "$W/reader/log.jsonl" "$W/calibration-log.jsonl" || say "reader export failed"
say "reader exported"

# -- reranker -------------------------------------------------------------------------------
RR=(--init-model "$W/reader/model" --negatives 15 --lora 0 --lr 3e-5 --warmup-ratio 0.05
    --batch-size 16 --epochs 50 --precision bf16 --loader-workers auto --quiet
    ${RERANKER_FLAGS:-})
if [ -d "$W/reader/model" ] && [ "$(left)" -gt $(( RESERVE + 60 )) ]; then
  calibrate reranker "$(( $(left) - RESERVE ))" "${EX[@]}" "${RR[@]}"
  BUDGET=$(( $(left) - RESERVE - 10 ))
  if [ "$BUDGET" -gt 20 ]; then
    train_for reranker "$BUDGET" "$(( $(left) - 25 ))" "${EX[@]}" "${RR[@]}" \
        --eval-examples "$EVAL"
    cp "$W/reranker-calibration/log.jsonl" "$W/reranker-calibration-log.jsonl"
    export_adapter reranker "$W/reranker/model" "$W/reranker/eval.json" \
        "$W/reranker/training.json" "$W/reranker/log.jsonl" \
        "$W/reranker-calibration-log.jsonl" || say "reranker export failed"
  fi
else
  say "no time left for the reranker"
fi
ls -laR "$OUT_DIR"
[ -d "$OUT_DIR/reader" ] || { say "failed: no reader came back"; exit 1; }
say done
