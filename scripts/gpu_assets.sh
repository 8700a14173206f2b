#!/usr/bin/env bash
# Lets the repository travel light to a lent GPU machine: a call carries the repository's
# tracked files and its carried folders, 64 MiB together, and the shipped model folders under
# convqa/assets (~45 MiB) are not used by the device drivers. `untrack` takes them out of the
# index and ignores them (the files stay on disk); `restore` puts both back. Commit nothing in
# between: the commit would delete the shipped models.
#
#   bash scripts/gpu_assets.sh untrack     # before the device calls
#   bash scripts/gpu_assets.sh restore     # right after them
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
EXCLUDE=.git/info/exclude
LINE="/convqa/assets/"
case "${1:-}" in
  untrack)
    if ! git diff --cached --quiet; then
      echo "gpu_assets.sh: the index holds staged changes; commit or unstage them first" >&2
      exit 1
    fi
    git rm -r -q --cached convqa/assets
    grep -qxF "$LINE" "$EXCLUDE" 2>/dev/null || echo "$LINE" >> "$EXCLUDE"
    echo "convqa/assets untracked for the device calls; run 'bash scripts/gpu_assets.sh restore' after them"
    ;;
  restore)
    git reset -q HEAD -- convqa/assets
    if [ -f "$EXCLUDE" ]; then
      grep -vxF "$LINE" "$EXCLUDE" > "$EXCLUDE.tmp" || true
      mv "$EXCLUDE.tmp" "$EXCLUDE"
    fi
    git diff --quiet -- convqa/assets || { echo "gpu_assets.sh: convqa/assets differs from HEAD" >&2; exit 1; }
    echo "convqa/assets tracked again"
    ;;
  *)
    echo "usage: bash scripts/gpu_assets.sh untrack|restore" >&2
    exit 2
    ;;
esac
