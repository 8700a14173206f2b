"""Passage encoding throughput: naive fp32 against the fast path, on the same real passages,
one run each, in one process; optionally query latency of a built dense index.

    python -m convqa.front.tools.bench_encoding                       # 512 passages of the shared Wikipedia file
    python -m convqa.front.tools.bench_encoding --passages /tmp/bench/vital/passages
    python -m convqa.front.tools.bench_encoding --index /tmp/dense_vital --turns /tmp/bench/vital/turns.jsonl

Rows: fp32 in corpus order (naive), fp32 length-sorted, bf16 autocast in corpus order, and the
fast path (bf16 autocast + length-sorted batches, what `encode_corpus` uses). Each is run once
after a short warm-up; the minimum cosine of each row's vectors to the naive fp32 ones is shown.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

import numpy as np
import torch

from convqa.types import Passage
from retrievers.dense.encode import encode_passages
from retrievers.dense.model import DualEncoder, DualEncoderConfig
from convqa.precision import BF16, FP32, min_cosine

DEFAULT_WIKI = REPO.parent / "shared" / "data" / "wikipedia" / "topiocqa_wiki_articles.jsonl.gz"


def load_passages(source: str | None, count: int) -> tuple[list[Passage], str]:
    """`count` passages spread over the first 20*count of a store, or of the shared file."""
    if source and (Path(source) / "meta.json").exists():
        from convqa.corpus import PassageStore

        store = PassageStore.open(source)
        step = max(1, min(20, len(store) // count))
        return [store.at(i) for i in range(0, step * count, step)][:count], str(source)
    from convqa.corpus import iter_article_passages

    path = Path(source) if source else DEFAULT_WIKI
    passages = list(itertools.islice(iter_article_passages(path), 0, 20 * count, 20))
    return passages[:count], str(path)


def bench_encoding(model: DualEncoder, passages: list[Passage], batch_size: int) -> list[dict]:
    encode_passages(model, passages[:batch_size], batch_size, FP32)  # warm-up (one-time init)
    encode_passages(model, passages[:batch_size], batch_size, BF16)
    rows, reference = [], None
    for name, precision, sort in (("fp32, corpus order (naive)", FP32, False),
                                  ("fp32, length-sorted", FP32, True),
                                  ("bf16 autocast, corpus order", BF16, False),
                                  ("fast path: bf16 autocast + length-sorted", BF16, True)):
        start = time.perf_counter()
        vectors = encode_passages(model, passages, batch_size, precision, sort=sort)
        seconds = time.perf_counter() - start
        reference = vectors if reference is None else reference
        rows.append({"path": name, "passages_per_s": len(passages) / seconds,
                     "seconds": seconds, "min_cosine_to_fp32":
                     min_cosine(torch.from_numpy(reference), torch.from_numpy(vectors))})
    return rows


def load_queries(turns: str | None, history: str | None, count: int) -> list[str]:
    """The first `count` questions of a benchmark's turns.jsonl, formatted with a history
    strategy when one is named (else q_t alone)."""
    if not turns:
        return [f"question number {i} about history" for i in range(count)]
    from convqa.benchmark.labelled_turns import load_labelled_turns
    from convqa.history.base import build_history_strategy

    labelled = load_labelled_turns(turns)
    chosen = labelled.turns[:count]
    if not history:
        return [t.question for t in chosen]
    strategy = build_history_strategy(history)
    return [strategy.format_turn(labelled.conversations[t.conversation_id], t.turn)
            for t in chosen]


def bench_queries(index_dir: str, questions: list[str]) -> dict:
    """Latency of the `dense` retriever: one query per call, and 64 per `retrieve_batch` call
    (encoded in batches of the retriever's batch_size)."""
    from convqa.registry import RETRIEVERS

    retriever = RETRIEVERS.build({"name": "dense", "index": index_dir})
    retriever.retrieve_batch(questions[:8], k=10)  # warm-up + fast-path check
    start = time.perf_counter()
    for question in questions:
        retriever.retrieve(question, k=10)
    single = (time.perf_counter() - start) / len(questions)
    start = time.perf_counter()
    for begin in range(0, len(questions), 64):
        retriever.retrieve_batch(questions[begin:begin + 64], k=10)
    batched = (time.perf_counter() - start) / len(questions)
    vectors = retriever.encode_queries(questions)
    start = time.perf_counter()
    for row in vectors:
        retriever.index.search(row[None], 10)
    search_single = (time.perf_counter() - start) / len(questions)
    start = time.perf_counter()
    retriever.index.search(vectors, 10)
    search_batched = (time.perf_counter() - start) / len(questions)
    index_file = Path(index_dir) / "index.faiss"
    vectors_dir = Path(index_dir) / "vectors"
    tokens = retriever.model.tokenize_queries(questions)["attention_mask"].sum(1).tolist()
    return {"index": index_dir, "factory": retriever.index.meta["factory"],
            "passages": retriever.index.count, "queries": len(questions),
            "query_mean_tokens": sum(tokens) / len(tokens),
            "query_precision": retriever.precision,
            "index_mb": index_file.stat().st_size / 2**20,
            "vectors_mb": sum(p.stat().st_size for p in vectors_dir.glob("*.npy")) / 2**20
            if vectors_dir.exists() else None,
            "ms_per_query_one_at_a_time": 1000 * single,
            "ms_per_query_in_calls_of_64": 1000 * batched,
            "faiss_ms_per_query_one_at_a_time": 1000 * search_single,
            "faiss_ms_per_query_batched": 1000 * search_batched}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--passages", default=None,
                        help="a passage store folder or an articles JSONL(.gz); default: the "
                             "shared Wikipedia file")
    parser.add_argument("--count", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--index", default=None, help="also time queries on this dense index")
    parser.add_argument("--turns", default=None, help="turns.jsonl whose questions to query")
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--history", default=None,
                        help="history strategy for the queries (e.g. current_first); default "
                             "the question alone")
    parser.add_argument("--skip-encoding", action="store_true")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch/FAISS threads (default: torch's choice). On a machine busy "
                             "with other work, fewer threads than cores can be much faster: "
                             "spinning OpenMP threads wait for descheduled peers")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.threads:
        import faiss

        torch.set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)

    result: dict = {"threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                    "load_average": os.getloadavg(), "torch": torch.__version__}
    if not args.skip_encoding:
        model = DualEncoder.build(DualEncoderConfig(model=args.model)).eval()
        passages, source = load_passages(args.passages, args.count)
        lengths = [len(ids) for ids in model.tokenize_passages(passages, padding=False)
                   ["input_ids"]]
        rows = bench_encoding(model, passages, args.batch_size)
        naive, fast = rows[0]["passages_per_s"], rows[-1]["passages_per_s"]
        result.update({"source": source, "passages": len(passages),
                       "mean_tokens": float(np.mean(lengths)), "max_tokens": max(lengths),
                       "batch_size": args.batch_size, "rows": rows,
                       "fast_over_naive_fp32": fast / naive})
        print(f"{len(passages)} passages from {source}, mean {np.mean(lengths):.0f} tokens "
              f"(max {max(lengths)}), batch {args.batch_size}, {torch.get_num_threads()} threads, "
              f"load average {os.getloadavg()[0]:.2f}\n")
        print("| path | passages/s | seconds | min cosine to fp32 |\n|---|---:|---:|---:|")
        for row in rows:
            print(f"| {row['path']} | {row['passages_per_s']:.1f} | {row['seconds']:.1f} | "
                  f"{row['min_cosine_to_fp32']:.6f} |")
        print(f"\nfast path / naive fp32: {fast / naive:.2f}x")
    if args.index:
        queries = bench_queries(args.index, load_queries(args.turns, args.history,
                                                          args.queries))
        queries["history"] = args.history
        result["retrieval"] = queries
        print("\n" + "\n".join(f"{k}: {v:.2f}" if isinstance(v, float) else f"{k}: {v}"
                               for k, v in queries.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
