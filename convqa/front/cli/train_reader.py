"""`convqa train reader` and `reader-eval`: the extractive reader's flags in,
readers/extractive/run.py out.

Wired into `convqa train` by `add_reader_parsers(jobs)` (convqa/front/cli/train.py).
"""
from __future__ import annotations

import argparse

from convqa.errors import ConvQAError

from .train_args import (add_distillation_args, add_example_sources, add_loader_workers_arg,
                         add_process_args, add_schedule_args, add_training_precision_arg,
                         add_weak_positives_arg, count, fraction, int_at_least, positive_int,
                         schedule_settings, start_run)


def add_reader_parsers(jobs) -> None:
    _add_reader(jobs)
    _add_reader_eval(jobs)


def _add_reader(jobs) -> None:
    p = jobs.add_parser(
        "reader", help="the extractive (DPR) reader on SQuAD-format files and/or a TopiOCQA x "
        "Wikipedia benchmark",
        description="Train the extractive reader: build examples (OUT/data), train (OUT/model, "
        "resumable from OUT/checkpoint), then score held-out questions (OUT/eval.json). Rerun "
        "the same command to resume. Several processes: torchrun ... -m convqa.front.cli.main "
        "train reader ... (the same flags).")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    add_example_sources(p)
    p.add_argument("--init-model", "--model", default="all-MiniLM-L6-v2", metavar="ID_OR_PATH",
                   help="encoder, question-answering checkpoint or reader folder to start from "
                        "(default all-MiniLM-L6-v2; all-mpnet-base-v2 once installed with "
                        "`convqa models install`)")
    p.add_argument("--start-step", type=count, default=0, metavar="N",
                   help="continue a run whose checkpoint is lost: --init-model is its reader at "
                        "step N (e.g. the promoted convqa-reader), the same flags give the same "
                        "data order and learning-rate schedule from step N, with a new "
                        "optimizer (default 0: a new run)")
    p.add_argument("--passages-per-question", type=positive_int, default=3, metavar="N",
                   help="passages read per question in training: 1 positive + N-1 negatives "
                        "(default 3)")
    p.add_argument("--negatives", type=count, default=7, metavar="N",
                   help="negatives stored per built example (default 7); each step samples "
                        "N-1 of them")
    p.add_argument("--dense-negatives", metavar="INDEX",
                   help="dense index folder (e.g. of convqa-dpr-ihn): the benchmark turns' "
                        "negatives become its top passages outside the gold article that hold "
                        "no answer, mined once into OUT/data (BM25 ones fill up)")
    p.add_argument("--article-negatives", type=count, default=0, metavar="N",
                   help="benchmark turns: the first N negatives become answer-free passages "
                        "of the turn's own gold article, ranked by BM25 (what a corpus that "
                        "splits articles into many passages confuses; default 0)")
    p.add_argument("--dense-top-k", type=positive_int, default=50, metavar="K",
                   help="passages retrieved per turn for those negatives (default 50)")
    p.add_argument("--dense-history", default="oldest_first", metavar="STRATEGY",
                   help="the dense retriever's query formatting (default oldest_first, as "
                        "DPR-IHN was trained)")
    p.add_argument("--unanswerable", action="store_true",
                   help="also train on unanswerable questions (SQuAD v2.0's impossible ones "
                        "and the benchmarks' UNANSWERABLE train turns): the selection softmax "
                        "gets a 'no passage answers' option and the reader learns to use it "
                        "(recorded as null_option in its folder)")
    p.add_argument("--absent-article", type=fraction, default=0.0, metavar="SHARE",
                   help="with --unanswerable: this share of the benchmarks' answerable train "
                        "turns is also read as unanswerable without its topic article (the "
                        "retriever's other passages only), as when a collection lacks the "
                        "answer (default 0)")
    add_weak_positives_arg(p, what="the --benchmark folders'")
    add_distillation_args(
        p, "--teacher-targets", "learn from a teacher reader too: its targets of this run's "
        "examples (`convqa train reader-teacher --run OUT` writes them to "
        "OUT/data/teacher-targets.jsonl)", "the gold answers' loss", 2.0)
    p.add_argument("--length-pool", type=count, default=64, metavar="BATCHES",
                   help="batches of similar length: the epoch order is sorted by length in "
                        "pools of this many batches (default 64; 0: no bucketing)")
    p.add_argument("--window-chunk", type=count, default=4, metavar="N",
                   help="windows per forward pass in training, in order of length, each chunk "
                        "padded to its own longest (default 4: ~30%% less time per step on one "
                        "CPU thread than one pass; 0: one pass, better on a GPU)")
    p.add_argument("--eval-every", type=count, default=0, metavar="STEPS",
                   help="score a fixed held-out sample (gold passage) every STEPS optimizer "
                        "steps into OUT/log.jsonl: the learning curve (default 0: never)")
    p.add_argument("--eval-per-source", type=positive_int, default=50, metavar="N",
                   help="held-out questions per source in that sample (default 50)")
    p.add_argument("--lora", type=count, default=0, metavar="R",
                   help="train LoRA adapters of rank R on the encoder (heads fully trained)")
    p.add_argument("--max-length", type=int_at_least(48), default=256, metavar="TOKENS",
                   help="tokens per window (default 256)")
    p.add_argument("--encoder-layers", type=positive_int, metavar="N",
                   help="keep only the first N layers of the initial encoder (3 of MiniLM's 6 "
                        "read about twice as fast)")
    p.add_argument("--history", default="current_first", metavar="STRATEGY",
                   help="query formatting of the conversation (default current_first)")
    p.add_argument("--history-max-tokens", type=positive_int, default=64, metavar="N",
                   help="token budget of the query (default 64)")
    p.add_argument("--max-examples", type=positive_int, metavar="N",
                   help="training examples per source (a seeded sample)")
    p.add_argument("--max-heldout", type=positive_int, default=1000, metavar="N",
                   help="held-out examples kept per source (default 1000)")
    p.add_argument("--heldout-fraction", type=fraction, default=0.1,
                   help="fraction of SQuAD articles held out (default 0.1)")
    p.add_argument("--eval-examples", type=positive_int, default=300, metavar="N",
                   help="held-out questions scored per source after training (default 300)")
    p.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation")
    p.add_argument("--data-only", action="store_true",
                   help="build the examples (OUT/data) and stop: for training elsewhere, e.g. "
                        "on a GPU machine that has no data (scripts/prepare_gpu_reader_"
                        "reranker.sh)")
    add_schedule_args(p, batch_size=4, unit="questions", lr=2e-5)
    add_training_precision_arg(p)
    add_loader_workers_arg(p)
    add_process_args(p)
    p.set_defaults(func=run_reader)


def _add_reader_eval(jobs) -> None:
    p = jobs.add_parser(
        "reader-eval", help="EM/F1 of an extractive reader on reader examples",
        description="Score a reader on examples (JSONL, e.g. OUT/data/heldout.jsonl of a "
        "`train reader` run): the gold passage alone, or with the example's negatives.")
    p.add_argument("--model", required=True, metavar="DIR",
                   help="reader folder or question-answering checkpoint")
    p.add_argument("--examples", required=True, metavar="JSONL")
    p.add_argument("--with-negatives", action="store_true",
                   help="read each question against its gold passage and its negatives")
    p.add_argument("--max-examples", type=positive_int, metavar="N")
    p.add_argument("--strategy", choices=("best_passage", "global"), default="best_passage")
    p.add_argument("--convention", choices=("squad", "topiocqa"), default="squad",
                   help="EM/F1 with several gold answers (default squad: max over golds)")
    p.add_argument("--out", metavar="FILE", help="write scores and predictions as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_reader_eval)


def _reader_config(args: argparse.Namespace):
    from readers.extractive.run import ReaderRunConfig
    from readers.extractive.train import ReaderTrainConfig

    train = ReaderTrainConfig(
        passages_per_question=args.passages_per_question,
        history={"name": args.history, "max_tokens": args.history_max_tokens},
        length_pool=args.length_pool, window_chunk=args.window_chunk,
        eval_every=args.eval_every,
        eval_per_source=args.eval_per_source, precision=args.precision,
        start_step=args.start_step, loader_workers=args.loader_workers,
        distill_weight=args.distill_weight if args.teacher_targets else 0.0,
        distill_temperature=args.distill_temperature, **schedule_settings(args))
    return ReaderRunConfig(
        squad=list(args.squad), benchmarks=list(args.benchmark), examples=list(args.examples),
        init_model=args.init_model, max_length=args.max_length,
        encoder_layers=args.encoder_layers, lora_r=args.lora,
        negatives=args.negatives, heldout_fraction=args.heldout_fraction,
        max_examples=args.max_examples, max_heldout=args.max_heldout,
        eval_examples=args.eval_examples, evaluate=not args.no_eval,
        dense_negatives=args.dense_negatives, dense_top_k=args.dense_top_k,
        article_negatives=args.article_negatives,
        dense_history=args.dense_history, unanswerable=args.unanswerable,
        weak_positives=args.weak_positives, absent_article=args.absent_article,
        teacher_targets=args.teacher_targets, train=train)


def run_reader(args: argparse.Namespace) -> int:
    from readers.extractive.run import run_reader_training
    from convqa.training.loop import make_accelerator

    config = _reader_config(args)
    say = start_run(args)
    if args.data_only:
        from readers.extractive.run import prepare_data

        train, heldout = prepare_data(config, args.out, config.train.progress, say)
        say(f"data only: {len(train)} training and {len(heldout)} held-out examples")
        return 0
    accelerator = make_accelerator(cpu=args.cpu)
    run_reader_training(config, args.out, accelerator, say)
    return 0


def run_reader_eval(args: argparse.Namespace) -> int:
    import json

    from convqa.io import write_json
    from readers.extractive.data import load_examples
    from readers.extractive.heldout import evaluate_reader
    from readers.extractive.model import ExtractiveReader
    from readers.extractive.reader import SpanReader

    examples = load_examples(args.examples)[:args.max_examples]
    if not examples:
        raise ConvQAError(f"{args.examples}: no examples")
    model = ExtractiveReader.from_pretrained(args.model)
    if model.has_adapters:
        model.merge_adapters()
    reader = SpanReader.from_model(model.eval(), strategy=args.strategy)
    result = evaluate_reader(reader, examples, with_negatives=args.with_negatives,
                             convention=args.convention, progress=not args.quiet)
    summary = {k: v for k, v in result.items() if k != "predictions"}
    if args.out:
        write_json(args.out, {**summary, "model": args.model,
                              "model_fingerprint": model.fingerprint(),
                              "predictions": result["predictions"]})
    print(json.dumps(summary))
    return 0
