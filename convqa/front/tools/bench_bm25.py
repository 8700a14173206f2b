"""Measure BM25 on a passage store: build time and peak memory, index size, query speed.

Each phase runs in its own subprocess so its peak RSS is its own:
  build    stream the store into BM25Retriever.build (tokenize, score, CSC) and save it;
  query    load the saved index (mmap), retrieve top-100 for the benchmark's dev questions
           (the query texts of a history strategy) in batches of 64, then one at a time.

    python -m convqa.front.tools.bench_bm25 --bench /tmp/bench/full [--history full] [--backend numpy]

The index goes to a temporary folder (removed afterwards). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def phase_build(store_dir: str, out: str, backend: str) -> dict:
    from convqa.corpus import PassageStore
    from retrievers.bm25 import BM25Config, BM25Retriever

    store = PassageStore.open(store_dir)
    started = time.perf_counter()
    retriever = BM25Retriever.build_from_store(store, BM25Config(backend=backend))
    built = time.perf_counter()
    retriever.save(out)
    saved = time.perf_counter()
    size = sum(f.stat().st_size for f in Path(out).iterdir() if f.is_file())
    return {"passages": len(store), "build_s": round(built - started, 2),
            "save_s": round(saved - built, 2), "peak_rss_mb": round(_peak_rss_mb()),
            "index_mb": round(size / 2**20, 1), "vocabulary": len(retriever.model.vocab_dict)}


def phase_query(bench: str, out: str, history: str, backend: str, single: int) -> dict:
    from convqa.benchmark import load_labelled_turns
    from convqa.front.evaluation.retrieval import query_texts, select_turns
    from convqa.history import build_history_strategy
    from retrievers.bm25 import BM25Config, BM25Retriever

    data = load_labelled_turns(bench)
    turns = select_turns(data.turns, "dev")
    queries = [q for q in query_texts(turns, data.conversations,
                                      build_history_strategy(history)).values() if q.strip()]
    started = time.perf_counter()
    retriever = BM25Retriever.load(out, BM25Config(backend=backend))
    loaded = time.perf_counter()
    first = time.perf_counter()
    retriever.retrieve_batch(queries[:64], 100)  # numba compiles here, if used
    warm = time.perf_counter()
    for start in range(0, len(queries), 64):
        retriever.retrieve_batch(queries[start:start + 64], 100)
    batched = time.perf_counter()
    for query in queries[:single]:
        retriever.retrieve(query, 100)
    done = time.perf_counter()
    return {"queries": len(queries), "history": history, "backend": retriever.model.backend,
            "load_s": round(loaded - started, 3), "first_batch_s": round(warm - first, 2),
            "batched_qps": round(len(queries) / (batched - warm), 1),
            "single_ms": round(1000 * (done - batched) / min(single, len(queries)), 1),
            "peak_rss_mb": round(_peak_rss_mb())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", required=True, help="benchmark folder (passages/, turns.jsonl)")
    parser.add_argument("--history", default="full", help="history strategy of the queries")
    parser.add_argument("--backend", default="numpy", choices=("numpy", "numba", "auto"))
    parser.add_argument("--single", type=int, default=100, help="queries timed one at a time")
    parser.add_argument("--phase", choices=("build", "query"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "build":
        print(json.dumps(phase_build(str(Path(args.bench) / "passages"), args.out, args.backend)))
        return 0
    if args.phase == "query":
        print(json.dumps(phase_query(args.bench, args.out, args.history, args.backend,
                                     args.single)))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench_bm25."))
    try:
        results = {}
        for phase in ("build", "query"):
            proc = subprocess.run([sys.executable, "-m", "convqa.front.tools.bench_bm25",
                                   "--bench", args.bench, "--history", args.history,
                                   "--backend", args.backend, "--single", str(args.single),
                                   "--phase", phase, "--out", str(tmp / "bm25")],
                                  capture_output=True, text=True)
            if proc.returncode:
                print(proc.stderr, file=sys.stderr)
                return proc.returncode
            results[phase] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
