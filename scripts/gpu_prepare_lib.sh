# Shared by the carry builders (scripts/prepare_gpu_*.sh). Source it with PY set.

# build_examples BENCH_ROOT DATA_DIR WORK_DIR: reader examples, 1 positive + 23 negatives per
# question (12 from the gold article), into WORK_DIR/reader-data/data/{train,heldout}.jsonl
# (`convqa train reader --data-only`; rerunning reuses them). Sources: the SQuAD-format files
# present in DATA_DIR/squad among dev-v2.0, squadshifts_{new_wiki,amazon_reviews,reddit}_v1.0
# and covidqa_200423, and every BENCH_ROOT subfolder with a turns.jsonl. Settings: MAX_EXAMPLES
# (training questions per source, a seeded sample), MAX_HELDOUT (held-out questions per
# source), DENSE_INDEX (a dense index of convqa-dpr-ihn over a benchmark's collection: its
# turns' mined negatives come from it rather than BM25), EXAMPLE_FLAGS (more `convqa train
# reader` data flags, e.g. "--unanswerable --absent-article 0.3": the examples then teach the
# null option, "no passage answers", from the first step).
build_examples() {
  local bench_root=$1 data=$2 work=$3 name folder
  local sources=() dense=()
  for name in dev-v2.0 squadshifts_new_wiki_v1.0 squadshifts_amazon_reviews_v1.0 \
              squadshifts_reddit_v1.0 covidqa_200423; do
    [ -f "$data/squad/$name.json" ] && sources+=(--squad "$data/squad/$name.json")
  done
  for folder in "$bench_root"/*/; do
    [ -f "$folder/turns.jsonl" ] && sources+=(--benchmark "${folder%/}")
  done
  if [ ${#sources[@]} -eq 0 ]; then
    echo "no SQuAD files in $data/squad and no benchmark folders in $bench_root" >&2
    return 1
  fi
  [ -n "${DENSE_INDEX:-}" ] && dense=(--dense-negatives "$DENSE_INDEX")
  echo "== examples ($(date -u +%FT%TZ)): ${sources[*]}"
  $PY -m convqa.front.cli.main train reader --data-only --out "$work/reader-data" \
      "${sources[@]}" "${dense[@]}" --negatives 23 --article-negatives 12 \
      --passages-per-question 24 --max-examples "$MAX_EXAMPLES" --max-heldout "$MAX_HELDOUT" \
      ${EXAMPLE_FLAGS:-} --quiet
}

# repo_bytes [PATH...]: bytes of the repository's tracked files, those under PATHs left out
repo_bytes() {
  local exclude=()
  for path in "$@"; do exclude+=(":(exclude)$path"); done
  git ls-files -z -- . "${exclude[@]}" | xargs -0 du -cb | tail -1 | cut -f1
}
