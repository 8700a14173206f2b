#!/usr/bin/env python
"""How should `convqa serve` use the cores: one model copy behind a lock, a copy per worker,
or one worker that batches the query encoding of requests that arrive together?

    python -m convqa.front.tools.bench_serve_workers --retriever dense --requests 32 --rounds 3
    python -m convqa.front.tools.bench_serve_workers --retriever dense --no-reader --requests 64

Each round sends the same `--requests` real TopiOCQA turns (with their recorded histories) at
once to the server's worker pool (convqa/front/serve/workers.py) in every layout, one layout after
the other (so a busy machine slows them alike), and times how long the pool takes to answer
them all:

- `lock`: one copy of the pipeline, N workers taking turns on it (torch uses every core);
- `copies`: one copy per worker (torch threads = cores / copies);
- `batched G`: one copy, one worker answering groups of G requests with one query-encoder call
  per group (the reader still reads each question on its own).

`--query-precisions` repeats the single and batched layouts with the dense retriever's query
precision forced (fp32, bf16, int8; `auto` is what the embedded default does: measured).

Prints a Markdown table of answers per second (median over the rounds, and each round).
No HTTP: this isolates the pool; convqa/front/tools/load_serve.py measures the whole server.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path



def real_turns(data_dir: Path, count: int):
    """(question, history) of later turns of TopiOCQA conversations, recorded answers kept."""
    from convqa.loaders.topiocqa import load_topiocqa

    turns = []
    for conversation in load_topiocqa(data_dir / "topiocqa" / "topiocqa_train.json.gz"):
        for number in range(2, len(conversation.turns) + 1, 4):
            turns.append((conversation.turn(number).question, conversation.history(number)))
            if len(turns) == count:
                return turns
    return turns


def answer_group(pipeline, group):
    """Answer (question, history) pairs with one retriever call for all their queries."""
    queries = [pipeline.history.format(q, list(h)) for q, h in group]
    hits = pipeline.retriever.retrieve_batch(queries, pipeline.top_k)
    answers = []
    for (question, history), ranked in zip(group, hits):
        passages = [pipeline.passages.get(hit.passage_id) for hit in ranked]
        if pipeline.reader is not None:
            answers.append(pipeline.reader.read(question, list(history), passages))
        else:
            answers.append(passages[0] if passages else None)
    return answers


def run_layout(replicas, workers: int, threads: int, turns, group: int = 1) -> float:
    """Answers per second of `turns` sent at once to a pool of `workers` over `replicas`."""
    import torch

    from convqa.front.serve.workers import WorkerPool

    torch.set_num_threads(threads)
    pool = WorkerPool(replicas, workers, queue_size=len(turns) + 1)
    began = time.perf_counter()
    if group == 1:
        futures = [pool.submit(lambda p, q=q, h=h: p.answer(q, h)) for q, h in turns]
    else:
        futures = [pool.submit(lambda p, g=turns[i:i + group]: answer_group(p, g))
                   for i in range(0, len(turns), group)]
    for future in futures:
        future.result()
    elapsed = time.perf_counter() - began
    pool.close()
    return len(turns) / elapsed


def main(argv: list[str] | None = None) -> int:
    from convqa.front.embedded import DEFAULT_RETRIEVER, RETRIEVER_CHOICES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--retriever", default=DEFAULT_RETRIEVER, choices=RETRIEVER_CHOICES)
    parser.add_argument("--no-reader", action="store_true")
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--groups", type=int, nargs="*", default=[4, 8])
    parser.add_argument("--query-precisions", nargs="+", default=["auto"],
                        help="dense query precisions to compare (the first also for the "
                             "lock / copies layouts)")
    args = parser.parse_args(argv)

    import torch

    from convqa.config import apply_overrides
    from convqa.front.embedded import default_config, ensure_embedded
    from convqa.pipeline import Pipeline

    cores = os.cpu_count() or 1
    load_before = os.getloadavg()[0]
    ensure_embedded(progress=False, retriever=args.retriever)
    config = default_config(retriever=args.retriever,
                            reader=None if args.no_reader else "default")

    def build(precision: str):
        overrides = [] if args.retriever == "bm25" else [f"retriever.precision={precision}"]
        return Pipeline.from_config(apply_overrides(config, overrides))

    turns = real_turns(args.data_dir, args.requests)
    first, *others = args.query_precisions
    copies = [build(first) for _ in range(args.workers)]
    by_precision = {first: copies[0], **{p: build(p) for p in others}}
    for copy in [*copies, *by_precision.values()]:  # warm up: tokenizers, precision probes
        copy.answer(*turns[0])
        answer_group(copy, turns[:2])
    layouts = [(f"{args.workers} workers, 1 copy (lock)", copies[:1], args.workers, cores, 1),
               (f"{args.workers} workers, {args.workers} copies", copies, args.workers,
                max(1, cores // args.workers), 1)]
    for precision, copy in by_precision.items():
        chosen = getattr(getattr(copy.retriever, "precision", None), "upper", lambda: "-")()
        layouts.append((f"1 worker, 1 copy [{precision}: {chosen}]", [copy], 1, cores, 1))
        layouts += [(f"1 worker, 1 copy, batched {g} [{precision}: {chosen}]", [copy], 1, cores,
                     g) for g in args.groups]
    rates: dict[str, list[float]] = {name: [] for name, *_ in layouts}
    for _ in range(args.rounds):
        for name, replicas, workers, threads, group in layouts:
            rates[name].append(run_layout(replicas, workers, threads, turns, group))
    reader = "no reader" if args.no_reader else "shipped extractive reader"
    print(f"cpu capability {torch.backends.cpu.get_cpu_capability()}, {cores} cores; "
          f"{args.retriever} + {reader}; {len(turns)} real turns at once, {args.rounds} rounds; "
          f"1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print("| layout | torch threads | answers/s (median) | each round |")
    print("|---|---|---|---|")
    for name, _, _, threads, _ in layouts:
        each = ", ".join(f"{r:.2f}" for r in rates[name])
        print(f"| {name} | {threads} | {statistics.median(rates[name]):.2f} | {each} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
