"""`convqa train phrase`: the PRO-ConvQA phrase model's flags in, phrase_index/run.py out.

Wired into `convqa train` by `add_phrase_parser(jobs)` (convqa/front/cli/train.py).
"""
from __future__ import annotations

import argparse

from .train_args import (add_example_sources, add_process_args, add_schedule_args,
                         add_training_precision_arg, count, fraction, int_at_least, positive_float,
                         positive_int, schedule_settings, start_run)


def add_phrase_parser(jobs) -> None:
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
    from phrase_index.run import PhraseRunConfig, run_phrase_training
    from phrase_index.train import PhraseTrainConfig
    from convqa.training.loop import make_accelerator

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
