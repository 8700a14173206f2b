#!/usr/bin/env bash
# Device driver: on a lent GPU machine, (1) continue the shipped extractive reader on 1
# positive + 23 negatives per question (12 from the gold article), (2) train a cross-encoder
# reranker (LoRA) from the reader's encoder on the same questions, (3) score the reader before
# and after on the held-out questions with their negatives; everything comes back under $OUT.
#
# Prepare the carry folder here first (scripts/prepare_gpu_reader_reranker.sh), then call the
# run tool from the repository root with
#     command: bash scripts/gpu_reader_reranker.sh .gpu 540     carry: [".gpu"]     timeout_s: 590
# (the machine's start, a minute or two, comes on top: about 12 of the 15 minutes a loan lasts).
#
#   bash scripts/gpu_reader_reranker.sh [CARRY_DIR] [SECONDS] [OUT_DIR]
#
# CARRY_DIR (default .gpu): the prepared folder. SECONDS (default 540): the whole run ends within
# it: 12 calibration steps time each trainer, and its step count fills its share (READER_SHARE
# of what is left after the setup, default 55%; the reranker gets what remains after the
# reader's evaluation and export, less RESERVE seconds for its own, default 100); every stage
# runs under `timeout` and the exports happen whatever came before them. READER_FLAGS and
# RERANKER_FLAGS (optional) are added to the two trainers' flags (e.g. "--lr 3e-5").
# OUT_DIR (default $OUT, the run tool's folder that comes back): at most 8 files of 16 MiB:
#   reader/export.tar.*            the trained reader (device_pack export-back) with its
#                                  eval.json, training.json, log.jsonl, calibration-log.jsonl
#   reranker/export.tar.*          the reranker, merged into full weights, the tensors equal
#                                  to the carried encoder's left out (export-back --base)
#   scores.tar                     `convqa train reader-eval --with-negatives` on the held-out
#                                  questions: init.json (the carried reader), trained.json
#   run.log                        this script's output
# Back here (FILES: the run tool's files_at):
#   python -m convqa.front.tools.device_pack import-back FILES/reader runs/gpu-reader
#   python -m convqa.front.tools.device_pack model-unpack .gpu/model runs/gpu-init
#   python -m convqa.front.tools.device_pack import-back FILES/reranker runs/gpu-reranker \
#       --base runs/gpu-init
# gives runs/gpu-reader/model and runs/gpu-reranker/model (full fp32 folders) and their logs.
set -uo pipefail
CARRY=${1:-.gpu}
SECONDS_TOTAL=${2:-540}
OUT_DIR=${3:-${OUT:?give OUT_DIR or run under the run tool, which sets OUT}}
READER_SHARE=${READER_SHARE:-55}
RESERVE=${RESERVE:-100}
PY=${PYTHON:-python3}
W=/tmp/convqa-gpu
source "$(dirname "$0")/gpu_device_lib.sh"
start_run "$W" "$OUT_DIR"
$TOOL model-unpack "$CARRY/model" "$W/init" || exit 1
$TOOL examples-unpack "$CARRY/examples.json.xz" "$W/examples" || exit 1
EX=(--examples "$W/examples/train.jsonl" --examples "$W/examples/heldout.jsonl")
say "unpacked: $(wc -l < "$W/examples/train.jsonl") training, $(wc -l < "$W/examples/heldout.jsonl") held-out questions"

# -- reader ---------------------------------------------------------------------------------
R=(--init-model "$W/init" --passages-per-question 24 --batch-size 16 --lr 2e-5 --warmup-ratio 0.05
   --epochs 50 --precision bf16 --window-chunk 0 --loader-workers auto --quiet ${READER_FLAGS:-})
calibrate reader "$(left)" "${EX[@]}" "${R[@]}"
train_for reader "$(( $(left) * READER_SHARE / 100 ))" "$(( $(left) - 60 ))" "${EX[@]}" "${R[@]}" \
    --eval-examples 300
cp "$W/reader-calibration/log.jsonl" "$W/calibration-log.jsonl"
$TOOL export-back "$W/reader/model" "$OUT_DIR/reader" "$W/reader/eval.json" \
    "$W/reader/training.json" "$W/reader/log.jsonl" "$W/calibration-log.jsonl"

# -- reranker -------------------------------------------------------------------------------
RR=(--init-model "$W/init" --negatives 15 --lora 32 --batch-size 16 --epochs 50 --precision bf16
    --loader-workers auto --quiet ${RERANKER_FLAGS:-})
if [ "$(left)" -gt $(( RESERVE + 90 )) ]; then
  calibrate reranker "$(( $(left) - RESERVE ))" "${EX[@]}" "${RR[@]}"
  BUDGET=$(( $(left) - RESERVE - 30 ))
  if [ "$BUDGET" -gt 20 ]; then
    train_for reranker "$BUDGET" "$(( $(left) - 45 ))" "${EX[@]}" "${RR[@]}" --eval-examples 300
    rm -rf "$W/reranker-full"
    $TOOL merge "$W/reranker/model" "$W/reranker-full" && \
      $TOOL export-back "$W/reranker-full" "$OUT_DIR/reranker" "$W/reranker/eval.json" \
          "$W/reranker/training.json" "$W/reranker/log.jsonl" --base "$W/init"
  fi
else
  say "no time left for the reranker"
fi

# -- held-out scores before and after -----------------------------------------------------------
mkdir -p "$W/scores"
for pair in "init:$W/init" "trained:$W/reader/model"; do
  name=${pair%%:*}; model=${pair#*:}
  if [ "$(left)" -gt 15 ] && [ -d "$model" ]; then
    within "$(( $(left) - 10 ))" $CLI train reader-eval --model "$model" \
        --examples "$W/examples/heldout.jsonl" --with-negatives --quiet \
        --out "$W/scores/$name.json" | tail -1
  fi
done
tar cf "$OUT_DIR/scores.tar" -C "$W/scores" . 2>/dev/null
ls -laR "$OUT_DIR"
[ -d "$OUT_DIR/reader" ] || { say "failed: no reader came back"; exit 1; }
say done
