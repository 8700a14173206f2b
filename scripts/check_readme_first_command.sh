#!/usr/bin/env bash
# The README's first command, run as a new user runs it: in a throwaway virtual environment,
#   pip install torch==2.13.0 && pip install -e . && convqa answer "Who directed 2001: A Space Odyssey?"
# (no extras), the answer with an empty HOME (so nothing cached by earlier runs is reused).
# Fails unless the answer names Kubrick; prints the install and answer wall times.
# Called by .ci/run after the test suite; runs alone too: bash scripts/check_readme_first_command.sh
#
# pip runs with the caller's HOME and environment, so it reads the same pip configuration
# (index, find-links, constraints: `pip config list`) as the machine's own pip. Only the answer
# runs with the empty HOME.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$(pwd)

# tests/test_readme_first_command.py checks that these agree with the README.
TORCH_REQUIREMENT="torch==2.13.0"
QUESTION="Who directed 2001: A Space Odyssey?"
EXPECTED="Kubrick"

work=$(mktemp -d "${TMPDIR:-/tmp}/convqa-readme-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
venv="$work/venv"
home="$work/home"
mkdir "$home"
# Nothing of the caller's Python setup may leak into the throwaway environment.
unset PYTHONPATH PYTHONHOME PIP_USER VIRTUAL_ENV CONVQA_CACHE

now() { date +%s.%N; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
fail() {
    echo "check_readme_first_command: FAILED: $1" >&2
    [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 40 "$2" >&2
    exit 1
}

echo "check_readme_first_command: fresh venv in $work (python: $(command -v python))"
python -m venv "$venv" || fail "python -m venv did not work (Debian: apt-get install python3-venv)"

started=$(now)
"$venv/bin/pip" install "$TORCH_REQUIREMENT" >"$work/pip-torch.log" 2>&1 \
    || fail "pip install $TORCH_REQUIREMENT" "$work/pip-torch.log"
torch_done=$(now)
"$venv/bin/pip" install -e "$checkout" >"$work/pip-convqa.log" 2>&1 \
    || fail "pip install -e ." "$work/pip-convqa.log"
installed=$(now)
echo "install: $(seconds "$started" "$installed") s" \
     "(torch $(seconds "$started" "$torch_done") s, convqa and its dependencies" \
     "$(seconds "$torch_done" "$installed") s; $("$venv/bin/pip" list 2>/dev/null | tail -n +3 | wc -l) packages)"

# CI has no terminal and no stdin; the answer must not need either.
set +e
HOME="$home" "$venv/bin/convqa" answer "$QUESTION" </dev/null >"$work/answer.out" 2>"$work/answer.err"
status=$?
set -e
answered=$(now)
echo "answer: $(seconds "$installed" "$answered") s (empty HOME, first run)"
cat "$work/answer.out"
if [ -s "$work/answer.err" ]; then
    echo "--- stderr (progress bars at their last state) ---"
    sed 's/.*\r//' "$work/answer.err" | tail -n 20
fi
[ "$status" = 0 ] || fail "convqa answer exited with status $status" "$work/answer.err"
grep -q "^answer: .*$EXPECTED" "$work/answer.out" \
    || fail "the answer does not name $EXPECTED"
echo "check_readme_first_command: OK (the answer names $EXPECTED)"
