# Shared by the device drivers (scripts/gpu_*.sh): the run's start, time keeping within its
# seconds and step counts from a calibration log. Source it with SECONDS_TOTAL and PY set, then
# call start_run.

# start_run WORK_DIR OUT_DIR [keep]: offline settings, a clean work folder (kept as it is with
# `keep`), everything printed from here on also in OUT_DIR/run.log, the clock (T0) started,
# CLI and TOOL set, the machine named
start_run() {
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
      TOKENIZERS_PARALLELISM=false
  [ "${3:-}" = keep ] || rm -rf "$1"
  mkdir -p "$2" "$1"
  exec > >(tee -a "$2/run.log") 2>&1
  T0=$(date +%s)
  CLI="$PY -m convqa.front.cli.main"
  TOOL="$PY -m convqa.front.tools.device_pack"
  nvidia-smi -L || true
  $PY -c "import torch, transformers, peft, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
}

# seconds left of SECONDS_TOTAL
left() { echo $(( SECONDS_TOTAL - ($(date +%s) - T0) )); }
# a line with the seconds since T0
say() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
# within SECONDS COMMAND...: the command under `timeout` (which would take 0 as no limit),
# skipped when under 5 seconds are given
within() {
  local seconds=$1; shift
  if [ "$seconds" -lt 5 ]; then say "no time left for: $*"; return 124; fi
  timeout "$seconds" "$@"
}
# steps LOG SECONDS: optimizer steps that fit SECONDS at the mean step time of LOG (the first
# three steps, warm-up, left out), at least 20, at most STEPS_CAP when that is set
steps() {
  $PY -c "import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
times = [r['seconds'] for r in rows if 'seconds' in r][3:] or [1.0]
n = max(20, int(float(sys.argv[2]) * len(times) / sum(times)))
print(min(n, int(sys.argv[3])) if sys.argv[3] else n)" "$1" "$2" "${STEPS_CAP:-}"
}
# calibrate KIND SECONDS ARGS...: 12 timed steps of `convqa train KIND ARGS` into
# $W/KIND-calibration, stopped after SECONDS
calibrate() {
  local kind=$1 seconds=$2; shift 2
  within "$seconds" $CLI train "$kind" --out "$W/$kind-calibration" "$@" --max-steps 12 \
      --no-eval | tail -3
}
# train_for KIND BUDGET STOP ARGS...: `convqa train KIND ARGS` into $W/KIND for the steps that
# fit BUDGET seconds at the calibration's pace, stopped after STOP seconds
train_for() {
  local kind=$1 budget=$2 stop=$3 n; shift 3
  n=$(steps "$W/$kind-calibration/log.jsonl" "$budget") || n=20
  say "$kind: $n steps for about $budget s"
  within "$stop" $CLI train "$kind" --out "$W/$kind" "$@" --max-steps "$n" \
      --checkpoint-every 100000 | tail -12
  say "$kind trained"
}
