"""One reranker training run, resumable as a whole: examples -> training -> held-out ranking.

    OUT/data/examples.jsonl.xz, OUT/data/data.json   the examples built from --squad and
                          --benchmark (data.py), and what they were built from; not written
                          when prepared example files are given (`--examples`)
    OUT/checkpoint/, OUT/log.jsonl, OUT/model/, OUT/training.json   (train.py)
    OUT/eval.json         MRR / Hits@1 of the positive among each held-out question's
                          candidates, per source; tied to the model's fingerprint

Rerunning the same command skips what is done; other inputs or settings in the same folder are
refused, never mixed. With several processes (torchrun) the main process builds the examples
and evaluates; all of them train. `convqa train reranker` is its command line.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from convqa.errors import ConfigError, DataError
from convqa.io import load_json, write_json
from convqa.models import DEFAULT_MODEL

from .build_examples import ExampleSources, build_examples
from .data import RerankExample, load_examples, save_examples
from .distill import load_teacher_scores
from .model import META_FILE, CrossEncoder, CrossEncoderConfig
from .train import (RerankTrainConfig, evaluate_ranking, heldout_sample, make_accelerator,
                    train_reranker)

DATA_DIR = "data"
EXAMPLES_FILE = "examples.jsonl.xz"
EVAL_JSON = "eval.json"


@dataclass
class RerankRunConfig:
    sources: ExampleSources = field(default_factory=ExampleSources)
    examples: list[str] = field(default_factory=list)  # prepared files (their split fields)
    init_model: str = DEFAULT_MODEL   # an encoder, or a reranker folder to train further
    max_length: int = 256
    max_query_length: int = 64
    max_title_length: int = 16
    pooling: str = "cls"
    encoder_layers: int | None = None
    lora_r: int = 16                  # LoRA rank; 0: train all weights
    eval_examples: int | None = 500   # held-out questions per source scored after training
    evaluate: bool = True
    teacher_scores: str | None = None  # a teacher's scores of the training examples (distill.py)
    train: RerankTrainConfig = field(default_factory=RerankTrainConfig)


def _identity(path: str, folder: bool = False) -> dict[str, Any]:
    """What an input is, for data.json: a file's sha256, or a benchmark `folder`'s meta.json's."""
    target = Path(path)
    if folder:
        if not (target / "turns.jsonl").exists() or not (target / "passages").is_dir():
            raise DataError("not a benchmark folder (turns.jsonl and passages/ expected; build "
                            "one with `convqa data topiocqa-wiki`)", target)
        meta = target / "meta.json"
        data = meta.read_bytes() if meta.exists() else b""
    elif target.is_file():
        data = target.read_bytes()
    else:
        raise DataError("file not found", target)
    return {"name": target.name, "sha256": hashlib.sha256(data).hexdigest()}


def data_params(sources: ExampleSources) -> dict[str, Any]:
    params = dataclasses.asdict(sources)
    params["squad"] = [_identity(p) for p in sources.squad]
    params["benchmarks"] = [_identity(p, folder=True) for p in sources.benchmarks]
    params["runs"] = {Path(k).name: _identity(v) for k, v in sorted(sources.runs.items())}
    return params


def count_examples(examples: Sequence[RerankExample]) -> dict[str, dict[str, int]]:
    """Per source: examples and negatives of each kind, per split."""
    counts: dict[str, dict[str, int]] = {}
    for e in examples:
        row = counts.setdefault(e.source or "examples", {})
        for key, amount in ((f"{e.split}_examples", 1),
                            (f"{e.split}_article_negatives", len(e.article_negatives)),
                            (f"{e.split}_mined_negatives", len(e.mined_negatives))):
            row[key] = row.get(key, 0) + amount
    return {source: dict(sorted(row.items())) for source, row in sorted(counts.items())}


def prepare_examples(config: RerankRunConfig, out: str | os.PathLike, accelerator: Any,
                     say: Callable[[str], None] = lambda _: None) -> list[RerankExample]:
    """The examples of `config.examples`, or those of its sources, built into OUT/data once
    (by the main process) and read back from there."""
    if config.examples:
        if config.sources.squad or config.sources.benchmarks:
            raise ConfigError("give prepared examples or sources to build them from, not both")
        return [e for path in config.examples for e in load_examples(path)]
    folder = Path(out) / DATA_DIR
    if accelerator.is_main_process:
        params = data_params(config.sources)
        meta_path = folder / "data.json"
        if meta_path.exists():
            if load_json(meta_path).get("params") != params:
                raise ConfigError(f"{folder} holds examples built from other inputs or "
                                  "settings; use another output folder")
            say(f"examples: reusing {folder}")
        else:
            if not (config.sources.squad or config.sources.benchmarks):
                raise ConfigError("no training data: give --squad, --benchmark or --examples")
            examples, report = build_examples(config.sources, say)
            save_examples(folder / EXAMPLES_FILE, examples)
            write_json(meta_path, {"params": params, "report": report,
                                   "counts": count_examples(examples)})
    accelerator.wait_for_everyone()
    return load_examples(folder / EXAMPLES_FILE)


def initial_model(config: RerankRunConfig) -> CrossEncoder:
    """A fresh head on `init_model`'s encoder (with LoRA when `lora_r`), or a trained reranker
    folder (or a shipped reranker's alias, `convqa-reranker`) to train further: its own
    settings kept, every weight trainable; new LoRA adapters then sit over its weights, so only
    a folder of full weights can take them."""
    from convqa.models import shipped_model_path

    folder = shipped_model_path(config.init_model) or Path(config.init_model)
    if folder.is_dir() and (folder / META_FILE).exists():
        model = CrossEncoder.from_pretrained(folder)
        if model.has_adapters and config.lora_r:
            raise ConfigError(f"{folder}: training a LoRA reranker further with new LoRA "
                              "adapters is not supported; give --lora 0 to train all its "
                              "weights")
        model.merge_adapters()
        for parameter in model.parameters():  # a LoRA folder loads with its base frozen
            parameter.requires_grad_(True)
        if config.lora_r:  # the adapter's base is this folder's encoder
            model.config = dataclasses.replace(model.config, model=str(folder.resolve()))
            model.add_lora(r=config.lora_r, alpha=2 * config.lora_r)
        return model
    try:
        model_config = CrossEncoderConfig(
            model=config.init_model, max_length=config.max_length,
            max_query_length=config.max_query_length, max_title_length=config.max_title_length,
            pooling=config.pooling, encoder_layers=config.encoder_layers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    model = CrossEncoder.build(model_config)
    if config.lora_r:
        model.add_lora(r=config.lora_r, alpha=2 * config.lora_r)
    return model


def run_reranker_training(config: RerankRunConfig, out: str | os.PathLike,
                          accelerator: Any = None,
                          say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Examples -> training -> held-out ranking into `out`; returns the summary."""
    acc = accelerator if accelerator is not None else make_accelerator()
    out = Path(out)
    main = acc.is_main_process
    examples = prepare_examples(config, out, acc, say if main else (lambda _: None))
    train = [e for e in examples if e.split == "train"]
    heldout = [e for e in examples if e.split == "heldout"]
    counts = count_examples(examples)
    teacher = load_teacher_scores(config.teacher_scores, train) if config.teacher_scores \
        else None
    model = initial_model(config)
    model.card_facts = {"data": counts}
    if main:
        say(f"training on {len(train)} questions ({len(heldout)} held out)"
            + (f", distilled from {config.teacher_scores} (weight "
               f"{config.train.distill_weight})" if teacher else ""))
    result = train_reranker(model, train, out, config.train, acc,
                            {"data": counts, "init_model": config.init_model}, heldout=heldout,
                            teacher=teacher)
    summary: dict[str, Any] = {"model": str(result.model_dir), "steps": result.steps,
                               "last_loss": result.last_loss}
    if config.evaluate and heldout and main:
        scores = evaluate_model(result.model_dir, heldout_sample(
            heldout, config.eval_examples, config.train.seed), out / EVAL_JSON)
        from .card import rewrite_card

        record = result.info
        rewrite_card(result.model_dir, load_json(result.model_dir / META_FILE), {
            "data": counts, "heldout": scores,
            "training": {"steps": record.get("steps"), "processes": record.get("processes"),
                         "questions per step": config.train.batch_size * config.train.grad_accum
                         * (record.get("processes") or 1),
                         "negatives per question": config.train.negatives,
                         "lr": config.train.lr, "epochs": config.train.epochs,
                         "LoRA rank": config.lora_r or "none (all weights)",
                         "seed": config.train.seed}})
        summary["heldout"] = scores
        say(f"held-out: MRR {scores['mrr']:.3f}, Hits@1 {scores['hits@1']:.1f} "
            f"({scores['count']} questions, {scores['candidates']:.1f} candidates each)")
    acc.wait_for_everyone()
    return summary


def evaluate_model(folder: Path, examples: Sequence[RerankExample], path: Path
                   ) -> dict[str, Any]:
    """The held-out ranking of the saved model, cached in `path` under its fingerprint."""
    model = CrossEncoder.from_pretrained(folder)
    if model.has_adapters:
        model.merge_adapters()
    model.eval()
    fingerprint = model.fingerprint()
    ids = hashlib.sha256("\0".join(e.id for e in examples).encode()).hexdigest()[:16]
    if path.exists():
        cached = load_json(path)
        if cached.get("model_fingerprint") == fingerprint and cached.get("sample") == ids:
            return cached["scores"]
    scores = evaluate_ranking(model, examples)
    write_json(path, {"model_fingerprint": fingerprint, "sample": ids, "scores": scores})
    return scores
