"""DPR with iterative hard negatives (DPR-IHN), stage by stage and resumable.

    examples            OUT/examples/        training examples (train split) with their meta
    iter1.train         OUT/iter1/           warm-up: in-batch negatives only (DPR-IBN)
    iter{n}.mine        OUT/iter{n}/negatives/  top-k of iter{n-1}'s model, positives removed
    iter{n}.train       OUT/iter{n}/         retrained FROM THE INITIAL CHECKPOINT with n hard
                                             negatives per example plus in-batch negatives

Each iteration's model is OUT/iter{n}/model (safetensors), with training.json recording its
settings, the examples' meta and the provenance of the negatives it was trained on.

OUT/manifest.json records the settings and every finished stage; a rerun skips finished stages
(and a stage killed half-way resumes from its own checkpoint or encoded shards). Rerunning with
other settings is refused, except `iterations`, which may grow to add iterations.
"""
from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

from convqa.errors import ConfigError, ConvQAError
from convqa.io import load_json, write_json
from convqa.training.checkpoint import MODEL
from convqa.training.loop import make_accelerator
from convqa.training.schedule import plan_steps

from .data import (POSITIVE_MODES, ExampleSet, PassageLookup, build_examples, load_examples,
                   save_examples)
from .mining import MiningConfig, load_negatives, mine_hard_negatives
from .trainer import TrainConfig, Trainer

MANIFEST = "manifest.json"
FORMAT = "convqa-dpr-ihn"
VERSION = 1
EXAMPLES_DIR = "examples"
NEGATIVES_DIR = "negatives"


@dataclass
class IHNConfig:
    benchmark: str
    iterations: int = 3
    init_model: str = "all-MiniLM-L6-v2"
    history: Any = "oldest_first"        # history-strategy spec: name or {"name": ..., ...}
    positives: str = "answer"            # "answer" | "article"
    mining_corpus: str | None = None     # a PassageStore folder; None: BENCHMARK/passages
    passage_max_length: int = 192
    lora_r: int = 0                      # > 0: train LoRA adapters of this rank only
    train: TrainConfig = field(default_factory=lambda: TrainConfig(hard_negatives=1))
    mining: MiningConfig = field(default_factory=MiningConfig)

    def __post_init__(self) -> None:
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) \
                or self.iterations < 1:
            raise ConfigError(f"iterations must be an integer >= 1, got {self.iterations!r}")
        if self.positives not in POSITIVE_MODES:
            raise ConfigError(f"positives must be one of {', '.join(POSITIVE_MODES)}, "
                              f"got {self.positives!r}")
        if self.iterations > 1 and self.train.hard_negatives < 1:
            raise ConfigError("iterations after the first need hard_negatives >= 1")
        if self.lora_r < 0:
            raise ConfigError(f"lora_r must be >= 0, got {self.lora_r}")
        from convqa.history import build_history_strategy

        build_history_strategy(self.history)  # an unknown strategy or option fails here

    @property
    def benchmark_passages(self) -> Path:
        return Path(self.benchmark) / "passages"

    @property
    def mining_store_path(self) -> Path:
        return Path(self.mining_corpus) if self.mining_corpus else self.benchmark_passages

    def settings(self) -> dict[str, Any]:
        """What the outputs depend on (compared on rerun); `iterations` may change."""
        data = asdict(self)
        data.pop("iterations")
        from convqa.history import build_history_strategy

        data["history"] = build_history_strategy(self.history).to_dict()  # the full config
        data["benchmark"] = str(Path(self.benchmark).resolve())
        data["mining_corpus"] = str(self.mining_store_path.resolve())
        data["train"] = self.train.schedule_key()
        data["mining"] = {k: v for k, v in data["mining"].items()
                          if k not in ("progress", "batch_size")}
        return data


def stage_names(iterations: int) -> list[str]:
    names = ["examples", "iter1.train"]
    for n in range(2, iterations + 1):
        names += [f"iter{n}.mine", f"iter{n}.train"]
    return names


class Manifest:
    """OUT/manifest.json: the settings and the finished stages (written by the main process)."""

    def __init__(self, out: Path, settings: dict[str, Any], write: bool):
        self.path = out / MANIFEST
        self.write = write
        if self.path.exists():
            data = load_json(self.path)
            old = data.get("settings")
            if old != settings:
                differing = sorted(k for k in set(old or {}) | set(settings)
                                   if (old or {}).get(k) != settings.get(k))
                raise ConfigError(f"{out} was made with other settings ({', '.join(differing)} "
                                  "differ); use another --out, or the same settings to resume")
            self.data = data
        else:
            self.data = {"format": FORMAT, "version": VERSION, "settings": settings,
                         "stages": {}}

    def finished(self, stage: str) -> bool:
        return stage in self.data["stages"]

    def record(self, stage: str, info: dict[str, Any]) -> None:
        self.data["stages"][stage] = {
            "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            **info}
        self.save()

    def save(self) -> None:
        if self.write:
            write_json(self.path, self.data)


def initial_model(config: IHNConfig):
    """The initial checkpoint every iteration starts from (LoRA adapters seeded the same)."""
    from convqa.history import build_history_strategy
    from retrievers.dense.model import META_FILE, DualEncoder, DualEncoderConfig

    init = Path(config.init_model)
    if (init / META_FILE).exists():
        model = DualEncoder.from_pretrained(init)
    else:
        query_length = build_history_strategy(config.history).encoder_max_length
        model = DualEncoder.build(DualEncoderConfig(
            model=config.init_model, query_max_length=query_length,
            passage_max_length=config.passage_max_length))
    if config.lora_r:
        torch.manual_seed(config.train.seed)
        model.add_lora(r=config.lora_r, alpha=2 * config.lora_r)
    return model


def _stores(config: IHNConfig) -> tuple[Any, Any]:
    from convqa.corpus import PassageStore

    benchmark = PassageStore.open(config.benchmark_passages)
    if config.mining_store_path == config.benchmark_passages:
        return benchmark, benchmark
    return benchmark, PassageStore.open(config.mining_store_path)


class _Stages:
    """The stages of one DPR-IHN run, each recorded in the manifest when it finishes (by the
    main process; the others wait for it) and skipped when a rerun finds it done."""

    def __init__(self, config: IHNConfig, out: Path, acc: Any, manifest: Manifest,
                 notify: Callable[[str, str], None]):
        self.config, self.out, self.acc, self.manifest, self.notify = (
            config, out, acc, manifest, notify)
        self.main = acc.is_main_process

    def _done(self, stage: str, record: dict[str, Any]) -> None:
        if self.main:
            self.manifest.record(stage, record)
        self.acc.wait_for_everyone()
        self.notify(stage, "done")

    def examples(self) -> ExampleSet:
        config, out, acc = self.config, self.out, self.acc
        if _skip(self.manifest, "examples", out / EXAMPLES_DIR / "examples.meta.json",
                 self.notify):
            examples = load_examples(out / EXAMPLES_DIR)
            plan_steps(len(examples), config.train, acc.num_processes)
            return examples
        self.notify("examples", "run")
        began = time.perf_counter()
        # Every process builds them (deterministic, seconds), so an error stops all alike.
        examples = build_examples(config.benchmark, config.history, config.positives,
                                  progress=config.train.progress and self.main)
        if not len(examples):
            raise ConvQAError(f"no training examples in {config.benchmark} with "
                              f"{config.positives} positives ({examples.counts})")
        plan_steps(len(examples), config.train, acc.num_processes)  # fail before recording
        if self.main:
            out.mkdir(parents=True, exist_ok=True)
            save_examples(out / EXAMPLES_DIR, examples)
        self._done("examples", {"seconds": round(time.perf_counter() - began, 1),
                                **examples.counts})
        return examples

    def mine(self, n: int, examples: ExampleSet, mining_store) -> tuple[Any, dict[str, Any]]:
        """Iteration n's hard negatives, mined by iteration n-1's model (or read back)."""
        stage, negatives_dir = f"iter{n}.mine", self.out / f"iter{n}" / NEGATIVES_DIR
        if not _skip(self.manifest, stage, negatives_dir / "negatives.meta.json", self.notify):
            self.notify(stage, "run")
            from retrievers.dense.build import load_encoder

            previous = self.out / f"iter{n - 1}" / MODEL
            miner = load_encoder(previous)
            miner.to(self.acc.device)
            meta = mine_hard_negatives(miner, examples, mining_store, negatives_dir,
                                       self.config.mining, self.acc, model_path=str(previous))
            del miner
            self._done(stage, {k: meta.get(k) for k in (
                "seconds", "hits_at_k", "negatives_per_query", "corpus_size",
                "model_fingerprint")})
        return (load_negatives(negatives_dir, examples),
                load_json(negatives_dir / "negatives.meta.json"))

    def train(self, n: int, examples: ExampleSet, lookup: PassageLookup, negatives: Any,
              negatives_meta: dict[str, Any] | None, factory: Callable[[], Any]) -> None:
        """Iteration n's model from the initial one: in-batch negatives only (DPR-IBN) at
        n = 1, the mined ones too after."""
        config, stage = self.config, f"iter{n}.train"
        self.notify(stage, "run")
        train_config = config.train if n > 1 else replace(config.train, hard_negatives=0)
        info = {"iteration": n, "method": "DPR-IBN" if n == 1 else "DPR-IHN",
                "init_model": config.init_model, "lora_r": config.lora_r,
                "examples_meta": examples.meta(), "negatives": negatives_meta}
        model = factory()
        result = Trainer(model, examples, lookup, self.out / f"iter{n}", train_config,
                         negatives, self.acc, info).train()
        del model
        self._done(stage, {"steps": result.steps, "seconds": round(result.seconds, 1),
                           "last_loss": result.last_loss})


def run_ihn(config: IHNConfig, out: str | os.PathLike, accelerator: Any = None,
            model_factory: Callable[[], Any] | None = None,
            on_stage: Callable[[str, str], None] | None = None) -> dict[str, Any]:
    """Run (or resume) every stage up to `config.iterations`; returns the manifest.

    `model_factory` builds the initial model (default: `initial_model(config)`); `on_stage`
    is told `(stage, "run" | "skip" | "done")`."""
    out = Path(out)
    acc = accelerator if accelerator is not None else make_accelerator()
    main = acc.is_main_process
    factory = model_factory or (lambda: initial_model(config))
    notify = on_stage or (lambda stage, event: None)
    if out.exists() and not out.is_dir():
        raise ConvQAError(f"{out}: exists and is not a folder")
    if not (Path(config.benchmark) / "turns.jsonl").exists():
        raise ConvQAError(f"{config.benchmark}: not a benchmark folder (no turns.jsonl); build "
                          "one with `convqa data topiocqa-wiki`")
    manifest = Manifest(out, config.settings(), write=main)  # written once a stage finishes
    benchmark_store, mining_store = _stores(config)
    lookup = PassageLookup([benchmark_store] if mining_store is benchmark_store
                           else [mining_store, benchmark_store])
    stages = _Stages(config, out, acc, manifest, notify)
    examples = stages.examples()
    for n in range(1, config.iterations + 1):
        if manifest.finished(f"iter{n}.train") and (out / f"iter{n}" / "training.json").exists():
            for name in ([f"iter{n}.mine"] if n > 1 else []) + [f"iter{n}.train"]:
                notify(name, "skip")  # its negatives are not needed (their index may be gone)
            continue
        negatives, negatives_meta = (stages.mine(n, examples, mining_store) if n > 1
                                     else (None, None))
        stages.train(n, examples, lookup, negatives, negatives_meta, factory)
    return manifest.data


def _skip(manifest: Manifest, stage: str, output: Path,
          notify: Callable[[str, str], None]) -> bool:
    """True when `stage` is recorded as finished and its output is still there."""
    if manifest.finished(stage) and output.exists():
        notify(stage, "skip")
        return True
    return False
