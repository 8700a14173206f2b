#!/usr/bin/env python
"""Every inference precision on this machine, in one run: speed and agreement with fp32 for the
passage encoder, the query encoder and the extractive reader, what `auto` picks for each, and
the reader's EM/F1 per precision on held-out SQuAD v2.0 questions (gold paragraph).

    python -m convqa.front.tools.bench_precision --out docs/results/precision-$(python -c \\
        "import torch; print(torch.backends.cpu.get_cpu_capability().lower())").json

To see what an AVX2-only CPU does on a machine that has AVX-512, restrict torch's kernels and
oneDNN (an emulation: same cores and caches, AVX2 code paths; fbgemm's int8 kernels pick their
own ISA):

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python -m convqa.front.tools.bench_precision ...

Candidates: fp32; bf16 autocast; int8 = PyTorch dynamic quantization of the attention
projections (what `auto` may pick); int8-all = of every linear layer (measured for reference).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path


import torch

from convqa import precision as P
from convqa.errors import reports_errors

CANDIDATES = ("fp32", "bf16", "int8", "int8-all")


def _runner(model, name):
    """(model, precision) to run a candidate with: int8-all is a quantized copy run as is."""
    if name == "int8-all":
        return P.quantize_model_int8(model, "all"), "fp32"
    return model, name


def _timed(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def bench_encoder(store, passages_n, queries, repeats):
    from retrievers.dense.build import load_encoder
    from retrievers.dense.encode import (choose_passage_precision, choose_query_precision,
                                         encode_tokenized)

    model = load_encoder("convqa-dpr-ihn")
    step = max(1, len(store) // passages_n)
    passages = [store.get(store.id_at(i)) for i in range(0, len(store), step)][:passages_n]
    rows, reference = {}, None
    for name in CANDIDATES:
        base, precision = _runner(model, name)
        module = P.prepare(base, precision)
        tokens = model.tokenize_passages(passages, padding=False)

        def encode(module=module, precision=precision, tokens=tokens):
            return encode_tokenized(module.encode_passage, tokens,
                                    model.passage_tokenizer.pad_token_id, model.dim,
                                    model.device, 32, precision, True)
        seconds, vectors = _timed(encode, repeats)
        reference = vectors if name == "fp32" else reference
        query_seconds, _ = _timed(lambda module=module, precision=precision: [
            encode_tokenized(module.encode_query, model.tokenize_queries([q], padding=False),
                             model.query_tokenizer.pad_token_id, model.dim, model.device, 1,
                             precision, False) for q in queries], repeats)
        rows[name] = {"passages_per_s": len(passages) / seconds,
                      "min_cosine": P.min_cosine(reference, vectors),
                      "query_ms": 1000 * query_seconds / len(queries)}
        print(f"encoder {name}: {rows[name]}", file=sys.stderr, flush=True)
    auto_p = choose_passage_precision(model, passages[:64], 32).to_dict()
    auto_q = choose_query_precision(model, queries[:16], 16).to_dict()
    return {"passages": len(passages), "candidates": rows, "auto_passages": auto_p,
            "auto_queries": auto_q}


def bench_reader(store, questions, heldout, repeats):
    from convqa.front.embedded import default_config
    from convqa.pipeline import Pipeline
    from readers.extractive.model import ExtractiveReader
    from readers.extractive.reader import SpanReader
    from readers.extractive.heldout import evaluate_reader

    model = ExtractiveReader.from_pretrained("convqa-reader")
    if model.has_adapters:
        model.merge_adapters()
    model.eval()
    config = default_config(reader=None)
    config["retriever"]["precision"] = "fp32"
    retrieval = Pipeline.from_config(config)
    reads = [(q, [p for p in retrieval.answer(q).passages]) for q in questions]
    rows, reference = {}, None
    for name in CANDIDATES:
        base, precision = _runner(model, name)
        reader = SpanReader.from_model(base, precision=precision)
        seconds, answers = _timed(lambda reader=reader: [reader.read_query(q, ps).text
                                                         for q, ps in reads], repeats)
        reference = answers if name == "fp32" else reference
        row = {"ms_per_call": 1000 * seconds / len(reads), "passages_per_call": len(reads[0][1]),
               "same_answer_as_fp32": sum(a == b for a, b in zip(answers, reference))
               / len(reads)}
        if heldout:
            scores = evaluate_reader(reader, heldout)
            row.update(heldout_em=scores["em"], heldout_f1=scores["f1"],
                       heldout_n=scores["count"])
        rows[name] = row
        print(f"reader {name}: {row}", file=sys.stderr, flush=True)
    auto = SpanReader.from_model(model)
    auto.read_query(*reads[0])
    return {"candidates": rows, "auto": auto.precision_choice.to_dict()}


@reports_errors("bench_precision")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passages", type=int, default=256, help="passages encoded per candidate")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--squad", default="../shared/data/squad/dev-v2.0.json",
                   help="SQuAD-format file whose held-out articles score the reader ('' skips)")
    p.add_argument("--heldout", type=int, default=300, help="held-out questions scored")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    from convqa.corpus import PassageStore
    from convqa.front.embedded import embedded_dir, ensure_embedded

    ensure_embedded(progress=False)
    store = PassageStore.open(embedded_dir() / "passages")
    questions = ["Who directed 2001: A Space Odyssey?", "who painted the mona lisa?",
                 "when did the berlin wall fall?", "what is the capital of australia?",
                 "who wrote pride and prejudice?", "how tall is mount everest?",
                 "what does photosynthesis produce?", "who discovered penicillin?"]
    heldout = []
    if args.squad and Path(args.squad).exists():
        from readers.extractive.build_examples import squad_examples

        heldout = [e for e in squad_examples(args.squad, negatives=0,
                                             max_heldout=args.heldout)
                   if e.split == "heldout"]
    result = {"cpu_capability": P.cpu_capability(), "machine": P.machine_key(),
              "threads": torch.get_num_threads(),
              "encoder": bench_encoder(store, args.passages, questions, args.repeats),
              "reader": bench_reader(store, questions, heldout, args.repeats)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
