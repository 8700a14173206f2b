#!/usr/bin/env python
"""Does batching the dense query encoding of concurrent requests pay on this machine?

    python -m convqa.front.tools.bench_query_batching --sizes 2 4 8 20 --rounds 5 --threads 2

`convqa serve` could gather the queries of requests that arrive together and encode them in
one call of the shipped DPR-IHN query tower instead of one call each. This measures both on
real TopiOCQA turns (formatted oldest-first, as the embedded dense retriever formats them):
for each group size n, the time of n one-query calls and of one n-query call, in each
precision the dense retriever may choose (convqa/precision.py). The two are interleaved group
by group, so a busy machine slows both alike. Only the encoder is timed: FAISS search and the
reader are the same either way. Prints a Markdown table (ms per query).

Batching must not change answers: with --index (a dense index of the same encoder, e.g. the
embedded one) it also encodes --agreement queries one by one and in groups of 8 and reports,
per precision, the lowest cosine between the two and how many top-1 / top-5 results differ.
int8 dynamic quantization scales activations per batch, so there a query's vector depends on
the other queries of its batch.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path



def real_queries(data_dir: Path, count: int) -> list[str]:
    """`count` conversational query texts: later turns of TopiOCQA conversations with their
    history, formatted by the embedded dense default's strategy (oldest-first)."""
    from convqa.history import build_history_strategy
    from convqa.loaders.topiocqa import load_topiocqa

    strategy = build_history_strategy("oldest_first")
    texts = []
    for conversation in load_topiocqa(data_dir / "topiocqa" / "topiocqa_train.json.gz"):
        for number in range(2, len(conversation.turns) + 1, 3):
            texts.append(strategy.format(conversation.turn(number).question,
                                         conversation.history(number)))
            if len(texts) == count:
                return texts
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", default="convqa-dpr-ihn")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 20])
    parser.add_argument("--rounds", type=int, default=5, help="groups timed per size")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"])
    parser.add_argument("--index", type=Path, help="dense index to compare the results on")
    parser.add_argument("--agreement", type=int, default=64, help="queries of that check")
    args = parser.parse_args(argv)

    import torch

    from convqa.precision import normalize_precision
    from retrievers.dense.build import load_encoder
    from retrievers.dense.encode import encode_queries

    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_encoder(args.model)
    queries = real_queries(args.data_dir, max(args.sizes) * args.rounds)
    precisions = [normalize_precision(p) for p in args.precisions]
    for precision in precisions:  # warm up every path (int8 makes its quantized copy here)
        encode_queries(model, queries[:4], 4, precision)
    print(f"cpu capability: {torch.backends.cpu.get_cpu_capability()}, torch threads: "
          f"{torch.get_num_threads()}, model {args.model}, {len(queries)} real queries")
    print("| precision | group | one call per query (ms/query) | one call per group (ms/query)"
          " | speed-up |")
    print("|---|---|---|---|---|")
    for precision in precisions:
        for size in args.sizes:
            single, batched = [], []
            for round_ in range(args.rounds):
                group = queries[round_ * size:(round_ + 1) * size]
                began = time.perf_counter()
                for query in group:
                    encode_queries(model, [query], 1, precision)
                single.append((time.perf_counter() - began) * 1000 / size)
                began = time.perf_counter()
                encode_queries(model, group, size, precision)
                batched.append((time.perf_counter() - began) * 1000 / size)
            one, many = statistics.median(single), statistics.median(batched)
            print(f"| {precision} | {size} | {one:.1f} | {many:.1f} | {one / many:.2f}x |")
    if args.index:
        print_agreement(model, real_queries(args.data_dir, args.agreement), precisions,
                        args.index)
    return 0


def print_agreement(model, queries: list[str], precisions: list[str], index_dir: Path) -> None:
    """Query vectors encoded alone vs in groups of 8: lowest cosine, changed top-1 / top-5."""
    import numpy as np

    from retrievers.dense.encode import encode_queries
    from retrievers.dense.index import DenseIndex

    index = DenseIndex.load(index_dir)
    print(f"\n{len(queries)} queries, alone vs in groups of 8:\n")
    print("| precision | lowest cosine | top-1 changed | top-5 set changed |")
    print("|---|---|---|---|")
    for precision in precisions:
        alone = np.stack([encode_queries(model, [q], 1, precision)[0] for q in queries])
        grouped = np.concatenate([encode_queries(model, queries[i:i + 8], 8, precision)
                                  for i in range(0, len(queries), 8)])
        cosine = (alone * grouped).sum(1) / (np.linalg.norm(alone, axis=1)
                                              * np.linalg.norm(grouped, axis=1))
        _, top_alone = index.search(alone, 5)
        _, top_grouped = index.search(grouped, 5)
        first = int((top_alone[:, 0] != top_grouped[:, 0]).sum())
        sets = sum(set(a) != set(b) for a, b in zip(top_alone.tolist(), top_grouped.tolist()))
        print(f"| {precision} | {cosine.min():.6f} | {first} | {sets} |")


if __name__ == "__main__":
    raise SystemExit(main())
