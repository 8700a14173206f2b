"""One reader training run, resumable as a whole: data -> training -> held-out evaluation.

    OUT/data/train.jsonl, OUT/data/heldout.jsonl   the examples (data.py format)
    OUT/data/data.json      what they were built from (input checksums, parameters, counts)
    OUT/checkpoint/, OUT/log.jsonl, OUT/model/, OUT/training.json   (train.py)
    OUT/eval.json           EM/F1 per source on held-out examples: the gold passage alone,
                            and with its negatives; tied to the model's fingerprint

Rerunning the same command skips what is done: data whose inputs and parameters match, a
finished training (an interrupted one resumes from its checkpoint), an evaluation of the same
model. Different inputs or parameters in the same folder are refused, never mixed. With several
processes (torchrun) the main process builds the data and evaluates; all of them train.
`convqa train reader` is the command line of `run_reader_training`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.io import load_json, write_json
from convqa.models import DEFAULT_MODEL, resolve_model

from .build_examples import benchmark_examples, squad_examples
from .data import BuildReport, ReaderExample, load_examples, save_examples, scoring_convention
from .distill import load_teacher_targets
from .heldout import evaluate_reader
from .model import META_FILE, ExtractiveReader, ExtractiveReaderConfig
from .train import ReaderTrainConfig, make_accelerator, train_reader

DATA_DIR = "data"
EVAL_JSON = "eval.json"
DENSE_NEGATIVES = "dense-negatives.jsonl"


@dataclass
class ReaderRunConfig:
    squad: list[str] = field(default_factory=list)        # SQuAD-format files
    benchmarks: list[str] = field(default_factory=list)   # TopiOCQA x Wikipedia folders
    examples: list[str] = field(default_factory=list)     # prepared JSONL files (their splits)
    init_model: str = DEFAULT_MODEL   # encoder, HF QA checkpoint or reader folder to start from
    max_length: int = 256
    encoder_layers: int | None = None  # keep the first N encoder layers (None: all)
    lora_r: int = 0                   # 0: train all weights
    negatives: int = 7                # negatives stored per built example
    heldout_fraction: float = 0.1     # SQuAD articles held out
    max_examples: int | None = None   # training examples per source (seeded sample)
    max_heldout: int | None = 1000    # held-out examples kept per source
    eval_examples: int | None = 300   # held-out questions evaluated per source
    dense_negatives: str | None = None  # dense index folder: hard negatives for benchmark turns
    article_negatives: int = 0          # answer-free passages of a turn's own gold article
    dense_top_k: int = 50             # passages retrieved per turn for them
    dense_history: str | dict = "oldest_first"  # the dense retriever's query formatting
    unanswerable: bool = False        # also train on unanswerable questions (the null option)
    weak_positives: float | None = None  # min coverage: also the benchmarks' weakly labelled turns
    absent_article: float = 0.0       # share of benchmark train turns copied without their article
    teacher_targets: str | None = None  # a teacher's targets of the examples (distill.py)
    evaluate: bool = True
    train: ReaderTrainConfig = field(default_factory=ReaderTrainConfig)

    def __post_init__(self) -> None:
        if self.absent_article and not self.unanswerable:
            raise ConfigError("absent-article examples are unanswerable ones: give "
                              "--unanswerable with --absent-article")

    def data_params(self) -> dict[str, Any]:
        return {"squad": [_file_id(p) for p in self.squad],
                "benchmarks": [_benchmark_id(p) for p in self.benchmarks],
                "examples": [_file_id(p) for p in self.examples],
                "negatives": self.negatives, "heldout_fraction": self.heldout_fraction,
                "max_examples": self.max_examples, "max_heldout": self.max_heldout,
                "seed": self.train.seed, "history": self.train.history,
                **({"dense_negatives": self.dense_config().identity()}
                   if self.dense_negatives else {}),
                **({"article_negatives": self.article_negatives}
                   if self.article_negatives else {}),
                **({"unanswerable": True} if self.unanswerable else {}),
                **({"weak_positives": self.weak_positives}
                   if self.weak_positives is not None else {}),
                **({"absent_article": self.absent_article} if self.absent_article else {})}

    def weak_rule(self):
        from convqa.benchmark.weak_positives import WeakPositiveRule

        return WeakPositiveRule.for_coverage(self.weak_positives)

    def dense_config(self):
        from .dense_negatives import DenseNegativesConfig

        return DenseNegativesConfig(str(self.dense_negatives), top_k=self.dense_top_k,
                                    keep=max(self.negatives, 1), history=self.dense_history,
                                    progress=self.train.progress)


def _file_id(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise DataError("file not found", file)
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"name": file.name, "sha256": digest.hexdigest()}


def _benchmark_id(path: str) -> dict[str, Any]:
    folder = Path(path)
    if not (folder / "turns.jsonl").exists() or not (folder / "passages").is_dir():
        raise DataError("not a benchmark folder (turns.jsonl and passages/ expected; build one "
                        "with `convqa data topiocqa-wiki`)", folder)
    meta = folder / "meta.json"
    digest = hashlib.sha256(meta.read_bytes() if meta.exists() else b"").hexdigest()
    return {"name": folder.name, "meta_sha256": digest}


def prepare_data(config: ReaderRunConfig, out: str | os.PathLike, progress: bool = False,
                 say: Callable[[str], None] = lambda _: None
                 ) -> tuple[list[ReaderExample], list[ReaderExample]]:
    """(train, heldout) examples, built into OUT/data or read back from there."""
    folder = Path(out) / DATA_DIR
    params = config.data_params()
    meta_path = folder / "data.json"
    if meta_path.exists():
        meta = load_json(meta_path)
        if meta.get("params") != params:
            raise ConfigError(f"{folder} holds examples built from other inputs or settings; "
                              "use another output folder")
        say(f"data: reusing {folder}")
        return load_examples(folder / "train.jsonl"), load_examples(folder / "heldout.jsonl")
    if not (config.squad or config.benchmarks or config.examples):
        raise ConfigError("no training data: give --squad, --benchmark or --examples")
    report = BuildReport()
    examples: list[ReaderExample] = []
    for path in config.squad:
        say(f"data: {path}")
        examples += squad_examples(path, config.heldout_fraction, config.train.seed,
                                   config.negatives, config.max_examples, config.max_heldout,
                                   report, unanswerable=config.unanswerable)
    for path in config.benchmarks:
        say(f"data: {path}")
        turns = benchmark_examples(path, config.negatives, config.train.history,
                                   max_examples=config.max_examples,
                                   max_heldout=config.max_heldout, seed=config.train.seed,
                                   report=report, unanswerable=config.unanswerable,
                                   weak=config.weak_rule())
        if config.dense_negatives and config.negatives:
            _use_dense_negatives(turns, config, folder, report, say)
        if config.absent_article:  # before the gold article's own passages join the negatives
            from .absent_article import add_absent_article_examples

            made = add_absent_article_examples(turns, config.absent_article,
                                               config.train.seed, report)
            say(f"data: {made} unanswerable copies of train turns without their article")
        if config.article_negatives and config.negatives:
            from .article_negatives import add_article_negatives

            counts = add_article_negatives(turns, path, config.article_negatives,
                                           config.train.history, config.train.seed, report)
            say(f"data: {counts['article_negatives']} negatives from the gold article for "
                f"{counts['examples']} turns")
        examples += turns
    for path in config.examples:
        loaded = load_examples(path)
        examples += loaded
        report.add(f"file:{Path(path).name}", "examples", len(loaded))
    ids = set()
    for example in examples:
        if example.id in ids:
            raise DataError(f"example id {example.id!r} occurs in two inputs")
        ids.add(example.id)
    train = [e for e in examples if e.split == "train"]
    heldout = [e for e in examples if e.split == "heldout"]
    save_examples(folder / "train.jsonl", train)
    save_examples(folder / "heldout.jsonl", heldout)
    write_json(meta_path, {"params": params, "counts": report.to_dict(),
                           "train": len(train), "heldout": len(heldout)})
    say(f"data: {len(train)} training and {len(heldout)} held-out examples in {folder}")
    return train, heldout


def _use_dense_negatives(examples: list[ReaderExample], config: ReaderRunConfig, folder: Path,
                         report: BuildReport, say: Callable[[str], None]) -> None:
    """Replace the BM25 negatives of benchmark turns by the dense retriever's hard ones
    (mined once into OUT/data/dense-negatives.jsonl; dense_negatives.py)."""
    from .dense_negatives import add_dense_negatives, mine_dense_negatives

    say(f"data: dense negatives from {config.dense_negatives}")
    mined = mine_dense_negatives(examples, config.dense_config(), folder / DENSE_NEGATIVES)
    counts = add_dense_negatives(examples, mined, config.negatives)
    for example in examples:
        dense = sum(1 for p in example.negatives if p.id in
                    {item["id"] for item in mined.get(example.id, [])})
        report.add(example.source, f"{example.split}_dense_negatives", dense)
    say(f"data: {counts['dense_negatives']} dense negatives for {counts['examples']} turns "
        f"({counts['filled_with_bm25']} BM25 ones fill up)")


def _reader_folder(config: ReaderRunConfig) -> Path | None:
    """The reader folder training starts from (None: `init_model` is no reader folder); LoRA
    over one is refused (see `initial_reader`)."""
    init = Path(resolve_model(config.init_model))  # a shipped alias names its folder
    if not (init.is_dir() and (init / META_FILE).exists()):
        return None
    if config.lora_r:
        raise ConfigError(f"{config.init_model}: LoRA (--lora) cannot start from a reader "
                          "folder (its adapter would be saved over the base encoder and lose "
                          "the reader's own training); train all weights (--lora 0) and "
                          "export an adapter afterwards (convqa/front/tools/export_lora.py)")
    return init


def initial_reader(config: ReaderRunConfig) -> ExtractiveReader:
    """The reader training starts from: a reader folder as saved (all of it: an adapter is
    merged, and every weight trains on), anything else via `build`. LoRA over a reader folder
    is refused: the new adapter would be saved over the base encoder alone, without what the
    folder's own training changed."""
    init = _reader_folder(config)
    if init is not None:
        reader = ExtractiveReader.from_pretrained(init)
        if reader.has_adapters:
            reader.merge_adapters()
        reader.add_selection_head()
        reader.config = dataclasses.replace(reader.config, max_length=config.max_length)
    else:
        reader = ExtractiveReader.build(ExtractiveReaderConfig(
            model=config.init_model, max_length=config.max_length,
            encoder_layers=config.encoder_layers))
    for parameter in reader.parameters():
        parameter.requires_grad_(True)
    if config.lora_r:
        reader.add_lora(r=config.lora_r, alpha=2 * config.lora_r)
    return reader


def evaluate_by_source(reader: ExtractiveReader, heldout: Sequence[ReaderExample],
                       limit: int | None, seed: int, progress: bool = False) -> dict[str, Any]:
    """EM/F1 per source: gold passage alone and with its negatives (no predictions); only
    questions with an answer (an unanswerable one has no gold passage)."""
    from .reader import SpanReader

    span_reader = SpanReader.from_model(reader)
    sources: dict[str, list[ReaderExample]] = {}
    for example in (e for e in heldout if not e.unanswerable):
        sources.setdefault(example.source or "examples", []).append(example)
    results: dict[str, Any] = {}
    for source, items in sources.items():
        items = items[:limit] if limit is not None else items
        convention = scoring_convention(source)
        entry = {}
        for name, negatives in (("gold_passage", False), ("with_negatives", True)):
            scores = evaluate_reader(span_reader, items, with_negatives=negatives,
                                     convention=convention, seed=seed, progress=progress)
            scores.pop("predictions")
            entry[name] = scores
        results[source] = entry
    return results


def run_reader_training(config: ReaderRunConfig, out: str | os.PathLike, accelerator: Any = None,
                        say: Callable[[str], None] = print) -> dict[str, Any]:
    """Data, training and evaluation into `out` (each skipped when already done)."""
    out = Path(out)
    _reader_folder(config)  # refuse a bad start before building any data
    acc = accelerator if accelerator is not None else make_accelerator()
    main = acc.is_main_process
    talk = say if main else (lambda _: None)
    if main:
        prepare_data(config, out, config.train.progress, talk)
    acc.wait_for_everyone()
    train, heldout = prepare_data(config, out)
    if not train:
        raise ConvQAError("no training examples (every example is held out?)")
    teacher = load_teacher_targets(config.teacher_targets, train) \
        if config.teacher_targets else None
    reader = initial_reader(config)
    talk(f"training: {len(train)} examples, init {config.init_model}"
         f"{f', LoRA r={config.lora_r}' if config.lora_r else ''}"
         + (f", distilled from {config.teacher_targets} (weight {config.train.distill_weight})"
            if teacher else ""))
    result = train_reader(reader, train, out, config.train, acc,
                          info={"init_model": config.init_model, "lora_r": config.lora_r,
                                "run": {k: v for k, v in asdict(config).items()
                                        if k != "train"}},
                          heldout=heldout, teacher=teacher)
    talk(f"training: {result.steps} steps, last loss {result.last_loss}, model {result.model_dir}")
    summary: dict[str, Any] = {"model": str(result.model_dir), "steps": result.steps,
                               "train_examples": len(train), "heldout_examples": len(heldout)}
    if main and config.evaluate and heldout:
        summary["eval"] = _evaluate(out, result.model_dir, heldout, config, talk)
    acc.wait_for_everyone()
    return summary


def _evaluate(out: Path, model_dir: Path, heldout: Sequence[ReaderExample],
              config: ReaderRunConfig, say: Callable[[str], None]) -> dict[str, Any]:
    reader = ExtractiveReader.from_pretrained(model_dir)
    if reader.has_adapters:
        reader.merge_adapters()
    reader.eval()
    fingerprint = reader.fingerprint()
    path = out / EVAL_JSON
    key = {"model_fingerprint": fingerprint, "eval_examples": config.eval_examples}
    if path.exists():
        saved = load_json(path)
        if {k: saved.get(k) for k in key} == key:
            say(f"evaluation: already done ({path})")
            return saved["sources"]
    say("evaluation: held-out examples")
    sources = evaluate_by_source(reader, heldout, config.eval_examples, config.train.seed,
                                 config.train.progress)
    write_json(path, {**key, "sources": sources})
    for source, entry in sources.items():
        gold, mixed = entry["gold_passage"], entry["with_negatives"]
        say(f"  {source}: gold passage EM {gold['em']:.1f} F1 {gold['f1']:.1f}; with negatives "
            f"EM {mixed['em']:.1f} F1 {mixed['f1']:.1f}, passage accuracy "
            f"{mixed['passage_accuracy']:.1f} ({gold['count']} questions)")
    return sources
