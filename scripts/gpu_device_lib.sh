# Shared by the device drivers (scripts/gpu_*.sh): time keeping within the run's seconds and
# step counts from a calibration log. Source it after setting T0 (start, epoch seconds),
# SECONDS_TOTAL and PY.

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
