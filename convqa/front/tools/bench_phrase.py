#!/usr/bin/env python
"""Phrase index vs retriever + reader on the same corpus, machine and turns, in one run:
questions per second, index bytes per passage, and EM/F1 on the turns asked.

    python -m convqa.front.tools.bench_phrase --phrase-index runs/phrase-index-vital \\
        --dense-index /tmp/bench/vital/indexes/dpr-ihn --benchmark /tmp/bench/vital
    # build the phrase index first (resumable) from a phrase model:
    python -m convqa.front.tools.bench_phrase --phrase-index runs/phrase-index-vital \\
        --phrase-model runs/phrase-v1/model --build --benchmark /tmp/bench/vital

The retriever + reader is `default_pipeline()` (convqa.front.paths): the shipped DPR-IHN adapter
over the vital corpus (Flat FAISS), the top `--top-k` passages (default 5), the shipped extractive
reader as `convqa answer` configures it. `--dense-index` reuses an index of that encoder over the
same passages instead of building the embedded one (the retriever checks encoder fingerprint and
corpus checksum either way): the full corpus needs one. The phrase index is either kind (dump-based
or `--compact`); its size is what its folder holds on disk.

`--memory` also measures each system alone in a fresh process (loading it, then answering the
same turns): its resident memory after loading and its peak (convqa/memory.py; pages of
memory-mapped index files the queries touched count): the "RAM at query time".

Turns: the answer-evaluable dev turns of the benchmark, in file order. Both systems answer
every turn one at a time (what `convqa answer` does), in alternating blocks so that load from
other jobs on the machine hits both alike; the phrase pipeline is also timed in batches
(`--batch-size`). EM/F1 use the TopiOCQA convention over the turns' gold answers.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from convqa.io import folder_bytes


def answer_turns(benchmark: str, count: int):
    """(question, history, golds) of the first `count` answer-evaluable dev turns."""
    from convqa.benchmark import load_labelled_turns

    data = load_labelled_turns(benchmark)
    turns = [t for t in data.turns if t.split == "dev" and t.answer_evaluable][:count]
    return [(t.question, data.conversations[t.conversation_id].history(t.turn), t.answers)
            for t in turns]


def timed_blocks(systems: dict, turns, blocks: int) -> dict[str, dict]:
    """Each system answers every turn, one at a time; blocks of turns alternate systems."""
    results = {name: {"seconds": 0.0, "cpu_seconds": 0.0, "answers": []} for name in systems}
    size = max(1, -(-len(turns) // blocks))
    for begin in range(0, len(turns), size):
        block = turns[begin:begin + size]
        for name, pipeline in systems.items():
            started, cpu = time.perf_counter(), time.process_time()
            answers = [pipeline.answer(q, h) for q, h, _ in block]
            results[name]["seconds"] += time.perf_counter() - started
            results[name]["cpu_seconds"] += time.process_time() - cpu
            results[name]["answers"].extend(answers)
    return results


def stage_means(results) -> dict[str, float]:
    """Mean milliseconds per pipeline stage (the pipelines' own timings)."""
    stages: dict[str, list[float]] = {}
    for result in results:
        for stage, ms in result.timings_ms.items():
            stages.setdefault(stage, []).append(ms)
    return {stage: round(sum(v) / len(v), 1) for stage, v in stages.items()}


def rates(result: dict, count: int) -> dict[str, float]:
    """Questions per wall-clock second, and per CPU second of this process (all threads):
    the second is what another job on the machine disturbs least."""
    return {"questions_per_second": round(count / result["seconds"], 3),
            "questions_per_cpu_second": round(count / result["cpu_seconds"], 3),
            "ms_per_question": round(1000 * result["seconds"] / count, 1)}


def scores(results, turns) -> dict[str, float]:
    from convqa.metrics.answer import score_answer

    per = [score_answer(r.answer.text if r.answer else "", golds, "topiocqa")
           for r, (_, _, golds) in zip(results, turns)]
    return {"em": round(100 * sum(s["em"] for s in per) / len(per), 2),
            "f1": round(100 * sum(s["f1"] for s in per) / len(per), 2)}


def dense_config(index: str | None, top_k: int = 5) -> dict:
    from convqa.front.embedded import default_config

    config = default_config()
    config["top_k"] = top_k
    if index:
        meta = json.loads((Path(index) / "dense_index.json").read_text(encoding="utf-8"))
        config["retriever"]["index"] = index
        config["retriever"]["passages"] = meta.get("passages") or config["passages"]
        config["passages"] = config["retriever"]["passages"]
    return config


def open_system(name: str, options: dict, progress: bool = False):
    """One of the two systems compared, as `options` (main's arguments) describe it, opened
    as `convqa answer` opens it."""
    from convqa.front.paths import default_pipeline
    from convqa.pipeline import Pipeline
    from phrase_index.answerer import PhrasePipeline

    if name == "phrase":
        return PhrasePipeline.from_folder(options["phrase_index"], model=options["phrase_model"],
                                          nprobe=options.get("nprobe"),
                                          dense_weight=options.get("dense_weight"))
    if options["dense_index"]:
        return Pipeline.from_config(dense_config(options["dense_index"], options["top_k"]))
    pipeline = default_pipeline(progress=progress)
    pipeline.top_k = options["top_k"]
    return pipeline


def phrase_index_bytes(folder: str | os.PathLike) -> dict[str, int]:
    """{"index": what answering reads, "kept_dump": the dump a compact build keeps in
    OUT/dump (only for rebuilding: `--drop-dump` deletes it)}."""
    from phrase_index.compact import FORMAT as COMPACT
    from phrase_index.index import DUMP_DIR, META_FILE

    meta = json.loads((Path(folder) / META_FILE).read_text(encoding="utf-8"))
    if meta.get("format") != COMPACT:  # a dump-based index answers from its dump
        return {"index": folder_bytes(folder), "kept_dump": 0}
    dump = Path(folder) / DUMP_DIR
    return {"index": folder_bytes(folder, skip=(DUMP_DIR,)),
            "kept_dump": folder_bytes(dump) if dump.is_dir() else 0}


def phrase_index_facts(phrase) -> dict:
    """Size and kind of either kind of phrase index (dump-based or compact)."""
    meta = phrase.index.meta
    factory = meta.get("factory")
    return {"format": meta.get("format"), "factory": factory if isinstance(factory, str)
            else (factory or {}).get("start"), "passages": phrase.index.count,
            "dtype": meta.get("dtype") or f"PQ{meta.get('code_bytes')}",
            "vectors": meta.get("vectors"), "model": meta.get("model"),
            "nprobe": phrase.index.nprobe}


def measure_memory(name: str, options: dict, turns, threads: int | None) -> dict:
    """In a fresh process (multiprocessing 'spawn'): open the system alone, answer `turns`.
    Pages of memory-mapped index files that the queries touched count as resident."""
    import torch

    from convqa.memory import resident_bytes

    if threads:
        torch.set_num_threads(threads)
    before = resident_bytes().get("now")
    system = open_system(name, options)
    after_load = resident_bytes()
    most = {"anon": after_load.get("anon", 0), "file": after_load.get("file", 0)}
    for question, history, _ in turns:
        system.answer(question, history)
        now = resident_bytes()
        most = {kind: max(most[kind], now.get(kind, 0)) for kind in most}
    return {"rss_before_load_bytes": before, "rss_after_load_bytes": after_load.get("now"),
            "peak_rss_bytes": resident_bytes().get("peak"), "turns": len(turns),
            # sampled after each turn: allocated memory vs pages of mapped files (the index's
            # among them), which the kernel can drop and read again
            "max_anonymous_bytes": most["anon"], "max_file_backed_bytes": most["file"]}


def memory_in_fresh_processes(names, options: dict, turns, threads: int | None) -> dict:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Pool(1, maxtasksperchild=1) as pool:
        return {name: pool.apply(measure_memory, (name, options, turns, threads))
                for name in names}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phrase-index", required=True, help="phrase index folder")
    parser.add_argument("--phrase-model", help="phrase model that answers (default: the index's); "
                        "with --build, also the model the index is built with")
    parser.add_argument("--build", action="store_true", help="build (or resume) the index")
    parser.add_argument("--int8", action="store_true", help="with --build: int8 vectors")
    parser.add_argument("--threshold", default="0", help="with --build: filter threshold/none")
    parser.add_argument("--factory", default=None, help="with --build: FAISS factory")
    parser.add_argument("--dense-index", help="prebuilt index of the shipped DPR-IHN encoder")
    parser.add_argument("--top-k", type=int, default=5,
                        help="passages the retriever + reader reads (its best k)")
    parser.add_argument("--phrase-dense-weight", type=float, default=None,
                        help="weight of the phrase index's dense side (default 8 when it has "
                             "one; 0: answer without it)")
    parser.add_argument("--nprobe", type=int, default=None,
                        help="IVF lists the phrase index visits per query (default: the "
                             "index's, 32; the evaluation rows use 64)")
    parser.add_argument("--memory", action="store_true",
                        help="also each system's resident memory, alone in a fresh process")
    parser.add_argument("--benchmark", required=True,
                        help="benchmark folder whose answer-evaluable dev turns are asked "
                             "(`convqa data topiocqa-wiki --out BENCH`: BENCH/vital or BENCH/full)")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16, help="phrase batches")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", help="also write the numbers here")
    return parser.parse_args(argv)


def build_index(args: argparse.Namespace, passages: str) -> float:
    """Build (or resume) the phrase index `--build` asks for; its seconds."""
    from convqa.corpus import PassageStore
    from phrase_index.index import build_phrase_index
    from phrase_index.model import PhraseModel

    model = PhraseModel.load(args.phrase_model)
    if model.has_adapters:
        model.merge_adapters()
    threshold = None if args.threshold.lower() == "none" else float(args.threshold)
    started = time.perf_counter()
    build_phrase_index(model, PassageStore.open(passages), args.phrase_index,
                       dtype="int8" if args.int8 else "float16", factory=args.factory,
                       start_threshold=threshold, end_threshold=threshold)
    return round(time.perf_counter() - started, 1)


def timed_batches(phrase, turns, batch_size: int) -> dict[str, float]:
    """The phrase pipeline answering the turns in batches (`answer_batch`)."""
    started, cpu = time.perf_counter(), time.process_time()
    for begin in range(0, len(turns), batch_size):
        block = turns[begin:begin + batch_size]
        phrase.answer_batch([q for q, _, _ in block], [h for _, h, _ in block])
    return {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu}


def dense_report(dense, result: dict, turns, top_k: int) -> dict:
    meta = dense.retriever.index.meta
    return {**rates(result, len(turns)), "stages_ms": stage_means(result["answers"]),
            "index_bytes_per_passage": round(meta["index_bytes"] / meta["count"], 1),
            "index": dense.config["retriever"]["index"], "reader": dense.config["reader"],
            **scores(result["answers"], turns), "top_k": top_k,
            "bytes_on_disk": folder_bytes(dense.config["retriever"]["index"])}


def phrase_report(phrase, result: dict, batched: dict, turns, folder: str,
                  batch_size: int) -> dict:
    on_disk = phrase_index_bytes(folder)
    return {**rates(result, len(turns)), "stages_ms": stage_means(result["answers"]),
            "batched": {"batch_size": batch_size, **rates(batched, len(turns))},
            **phrase_index_facts(phrase), "bytes_on_disk": on_disk["index"],
            # what answering reads per passage: vectors, FAISS and the sparse side's BM25
            "index_bytes_per_passage": round(on_disk["index"] / phrase.index.count, 1),
            "vector_bytes_per_passage": phrase.index.bytes_per_passage(),
            "sparse": phrase.sparse.fingerprint() if phrase.sparse else None,
            "dense": phrase.dense.fingerprint() if phrase.dense else None,
            "kept_dump_bytes": on_disk["kept_dump"], **scores(result["answers"], turns)}


def print_report(report: dict, benchmark: str) -> None:
    rr, ph = report["retriever+reader"], report["phrase"]
    print(f"{report['turns']} answer-evaluable dev turns of {benchmark}, {report['threads']} "
          f"threads, load average {report['load_average_start']:.1f} -> "
          f"{report['load_average_end']:.1f}")
    print("| system | questions/s | questions/CPU-s | index bytes/passage | EM | F1 |\n"
          "|---|---:|---:|---:|---:|---:|")
    print(f"| DPR-IHN + extractive reader (top {rr['top_k']}) | {rr['questions_per_second']} | "
          f"{rr['questions_per_cpu_second']} | {rr['index_bytes_per_passage']:,.0f} | "
          f"{rr['em']} | {rr['f1']} |")
    print(f"| phrase index ({ph['dtype']}, {ph['factory']}) | "
          f"{ph['questions_per_second']} | {ph['questions_per_cpu_second']} | "
          f"{ph['index_bytes_per_passage']:,.0f} | {ph['em']} | {ph['f1']} |")
    print(f"| phrase index, batches of {ph['batched']['batch_size']} | "
          f"{ph['batched']['questions_per_second']} | "
          f"{ph['batched']['questions_per_cpu_second']} | | | |")
    for name in ("retriever+reader", "phrase"):
        print(f"{name} stages (mean ms): {report[name]['stages_ms']}; index on disk "
              f"{report[name]['bytes_on_disk'] / 2**20:,.1f} MiB")
        if "memory" in report[name]:
            memory = report[name]["memory"]
            print(f"{name} alone in a fresh process: resident after loading "
                  f"{memory['rss_after_load_bytes'] / 2**20:,.0f} MiB, peak while answering "
                  f"{memory['peak_rss_bytes'] / 2**20:,.0f} MiB (at most "
                  f"{memory['max_anonymous_bytes'] / 2**20:,.0f} MiB allocated, "
                  f"{memory['max_file_backed_bytes'] / 2**20:,.0f} MiB of mapped files)")
    print(f"phrase / retriever+reader: {report['speedup']['questions_per_second']}x per second, "
          f"{report['speedup']['questions_per_cpu_second']}x per CPU second")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    report: dict = {"machine": platform.machine(), "threads": torch.get_num_threads(),
                    "cpus": os.cpu_count(), "load_average_start": os.getloadavg()[0]}
    turns = answer_turns(args.benchmark, args.turns + 5)
    warm, turns = turns[:5], turns[5:]
    options = {"phrase_index": args.phrase_index, "phrase_model": args.phrase_model,
               "dense_index": args.dense_index, "top_k": args.top_k, "nprobe": args.nprobe,
               "dense_weight": args.phrase_dense_weight}
    dense = open_system("retriever+reader", options, progress=True)
    if args.build:
        report["phrase_build_seconds"] = build_index(args, dense.config["passages"])
    phrase = open_system("phrase", options)
    systems = {"retriever+reader": dense, "phrase": phrase}
    for pipeline in systems.values():
        for question, history, _ in warm:
            pipeline.answer(question, history)
    results = timed_blocks(systems, turns, args.blocks)
    batched = timed_batches(phrase, turns, args.batch_size)
    report.update({
        "turns": len(turns), "benchmark": args.benchmark,
        "load_average_end": os.getloadavg()[0],
        "retriever+reader": dense_report(dense, results["retriever+reader"], turns, args.top_k),
        "phrase": phrase_report(phrase, results["phrase"], batched, turns, args.phrase_index,
                                args.batch_size)})
    if args.memory:
        memory = memory_in_fresh_processes(systems, options, turns, args.threads)
        for name, facts in memory.items():
            report[name]["memory"] = facts
    rr, ph = report["retriever+reader"], report["phrase"]
    report["speedup"] = {key: round(ph[key] / rr[key], 2)
                         for key in ("questions_per_second", "questions_per_cpu_second")}
    print_report(report, args.benchmark)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
