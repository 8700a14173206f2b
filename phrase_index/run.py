"""One training run as `convqa train phrase` does it: examples -> the phrase stage -> the query
stage -> OUT/model (+ OUT/adapter) -> held-out scores in OUT/eval.json; rerunning resumes.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from convqa.errors import ConfigError
from convqa.io import write_json
from convqa.training.loop import make_accelerator

from .export import export_adapter, export_query_adapter
from .in_passage import heldout_scores
from .model import PhraseModel
from .train import PhraseTrainConfig, train_phrase_model


@dataclass
class PhraseRunConfig:
    squad: list[str] = field(default_factory=list)        # SQuAD-format files
    benchmarks: list[str] = field(default_factory=list)   # TopiOCQA x Wikipedia folders
    examples: list[str] = field(default_factory=list)     # reader-example JSONL files
    model: dict = field(default_factory=dict)             # PhraseModelConfig options
    teacher: str | None = "convqa-reader"                 # extractive reader to distil from
    lora_r: int = 0                   # 0: train all weights
    export_rank: int = 0              # > 0: also write OUT/adapter, a rank-r LoRA export
    max_examples: int | None = None   # training examples per source (seeded sample)
    heldout_fraction: float = 0.1
    eval_examples: int = 300          # held-out examples scored per source (0: none)
    phrase: PhraseTrainConfig = field(default_factory=PhraseTrainConfig)
    query: PhraseTrainConfig | None = field(
        default_factory=lambda: PhraseTrainConfig(stage="query"))
    query_only: bool = False          # skip the phrase stage: indexes of the start model stay valid


# Settings a run may change when it starts from a saved phrase model (the rest is its architecture).
LIMITS = ("max_passage_tokens", "max_query_tokens", "max_answer_tokens")


def initial_phrase_model(settings: dict[str, Any]) -> PhraseModel:
    """The model a run starts from. `settings["base"]` may name a saved phrase model (a folder
    or `convqa-phrase`): training continues from its towers and heads (adapters merged), with
    the run's LIMITS; its architecture settings must agree. Anything else is a Hugging Face
    checkpoint to build a new model on."""
    from convqa.models import resolve_model

    from .model import META_FILE, PhraseModelConfig

    folder = Path(resolve_model(settings["base"]))
    if not (folder / META_FILE).exists():
        try:
            return PhraseModel.build(PhraseModelConfig(**settings))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"phrase model: {exc}") from None
    model = PhraseModel.load(folder)
    if model.has_adapters:
        model.merge_adapters()
    saved = asdict(model.config)
    for name in ("shared_query_encoder", "encoder_layers"):
        if name in settings and settings[name] != saved[name]:
            raise ConfigError(f"{folder}: a phrase model with {name}={saved[name]!r}; this run "
                              f"asks for {settings[name]!r}")
    model.config = dataclasses.replace(model.config, **{
        name: settings[name] for name in LIMITS if name in settings})
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return model


def _saved_phrase_model(name: str) -> PhraseModel:
    """The saved phrase model a query-only run starts from (its phrase tower is kept)."""
    from convqa.models import resolve_model

    from .model import META_FILE

    folder = Path(resolve_model(name))
    if not (folder / META_FILE).exists():
        raise ConfigError(f"query-only training needs a saved phrase model to start from "
                          f"(--init-model convqa-phrase or a folder); {name} is not one")
    return PhraseModel.load(folder)


def run_phrase_training(config: PhraseRunConfig, out: str | os.PathLike, accelerator: Any = None,
                        say: Callable[[str], None] = print) -> Path:
    """Examples -> phrase stage -> query stage -> OUT/model (+ OUT/adapter) -> OUT/eval.json.
    Rerunning resumes (each stage skips what is finished)."""
    from convqa.models import DEFAULT_MODEL

    from .data import build_examples

    out = Path(out)
    acc = accelerator if accelerator is not None else make_accelerator()
    if not (config.squad or config.benchmarks or config.examples):
        raise ConfigError("no training data: give --squad, --benchmark or --examples")
    mined = 0 if config.query_only else config.phrase.hard_negatives
    examples = build_examples(config.squad, config.benchmarks, config.examples,
                              config.max_examples, config.heldout_fraction, config.phrase.seed,
                              negatives=mined)
    train = [e for e in examples if e.split == "train"]
    heldout = [e for e in examples if e.split != "train"]
    say(f"data: {len(train)} training and {len(heldout)} held-out examples")
    torch.manual_seed(config.phrase.seed)
    settings = {"base": DEFAULT_MODEL, **config.model}
    if config.query_only:
        if config.query is None:
            raise ConfigError("query_only with the query stage skipped: nothing to train")
        source = _saved_phrase_model(settings["base"])
    model = initial_phrase_model(settings)
    model_config = model.config
    if config.lora_r:
        model.add_lora(r=config.lora_r, alpha=2 * config.lora_r)
    teacher = None
    if config.teacher and config.phrase.weights.get("distill") and not config.query_only:
        from readers.extractive.model import ExtractiveReader

        teacher = ExtractiveReader.from_pretrained(config.teacher)
        if teacher.has_adapters:
            teacher.merge_adapters()
        say(f"teacher: {config.teacher} ({teacher.fingerprint()})")
    final = train_phrase_model(model, train, out, None if config.query_only else config.phrase,
                               config.query, teacher, acc, say)
    if not acc.is_main_process:
        return final
    tuned = PhraseModel.load(final)
    if config.export_rank and not tuned.has_adapters:
        if config.query_only and source.has_adapters:
            adapter, report = export_query_adapter(source, tuned, config.export_rank)
        else:
            adapter, report = export_adapter(PhraseModel.build(model_config), tuned,
                                             config.export_rank)
        adapter.save(out / "adapter")
        write_json(out / "adapter_export.json", report)
        say(f"adapter: {out / 'adapter'} (rank {config.export_rank})")
    if config.eval_examples and heldout:
        scores = {"model_fingerprint": tuned.full_fingerprint(),
                  "sources": heldout_scores(tuned, heldout, config.eval_examples)}
        for source, score in scores["sources"].items():
            say(f"held-out {source}: EM {score['em']:.1f} F1 {score['f1']:.1f} "
                f"(chance EM {score['chance_em']:.1f} F1 {score['chance_f1']:.1f}, "
                f"{score['count']} questions, gold passage only)")
        write_json(out / "eval.json", scores)
    return final
