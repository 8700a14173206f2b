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

from convqa.quiet import add_verbose_argument


def add_parser(subparsers) -> None:
    train = subparsers.add_parser("train", help="train DPR-IHN, ConvDR, the rerankers, the "
                                  "readers or the phrase model", description="Train models.")
    jobs = train.add_subparsers(dest="train_command", metavar="MODEL")
    jobs.required = True
    from .train_cascade import add_cascade_parser
    from .train_convdr import add_convdr_parsers
    from .train_decoding import add_decoding_parser
    from .train_dpr import add_dpr_parsers
    from .train_fid import add_fid_parser
    from .train_fusion import add_fusion_parser
    from .train_phrase import add_phrase_parser
    from .train_reader import add_reader_parsers
    from .train_reranker import add_reranker_parsers
    from .train_teacher import add_teacher_parser

    add_dpr_parsers(jobs)
    add_reader_parsers(jobs)
    add_convdr_parsers(jobs)
    add_phrase_parser(jobs)
    add_fid_parser(jobs)
    add_reranker_parsers(jobs)
    add_fusion_parser(jobs)
    add_cascade_parser(jobs)
    add_decoding_parser(jobs)
    add_teacher_parser(jobs)
    for job in jobs.choices.values():  # other libraries' bars and warnings only with --verbose
        add_verbose_argument(job)
