"""`convqa train`: train retrievers.

    convqa train dpr --benchmark DIR --out DIR [--iterations 3] [--epochs 1] [--batch-size 16]
                     [--lr 2e-5] [--hard-negatives 1] [--mine-top-k 100]
                     [--history oldest_first] [--positives answer|article]
                     [--mining-corpus STORE] [--bf16] [--max-steps N] [--seed 0] ...
    convqa train mining-corpus --benchmark DIR --out STORE [--sample 20000] [--seed 0]
    convqa train reader --out DIR [--squad FILE]... [--benchmark DIR]... [--examples JSONL]...
                        [--passages-per-question 3] [--dense-negatives INDEX]
                        [--eval-every STEPS] [--lora R] [--max-steps N] [--bf16] ...
    convqa train reader-eval --model DIR --examples JSONL [--with-negatives] [--out FILE]
    convqa train convdr --mode kd|rank|multitask --out DIR --data SOURCE=PATH ...
                        [--teacher all-MiniLM-L6-v2] [--index TEACHER_INDEX] [--lora R] ...
    convqa train convdr-fidelity --model DIR (--examples JSONL | --data SOURCE=PATH ...)
    convqa train reranker --out DIR [--benchmark DIR]... [--squad FILE]... [--examples FILE]...
                          [--mined-run DIR=RUN] [--negatives 7] [--lora 16] ...
    convqa train reranker-examples --out FILE.jsonl.xz [--benchmark DIR]... [--squad FILE]...
    convqa train reranker-fusion --reranker DIR --benchmark DIR --retriever SPEC [--write]
    convqa train reranker-cascade --reranker DIR --then DIR --benchmark DIR --retriever SPEC
                                  [--write]

`dpr` runs DPR-IHN (retrievers/training/ihn.py): warm-up with in-batch negatives, then for each
further iteration encode -> mine -> retrain from the initial checkpoint; rerunning the same
command resumes after the last finished stage. Multi-process: `accelerate launch -m
convqa.front.cli.main train dpr ...` (the same flags). docs/training.md has the details.
`reader` trains the extractive (DPR) reader: examples -> training -> held-out EM/F1
(readers/extractive/run.py); rerunning resumes. `reader-eval` scores a reader on examples.
`convdr` distils a conversational query encoder from an ad hoc teacher (retrievers/convdr/run.py:
examples -> teacher targets -> mining -> training -> held-out fidelity); rerunning resumes.
`convdr-fidelity` measures student(conversation) vs teacher(rewrite) on any examples.
`reranker` trains the cross-encoder reranker (retrievers/rerank/run.py: examples -> training ->
held-out MRR / Hits@1), `reranker-examples` writes its examples into one file,
`reranker-fusion` chooses on training turns how much of a retriever's score the reranker keeps,
`reranker-cascade` when a two-stage reranker's first stage is sure enough to skip the second.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from convqa.errors import ConvQAError
from convqa.quiet import add_verbose_argument

from .train_args import (add_distillation_args, add_example_sources, add_loader_workers_arg,
                         add_process_args, add_schedule_args, add_training_precision_arg,
                         add_weak_positives_arg, count, fraction, int_at_least, positive_float,
                         positive_int, schedule_settings, start_run)



def add_parser(subparsers) -> None:
    train = subparsers.add_parser("train", help="train DPR-IHN, ConvDR, the readers or the "
                                  "phrase model", description="Train models.")
    jobs = train.add_subparsers(dest="train_command", metavar="MODEL")
    jobs.required = True
    _add_dpr(jobs)
    _add_mining_corpus(jobs)
    _add_reader(jobs)
    _add_reader_eval(jobs)
    _add_convdr(jobs)
    _add_convdr_fidelity(jobs)
    _add_phrase(jobs)
    from .train_cascade import add_cascade_parser
    from .train_decoding import add_decoding_parser
    from .train_fid import add_fid_parser
    from .train_fusion import add_fusion_parser
    from .train_reranker import add_reranker_parsers
    from .train_teacher import add_teacher_parser

    add_fid_parser(jobs)
    add_reranker_parsers(jobs)
    add_fusion_parser(jobs)
    add_cascade_parser(jobs)
    add_decoding_parser(jobs)
    add_teacher_parser(jobs)
    for job in jobs.choices.values():  # other libraries' bars and warnings only with --verbose
        add_verbose_argument(job)


def _add_dpr(jobs) -> None:
    p = jobs.add_parser(
        "dpr", help="DPR with iterative hard negatives (DPR-IHN) on a TopiOCQA x Wikipedia "
        "benchmark", description="Train a dual encoder: iteration 1 with in-batch negatives "
        "(DPR-IBN), then each further iteration retrained from the initial checkpoint with hard "
        "negatives mined by the previous iteration's model. Rerun the same command to resume.")
    p.add_argument("--benchmark", required=True, metavar="DIR",
                   help="benchmark folder (convqa data topiocqa-wiki): turns.jsonl, passages/")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (iter{n}/model)")
    p.add_argument("--iterations", type=positive_int, default=3,
                   help="1 = DPR-IBN only; 3 = IBN + two hard-negative rounds (default 3)")
    p.add_argument("--init-model", default="all-MiniLM-L6-v2", metavar="ID_OR_PATH",
                   help="initial checkpoint of every iteration (default all-MiniLM-L6-v2)")
    p.add_argument("--history", default="oldest_first", metavar="STRATEGY",
                   help="query formatting: oldest_first (default), current_first, "
                        "history_only (the DPR-shortcut model), ...")
    p.add_argument("--history-max-tokens", type=positive_int, metavar="N",
                   help="token budget of the query (default: the strategy's, 128)")
    p.add_argument("--positives", choices=("answer", "article"), default="answer",
                   help="positives: the turn's answer passages (default) or every passage of "
                        "its gold article")
    p.add_argument("--positive-choice", choices=("random", "first"), default="random",
                   help="which positive an example uses each epoch (default random)")
    p.add_argument("--hard-negatives", type=count, default=1, metavar="N",
                   help="hard negatives per example from iteration 2 on (default 1)")
    p.add_argument("--mine-top-k", type=positive_int, default=100, metavar="K",
                   help="negatives are sampled from the top-K minus positives (default 100)")
    p.add_argument("--keep-positives-in-negatives", action="store_true",
                   help="do not remove positives from the mined negatives (ablation)")
    p.add_argument("--no-exclude-gold-article", action="store_true",
                   help="remove only the positives, not every passage of the gold article")
    p.add_argument("--mining-corpus", metavar="STORE",
                   help="passage store to mine from (default: the benchmark's passages; see "
                        "`convqa train mining-corpus`)")
    p.add_argument("--scale", type=positive_float, metavar="S",
                   help="similarity scale 1/temperature (default 20 for normalised "
                        "embeddings, 1 otherwise)")
    p.add_argument("--passage-max-length", type=positive_int, default=192, metavar="N")
    p.add_argument("--lora", type=count, default=0, metavar="R",
                   help="train LoRA adapters of rank R instead of all weights")
    add_schedule_args(p, batch_size=16, unit="examples", lr=2e-5, weight_decay=0.0,
                      steps_help="cap on optimizer steps per iteration")
    add_process_args(p)
    p.set_defaults(func=run_dpr)


def _add_mining_corpus(jobs) -> None:
    p = jobs.add_parser(
        "mining-corpus", help="a smaller passage store to mine hard negatives from",
        description="Write a passage store holding the passages of the gold articles of the "
        "benchmark's train turns (all, or the first N of each plus the answer passages) plus "
        "SAMPLE random other passages, for mining on a budget.")
    p.add_argument("--benchmark", required=True, metavar="DIR")
    p.add_argument("--out", required=True, metavar="STORE")
    p.add_argument("--sample", type=count, default=20000,
                   help="random passages added besides the gold articles (default 20000)")
    p.add_argument("--per-article", type=positive_int, metavar="N",
                   help="keep only the first N passages of each gold article (plus the answer "
                        "passages); default: every passage")
    p.add_argument("--seed", type=count, default=0)
    p.add_argument("--force", action="store_true", help="replace an existing store")
    p.set_defaults(func=run_mining_corpus)


def _config(args: argparse.Namespace):
    from retrievers.training.ihn import IHNConfig
    from retrievers.training.mining import MiningConfig
    from retrievers.training.trainer import TrainConfig

    history: object = args.history
    if args.history_max_tokens:
        history = {"name": args.history, "max_tokens": args.history_max_tokens}
    train = TrainConfig(hard_negatives=args.hard_negatives, scale=args.scale,
                        positive_choice=args.positive_choice, **schedule_settings(args))
    mining = MiningConfig(top_k=args.mine_top_k,
                          keep_positives_in_negatives=args.keep_positives_in_negatives,
                          exclude_gold_article=not args.no_exclude_gold_article,
                          progress=not args.quiet)
    return IHNConfig(benchmark=args.benchmark, iterations=args.iterations,
                     init_model=args.init_model, history=history, positives=args.positives,
                     mining_corpus=args.mining_corpus,
                     passage_max_length=args.passage_max_length, lora_r=args.lora,
                     train=train, mining=mining)


def run_dpr(args: argparse.Namespace) -> int:
    from retrievers.training.ihn import run_ihn
    from retrievers.training.trainer import make_accelerator

    config = _config(args)
    start_run(args)
    if args.mining_corpus and not Path(args.mining_corpus).is_dir():
        raise ConvQAError(f"{args.mining_corpus}: mining corpus not found (build one with "
                          "`convqa train mining-corpus`)")
    accelerator = make_accelerator(cpu=args.cpu)
    main = accelerator.is_main_process
    began = time.perf_counter()

    def report(stage: str, event: str) -> None:
        if main and event in ("run", "skip"):
            print(f"[{time.perf_counter() - began:7.1f}s] {stage}: "
                  f"{'running' if event == 'run' else 'already finished, skipped'}", flush=True)

    manifest = run_ihn(config, args.out, accelerator, on_stage=report)
    if main:
        print(summary(manifest, args.out, time.perf_counter() - began))
    return 0


def summary(manifest: dict, out: str, seconds: float) -> str:
    lines = [f"DPR-IHN in {out} ({seconds:.1f}s this run):"]
    for name, info in manifest["stages"].items():
        details = ", ".join(f"{k} {v}" for k, v in info.items()
                            if k not in ("finished", "model_fingerprint"))
        lines.append(f"  {name}: {details}")
    models = sorted(p for p in Path(out).glob("iter*/model") if p.is_dir())
    lines += [f"  model: {p}" for p in models]
    return "\n".join(lines)


def run_mining_corpus(args: argparse.Namespace) -> int:
    from retrievers.training.mining import build_mining_store

    if not (Path(args.benchmark) / "passages").is_dir():
        raise ConvQAError(f"{args.benchmark}: not a benchmark folder (no passages/)")
    store = build_mining_store(args.benchmark, args.out, sample=args.sample, seed=args.seed,
                               per_article=args.per_article, overwrite=args.force)
    print(f"{store.path}: {len(store)} passages ({store.meta.get('source')})")
    return 0


# ---------------------------------------------------------------------------------------------
# The extractive reader


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
    from retrievers.training.trainer import make_accelerator

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


# ---------------------------------------------------------------------------------------------
# ConvDR


def _add_convdr(jobs) -> None:
    p = jobs.add_parser(
        "convdr", help="ConvDR: a conversational query encoder distilled from an ad hoc teacher",
        description="Train a ConvDR student: it reads the conversation and learns to put its "
        "embedding where the frozen teacher puts the human rewrite (kd), to rank a positive "
        "above teacher-mined negatives (rank), or both (multitask). Passages stay the "
        "teacher's: the teacher's dense index is used unchanged. Writes OUT/model, "
        "OUT/training.json and OUT/fidelity.json; rerun the same command to resume. Several "
        "processes: torchrun ... -m convqa.front.cli.main train convdr ... (the same flags).")
    p.add_argument("--mode", choices=("kd", "rank", "multitask"), default="kd",
                   help="kd (MSE to the teacher's rewrite embedding, default), rank, or both")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--data", action="append", default=[], metavar="SOURCE=PATH",
                   help="training data (repeatable): canard=dev.json, orquac=DIR (train "
                        "split), orquac-dev=DIR, cast=DIR (CAsT 2019), benchmark=DIR (a "
                        "benchmark's train turns, answer passages as positives), jsonl=FILE")
    p.add_argument("--teacher", default="all-MiniLM-L6-v2", metavar="ID_OR_PATH",
                   help="frozen teacher dual encoder, also the student's start (default "
                        "all-MiniLM-L6-v2; e.g. convqa-dpr-ihn)")
    p.add_argument("--index", metavar="DIR",
                   help="the teacher's dense index (`convqa index --dense --model TEACHER`): "
                        "negatives are mined from it (rank, multitask)")
    p.add_argument("--passages", metavar="STORE",
                   help="its passage store (default: the one the index records)")
    p.add_argument("--pseudo-positives", action="store_true",
                   help="examples without a given positive use the teacher's top-1 on the "
                        "rewrite as their positive (rank, multitask)")
    p.add_argument("--mine-top-k", type=positive_int, default=50, metavar="K",
                   help="teacher candidates per example; negatives are these minus the "
                        "positives (default 50)")
    p.add_argument("--negatives", type=positive_int, default=4, metavar="N",
                   help="negatives per example and step in the rank loss (default 4)")
    p.add_argument("--anchor", action="store_true",
                   help="an example without a rewrite is KD-trained towards the teacher's own "
                        "embedding of its input (multitask: rank moves the query, the anchor "
                        "keeps it near where the teacher had it)")
    p.add_argument("--in-batch-negatives", action="store_true",
                   help="rank each query also against the other examples' passages of its "
                        "batch (keeps a query tower trained on same-article negatives from "
                        "drifting away from the rest of the collection)")
    p.add_argument("--kd-weight", type=float, default=1.0, help="multitask weight of KD")
    p.add_argument("--rank-weight", type=float, default=1.0, help="multitask weight of Rank")
    p.add_argument("--scale", type=positive_float, metavar="S",
                   help="rank similarity scale 1/temperature (default 20 for normalised "
                        "embeddings, 1 otherwise)")
    p.add_argument("--history", default="questions_only", metavar="STRATEGY",
                   help="the student's input (default questions_only: ConvDR's)")
    p.add_argument("--history-max-tokens", type=positive_int, metavar="N",
                   help="token budget of the student's input (default: the strategy's, 256)")
    p.add_argument("--heldout-fraction", type=fraction, default=0.1,
                   help="fraction of conversations held out for fidelity (default 0.1)")
    p.add_argument("--exclude-benchmark", action="append", default=[], metavar="DIR",
                   help="an OR-QuAC benchmark folder (retrievers/convdr/orquac_bench.py) whose "
                        "dialogs are held out of training (repeatable)")
    p.add_argument("--max-examples", type=positive_int, metavar="N",
                   help="train on a seeded sample of N examples")
    p.add_argument("--cast-min-relevance", type=count, default=1, metavar="R",
                   help="CAsT qrels relevance that makes a positive (default 1)")
    add_weak_positives_arg(p, what="the benchmark= sources'")
    p.add_argument("--lora", type=count, default=0, metavar="R",
                   help="train LoRA adapters of rank R on the student instead of all weights")
    p.add_argument("--fast", action="store_true",
                   help="teacher encoding of rewrites in the fastest precision that agrees "
                        "with fp32 (measured; default fp32)")
    p.add_argument("--encode-batch-size", type=positive_int, default=64, metavar="N")
    p.add_argument("--fidelity-examples", type=count, default=1000, metavar="N",
                   help="held-out turns measured after training (0: skip; default 1000)")
    add_schedule_args(p, batch_size=16, unit="examples", lr=2e-5, weight_decay=0.0)
    add_process_args(p)
    p.set_defaults(func=run_convdr)


def _history_spec(args: argparse.Namespace):
    if args.history_max_tokens:
        return {"name": args.history, "max_tokens": args.history_max_tokens}
    return args.history


def _convdr_config(args: argparse.Namespace):
    from retrievers.convdr.data import parse_data_spec
    from retrievers.convdr.mining import ConvDRMiningConfig
    from retrievers.convdr.run import ConvDRRunConfig
    from retrievers.convdr.train import ConvDRTrainConfig

    data = [parse_data_spec(text) for text in args.data]
    for bench in args.exclude_benchmark:
        if not (Path(bench) / "queries.jsonl").exists():
            raise ConvQAError(f"{bench}: not an OR-QuAC benchmark folder (no queries.jsonl)")
    if args.index and not Path(args.index).is_dir():
        raise ConvQAError(f"{args.index}: index folder not found")
    train = ConvDRTrainConfig(
        mode=args.mode, negatives=args.negatives, in_batch_negatives=args.in_batch_negatives,
        kd_weight=args.kd_weight,
        rank_weight=args.rank_weight, scale=args.scale, **schedule_settings(args))
    mining = ConvDRMiningConfig(top_k=args.mine_top_k, pseudo_positives=args.pseudo_positives,
                                batch_size=args.encode_batch_size)
    return ConvDRRunConfig(
        data=data, teacher=args.teacher, history=_history_spec(args), index=args.index,
        passages=args.passages, heldout_fraction=args.heldout_fraction,
        exclude=list(args.exclude_benchmark), max_examples=args.max_examples,
        cast_min_relevance=args.cast_min_relevance, weak_positives=args.weak_positives,
        lora_r=args.lora,
        fidelity_examples=args.fidelity_examples or None,
        encode_batch_size=args.encode_batch_size, fast=args.fast, anchor=args.anchor,
        mining=mining, train=train)


def run_convdr(args: argparse.Namespace) -> int:
    from retrievers.convdr.run import run_convdr as run
    from retrievers.training.trainer import make_accelerator

    config = _convdr_config(args)
    say = start_run(args)
    accelerator = make_accelerator(cpu=args.cpu)
    result = run(config, args.out, accelerator, say)
    if accelerator.is_main_process:
        say(f"model: {Path(args.out) / 'model'}")
        if result.get("fidelity"):
            say(f"fidelity: {Path(args.out) / 'fidelity.json'}")
    return 0


def _add_convdr_fidelity(jobs) -> None:
    p = jobs.add_parser(
        "convdr-fidelity", help="how close a ConvDR student lands to the teacher's rewrite "
        "embedding", description="Mean cosine / MSE between student(conversation) and "
        "teacher(rewrite) on examples with rewrites, with the zero-shot baseline (the teacher "
        "reading the conversation) and the question-only baseline.")
    p.add_argument("--model", required=True, metavar="DIR", help="ConvDR folder (OUT/model)")
    p.add_argument("--teacher", metavar="ID_OR_PATH",
                   help="the teacher, if it moved (default: the one the model records)")
    p.add_argument("--examples", action="append", default=[], metavar="JSONL",
                   help="examples in the ConvDR JSONL format, e.g. OUT/examples/heldout.jsonl")
    p.add_argument("--data", action="append", default=[], metavar="SOURCE=PATH",
                   help="or raw data as for `train convdr` (all of it is measured)")
    p.add_argument("--history", default="questions_only", metavar="STRATEGY",
                   help="student input for examples without a formatted query")
    p.add_argument("--history-max-tokens", type=positive_int, metavar="N")
    p.add_argument("--max-examples", type=positive_int, metavar="N",
                   help="a seeded sample of N examples")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--seed", type=count, default=0)
    p.add_argument("--out", metavar="FILE", help="write the result as JSON")
    p.set_defaults(func=run_convdr_fidelity)


def run_convdr_fidelity(args: argparse.Namespace) -> int:
    import json

    from convqa.io import write_json
    from retrievers.convdr.data import build_examples, load_examples_jsonl, parse_data_spec
    from retrievers.convdr.fidelity import fidelity
    from retrievers.convdr.model import ConvDR

    if not args.examples and not args.data:
        raise ConvQAError("give --examples JSONL or --data SOURCE=PATH")
    examples = [e for path in args.examples for e in load_examples_jsonl(path)]
    if args.data:
        examples += build_examples([parse_data_spec(text) for text in args.data]).examples
    model = ConvDR.from_pretrained(args.model, teacher=args.teacher)
    fingerprint = model.fingerprint()
    if model.has_adapters:
        model.merge_adapters()
    result = fidelity(model, examples, _history_spec(args), args.batch_size,
                      args.max_examples, args.seed)
    result["model"] = args.model
    result["model_fingerprint"] = fingerprint
    if args.out:
        write_json(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k != "by_source"}))
    return 0


# ---------------------------------------------------------------------------------------------
# The phrase model (PRO-ConvQA)


def _add_phrase(jobs) -> None:
    p = jobs.add_parser(
        "phrase", help="the PRO-ConvQA phrase model on SQuAD-format files and/or a TopiOCQA x "
        "Wikipedia benchmark",
        description="Train the phrase model (phrase_index/train.py): the phrase stage (span, "
        "distillation from the extractive reader, filter, in-batch and pre-batch negatives, "
        "L_turn) into OUT/phrase, then query-side fine-tuning against frozen phrase vectors "
        "into OUT/query; the final model is OUT/model, held-out scores OUT/eval.json. Rerun "
        "the same command to resume. Several processes: torchrun ... -m convqa.front.cli.main "
        "train phrase ... (the same flags).")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    add_example_sources(p)
    p.add_argument("--init-model", default="all-MiniLM-L6-v2", metavar="ID_OR_PATH",
                   help="checkpoint both towers start from (default all-MiniLM-L6-v2), or a saved "
                        "phrase model (a folder or convqa-phrase) to train further")
    p.add_argument("--teacher", default="convqa-reader", metavar="READER",
                   help="extractive reader to distil from (default convqa-reader; 'none' "
                        "to train without distillation)")
    p.add_argument("--shared-query-encoder", action="store_true",
                   help="encode queries with the phrase tower (default: a separate tower)")
    p.add_argument("--encoder-layers", type=positive_int, metavar="N",
                   help="keep only the first N layers of each tower")
    limits = ("(default: the --init-model phrase model's; for a new model {})")
    p.add_argument("--max-answer-tokens", type=positive_int, metavar="N",
                   help="longest phrase in tokens " + limits.format(10))
    p.add_argument("--max-passage-tokens", type=int_at_least(16), metavar="N",
                   help="passage window in tokens " + limits.format(256))
    p.add_argument("--max-query-tokens", type=int_at_least(4), metavar="N",
                   help="query length in tokens " + limits.format(128))
    p.add_argument("--lora", type=count, default=0, metavar="R",
                   help="train LoRA adapters of rank R (heads fully trained); 0 = all weights")
    p.add_argument("--export-lora", type=count, default=0, metavar="R",
                   help="after training all weights, also write OUT/adapter: a rank-R LoRA "
                        "export (what ships)")
    p.add_argument("--turn-weight", type=float, default=0.5,
                   help="lambda2, the weight of L_turn (0 = the ablation without it)")
    p.add_argument("--neg-weight", type=float, default=1.0,
                   help="lambda1, the weight of the in-batch and pre-batch negative losses")
    p.add_argument("--span-weight", type=float, default=1.0)
    p.add_argument("--batch-span-weight", type=float, default=0.0,
                   help="weight of the span loss normalized over every passage of the batch "
                        "(its other passages' tokens as negatives, so that scores compare "
                        "across passages as in a corpus search); 0 = off")
    p.add_argument("--hard-negatives", type=count, default=0, metavar="N",
                   help="BM25 passages without the answer (of other articles, for a "
                        "--benchmark) added to each question's batch as negatives of the "
                        "batch-wide span loss (needs --batch-span-weight > 0; default 0)")
    p.add_argument("--distill-weight", type=float, default=1.0)
    p.add_argument("--filter-weight", type=float, default=0.5)
    p.add_argument("--pre-batch", type=count, default=2, metavar="C",
                   help="previous batches whose gold phrases are negatives (default 2)")
    p.add_argument("--no-query-finetune", action="store_true",
                   help="skip query-side fine-tuning (the ablation)")
    p.add_argument("--query-max-steps", type=positive_int, metavar="N",
                   help="cap on query-side fine-tuning steps")
    p.add_argument("--query-lr", type=positive_float, default=2e-5)
    p.add_argument("--pool-passages", type=positive_int, default=2000, metavar="N",
                   help="gold passages of training questions in the frozen phrase matrix of "
                        "query-side fine-tuning (a seeded sample)")
    p.add_argument("--pool-store", metavar="DIR",
                   help="query-side fine-tuning: also put this passage store's passages in the "
                        "frozen matrix (the corpus the model will search: the neighbours of "
                        "each gold passage become negatives)")
    p.add_argument("--pool-store-passages", type=positive_int, metavar="N",
                   help="a seeded sample of N passages of --pool-store (default: all)")
    p.add_argument("--query-only", action="store_true",
                   help="skip the phrase stage: only the query side of --init-model (a saved "
                        "phrase model) trains, so its indexes stay valid; --export-lora then "
                        "keeps its phrase adapter as it is")
    p.add_argument("--max-examples", type=positive_int, metavar="N",
                   help="training examples per source (a seeded sample)")
    p.add_argument("--heldout-fraction", type=fraction, default=0.1)
    p.add_argument("--eval-examples", type=count, default=300, metavar="N",
                   help="held-out questions scored per source, gold passage only (default 300)")
    add_schedule_args(p, batch_size=16, unit="questions", lr=5e-5, checkpoint_every=100,
                      steps_help="cap on phrase-stage steps", lr_help="phrase-stage learning rate")
    add_training_precision_arg(p)
    add_process_args(p)
    p.set_defaults(func=run_phrase)


def run_phrase(args: argparse.Namespace) -> int:
    from phrase_index.train import PhraseRunConfig, PhraseTrainConfig, run_phrase_training
    from retrievers.training.trainer import make_accelerator

    teacher = None if args.teacher.lower() == "none" else args.teacher
    weights = {"span": args.span_weight, "batch_span": args.batch_span_weight,
               "distill": args.distill_weight if teacher else 0.0,
               "filter": args.filter_weight, "in_batch": args.neg_weight,
               "pre_batch": args.neg_weight, "turn": args.turn_weight}
    common = {**schedule_settings(args), "precision": args.precision}
    phrase = PhraseTrainConfig(stage="phrase", weights=weights, pre_batch=args.pre_batch,
                               hard_negatives=args.hard_negatives, **common)
    query = None if args.no_query_finetune else PhraseTrainConfig(
        stage="query", weights={"query_side": 1.0, "turn": args.turn_weight},
        pool_passages=args.pool_passages, pool_store=args.pool_store,
        pool_store_passages=args.pool_store_passages,
        **{**common, "lr": args.query_lr, "max_steps": args.query_max_steps})
    model = {"base": args.init_model, "shared_query_encoder": args.shared_query_encoder,
             "encoder_layers": args.encoder_layers}
    model.update({name: getattr(args, name) for name in
                  ("max_answer_tokens", "max_passage_tokens", "max_query_tokens")
                  if getattr(args, name) is not None})
    config = PhraseRunConfig(
        squad=list(args.squad), benchmarks=list(args.benchmark), examples=list(args.examples),
        model=model, teacher=teacher, lora_r=args.lora, export_rank=args.export_lora,
        max_examples=args.max_examples, heldout_fraction=args.heldout_fraction,
        eval_examples=args.eval_examples, phrase=phrase, query=query,
        query_only=args.query_only)
    say = start_run(args)
    final = run_phrase_training(config, args.out, make_accelerator(cpu=args.cpu), say)
    say(f"model: {final}")
    return 0
