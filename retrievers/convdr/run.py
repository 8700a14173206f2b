"""One ConvDR run, resumable as a whole: examples -> teacher targets -> mining -> training ->
held-out fidelity. `convqa train convdr` is its command line.

    OUT/run.json                      the settings (a rerun with other settings is refused)
    OUT/examples/train.jsonl          training examples (data.py format, with `query`, the
    OUT/examples/heldout.jsonl        student's formatted input) and held-out examples
    OUT/examples/meta.json            counts per source, split, exclusions
    OUT/teacher/targets.npy (.json)   the teacher's embeddings of the training rewrites (KD)
    OUT/mining/                       Rank groups mined by the teacher (rank, multitask)
    OUT/checkpoint/, log.jsonl, model/, training.json   the training (train.py)
    OUT/fidelity.json                 held-out fidelity: student vs zero-shot vs question-only

Which examples train (data.py explains the combination): `kd` those with a rewrite; `rank` those
with a Rank group (a usable positive and teacher negatives); `multitask` those with either, each
loss term masked for examples lacking its input. The counts are in training.json.

`anchor`: an example without a rewrite takes as its KD target the teacher's own embedding of
the student's input (what the frozen model answers for the same conversation). In multitask
mode the Rank term then moves the query only as far as the KD term lets it stray from where
the teacher had it: a query tower trained on one collection's answer passages keeps what it
knew about the rest.

Rerunning the same command skips what is done and resumes an interrupted training. Several
processes (torchrun / accelerate launch): the main process builds examples, targets and groups
and measures fidelity; all processes train.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from convqa.errors import ConfigError, ConvQAError
from convqa.io import load_json, write_json
from convqa.models import DEFAULT_MODEL

from .data import (SOURCES, ConvDRExample, build_examples, load_examples_jsonl,
                   save_examples_jsonl, split_heldout)
from .mining import ConvDRMiningConfig, TeacherPassageVectors, load_groups, mine_groups
from .train import ConvDRTrainConfig, TrainingSet, make_accelerator, train_convdr

RUN_JSON = "run.json"
EXAMPLES_DIR = "examples"
TEACHER_DIR = "teacher"
MINING_DIR = "mining"
FIDELITY_JSON = "fidelity.json"
FORMAT = "convqa-convdr-run"
VERSION = 1


@dataclass
class ConvDRRunConfig:
    data: list[tuple[str, str]] = field(default_factory=list)  # (source, path), data.SOURCES
    teacher: str = DEFAULT_MODEL
    history: Any = "questions_only"     # the student's input (ConvDR: questions, 256 tokens)
    index: str | None = None            # the teacher's dense index (rank, multitask)
    passages: str | None = None         # its passage store (default: what the index records)
    heldout_fraction: float = 0.1
    exclude: list[str] = field(default_factory=list)  # benchmark folders: dialogs held out
    max_examples: int | None = None     # seeded sample of the training examples
    cast_min_relevance: int = 1
    weak_positives: float | None = None  # min coverage: also benchmarks' weakly labelled turns
    lora_r: int = 0
    fidelity_examples: int | None = 1000
    encode_batch_size: int = 64
    fast: bool = False                  # teacher encoding in the measured-fastest agreeing precision
    anchor: bool = False                # KD target of an example without rewrite: teacher(input)
    mining: ConvDRMiningConfig = field(default_factory=ConvDRMiningConfig)
    train: ConvDRTrainConfig = field(default_factory=ConvDRTrainConfig)

    def __post_init__(self) -> None:
        if not self.data:
            raise ConfigError("ConvDR needs training data (--data SOURCE=PATH)")
        for source, _ in self.data:
            if source not in SOURCES:
                raise ConfigError(f"unknown data source {source!r} (known: {', '.join(SOURCES)})")
        if self.train.uses_rank and not self.index:
            raise ConfigError(f"mode {self.train.mode!r} needs the teacher's dense index "
                              "(--index DIR, built by `convqa index --dense --model TEACHER`)")
        if self.lora_r < 0:
            raise ConfigError(f"lora_r must be >= 0, got {self.lora_r}")
        if self.anchor and not self.train.uses_kd:
            raise ConfigError(f"anchor is a KD target: it needs mode kd or multitask, not "
                              f"{self.train.mode!r}")
        if self.max_examples is not None and self.max_examples < 1:
            raise ConfigError(f"max_examples must be >= 1, got {self.max_examples}")
        from convqa.history import build_history_strategy

        build_history_strategy(self.history)  # an unknown strategy or option fails here
        self.weak_rule()  # a coverage outside [0, 1] fails here
        if self.weak_positives is not None and all(src != "benchmark" for src, _ in self.data):
            raise ConfigError("weak positives label a benchmark's turns: give --data "
                              "benchmark=DIR with --weak-positives")

    def weak_rule(self):
        from convqa.benchmark.weak_positives import WeakPositiveRule

        return WeakPositiveRule.for_coverage(self.weak_positives)

    def strategy(self):
        from convqa.history import build_history_strategy

        return build_history_strategy(self.history)

    def examples_settings(self) -> dict[str, Any]:
        return {"data": [[source, _file_id(path)] for source, path in self.data],
                "history": self.strategy().to_dict(), "heldout_fraction": self.heldout_fraction,
                "exclude": [_file_id(p) for p in self.exclude], "seed": self.train.seed,
                "max_examples": self.max_examples,
                "cast_min_relevance": self.cast_min_relevance,
                **({"weak_positives": self.weak_positives}
                   if self.weak_positives is not None else {})}

    def settings(self) -> dict[str, Any]:
        """What the outputs depend on (compared on rerun)."""
        return {"examples": self.examples_settings(), "teacher": self.teacher,
                "index": str(Path(self.index).resolve()) if self.index else None,
                "passages": str(Path(self.passages).resolve()) if self.passages else None,
                "lora_r": self.lora_r, "fast": self.fast,
                **({"anchor": True} if self.anchor else {}),
                "mining": asdict(self.mining) if self.train.uses_rank else None,
                "train": self.train.schedule_key()}


def _file_id(path: str) -> dict[str, Any]:
    """A file by path and size; a folder by path and the sizes of the files directly in it."""
    resolved = Path(path).resolve()
    if resolved.is_dir():
        return {"path": str(resolved), "files": {f.name: f.stat().st_size
                                                 for f in sorted(resolved.iterdir())
                                                 if f.is_file()}}
    return {"path": str(resolved), "bytes": resolved.stat().st_size if resolved.exists() else None}


def _check_run(out: Path, settings: dict[str, Any], write: bool) -> None:
    path = out / RUN_JSON
    if path.exists():
        old = load_json(path).get("settings")
        if old != settings:
            differing = sorted(k for k in set(old or {}) | set(settings)
                               if (old or {}).get(k) != settings.get(k))
            raise ConfigError(f"{out} was made with other settings ({', '.join(differing)} "
                              "differ); use another --out, or the same settings to resume")
    elif write:
        write_json(path, {"format": FORMAT, "version": VERSION, "settings": settings})


def usable(example: ConvDRExample, mode: str, has_group: bool = False) -> bool:
    """Whether `example` trains in `mode` (see module doc)."""
    if mode == "kd":
        return example.has_rewrite
    if mode == "rank":
        return has_group
    return example.has_rewrite or has_group


# ---------------------------------------------------------------------------------------------
# Stages


def prepare_examples(config: ConvDRRunConfig, folder: Path,
                     say: Callable[[str], None]) -> dict[str, Any]:
    """Build, split, format and save the examples (skipped when already done alike)."""
    settings = config.examples_settings()
    meta_path = folder / "meta.json"
    if meta_path.exists() and load_json(meta_path).get("settings") == settings:
        say("examples: already built")
        return load_json(meta_path)
    from .orquac_bench import benchmark_conversations

    began = time.perf_counter()
    built = build_examples(config.data, config.cast_min_relevance, config.weak_rule())
    forced: set[str] = set()
    for bench in config.exclude:
        forced |= benchmark_conversations(bench)
    train, heldout = split_heldout(built.examples, config.heldout_fraction, config.train.seed,
                                   forced)
    excluded = sum(1 for e in built.examples if e.conversation_id in forced)
    sampled_from = len(train)
    if config.max_examples is not None and len(train) > config.max_examples:
        keep = np.sort(np.random.default_rng(config.train.seed).choice(
            len(train), config.max_examples, replace=False))
        train = [train[i] for i in keep]
    strategy = config.strategy()
    for example in train + heldout:
        example.query = strategy.format(example.question, example.history)
    counts: dict[str, Any] = {"sources": built.counts, "train": len(train),
                              "heldout": len(heldout), "excluded_by_benchmarks": excluded,
                              "train_before_sampling": sampled_from,
                              "train_by_source": _by_source(train),
                              "heldout_by_source": _by_source(heldout)}
    folder.mkdir(parents=True, exist_ok=True)
    save_examples_jsonl(folder / "train.jsonl", train)
    save_examples_jsonl(folder / "heldout.jsonl", heldout)
    meta = {"settings": settings, "counts": counts,
            "seconds": round(time.perf_counter() - began, 1)}
    write_json(meta_path, meta)
    say(f"examples: {len(train)} train, {len(heldout)} held out ({counts['sources']})")
    return meta


def _by_source(examples: list[ConvDRExample]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for example in examples:
        row = out.setdefault(example.source, {"examples": 0, "with_rewrite": 0,
                                              "with_positives": 0})
        row["examples"] += 1
        row["with_rewrite"] += example.has_rewrite
        row["with_positives"] += bool(example.positives)
    return out


def initial_model(config: ConvDRRunConfig):
    """The student, initialised from the teacher (LoRA adapters seeded by the run's seed)."""
    import torch

    from .model import ConvDR

    model = ConvDR.build(config.teacher, config.strategy().encoder_max_length)
    if config.lora_r:
        torch.manual_seed(config.train.seed)
        model.add_lora(r=config.lora_r, alpha=2 * config.lora_r)
    return model


def teacher_arrays(model, examples: list[ConvDRExample], config: ConvDRRunConfig, out: Path,
                   main: bool, wait: Callable[[], None],
                   say: Callable[[str], None]) -> tuple[np.ndarray, np.ndarray]:
    """([n, d] teacher embeddings of the rewrites, zero rows where none; [n] bool)."""
    from .targets import teacher_targets

    has = np.array([e.has_rewrite for e in examples], dtype=bool)
    texts = [e.rewrite for e in examples if e.has_rewrite]
    fingerprint = model.teacher_fingerprint
    if main:
        began = time.perf_counter()
        teacher_targets(model.teacher, texts, out / TEACHER_DIR, config.encode_batch_size,
                        "auto" if config.fast else "fp32", config.train.progress, fingerprint)
        say(f"teacher targets: {len(texts)} rewrites ({time.perf_counter() - began:.1f}s)")
    wait()
    vectors = teacher_targets(model.teacher, texts, out / TEACHER_DIR, fingerprint=fingerprint)
    targets = np.zeros((len(examples), model.dim), dtype=np.float32)
    targets[has] = vectors
    return targets, has


def teacher_queries(model, examples: list[ConvDRExample], targets: np.ndarray, has: np.ndarray,
                    config: ConvDRRunConfig) -> np.ndarray:
    """The teacher's query for each example: its embedding of the rewrite (`targets`) where
    `has` one, else of the example's own formatted input. The teacher mines with these; with
    `anchor` they are also the KD targets."""
    from .targets import encode_teacher_queries

    missing = np.nonzero(~has)[0]
    if not len(missing):
        return targets
    queries = targets.copy()
    queries[missing], _ = encode_teacher_queries(
        model.zero_shot_encoder(), [examples[i].query for i in missing],
        config.encode_batch_size, "auto" if config.fast else "fp32")
    return queries


def anchor_targets(model, examples: list[ConvDRExample], targets: np.ndarray, has: np.ndarray,
                   config: ConvDRRunConfig) -> tuple[np.ndarray, np.ndarray]:
    """`targets` and `has` with every example that lacks a rewrite anchored: its target is
    the teacher's embedding of its own formatted input (`teacher_queries`; computed on each
    process: it is a deterministic function of the teacher and the texts)."""
    return teacher_queries(model, examples, targets, has, config), np.ones_like(has)


def mining_stage(model, examples: list[ConvDRExample], targets: np.ndarray, has: np.ndarray,
                 config: ConvDRRunConfig, out: Path, main: bool, wait: Callable[[], None],
                 say: Callable[[str], None]):
    """(groups, TeacherPassageVectors): the teacher's Rank groups over its own index."""
    from .mining import open_teacher_index

    folder = out / MINING_DIR
    if main:
        began = time.perf_counter()
        # no rewrite: the teacher reads the conversation instead
        queries = teacher_queries(model, examples, targets, has, config)
        meta = mine_groups(model.teacher, examples, queries, config.index, folder,
                           config.mining, model.teacher_fingerprint, config.passages,
                           config.train.progress)
        say(f"mining: {meta['counts']} ({time.perf_counter() - began:.1f}s)")
    wait()
    groups, extra = load_groups(folder, examples)
    index, _ = open_teacher_index(config.index, model.teacher_fingerprint, config.passages)
    return groups, TeacherPassageVectors(config.index, index, extra)


def run_convdr(config: ConvDRRunConfig, out: str, accelerator: Any = None,
               say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run (or resume) every stage; returns {"training": training.json, "fidelity": ...}."""
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConvQAError(f"{out_dir}: exists and is not a folder")
    acc = accelerator if accelerator is not None else make_accelerator()
    main = acc.is_main_process
    say = say or (lambda message: None)
    tell = say if main else (lambda message: None)
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
    _check_run(out_dir, config.settings(), write=main)
    if main:
        examples_meta = prepare_examples(config, out_dir / EXAMPLES_DIR, tell)
    acc.wait_for_everyone()
    examples_meta = load_json(out_dir / EXAMPLES_DIR / "meta.json")
    examples = load_examples_jsonl(out_dir / EXAMPLES_DIR / "train.jsonl")
    if not examples:
        raise ConvQAError("no training examples after the held-out split")

    model = initial_model(config)
    model.to(acc.device)
    train_config = config.train
    targets, has = teacher_arrays(model, examples, config, out_dir, main,
                                  acc.wait_for_everyone, tell)
    if config.anchor:
        targets, has = anchor_targets(model, examples, targets, has, config)
        tell(f"anchors: {int(has.sum())} KD targets with the teacher's own embedding of the "
             "input where there is no rewrite")
    groups = vectors = None
    mining_meta = None
    if train_config.uses_rank:
        groups, vectors = mining_stage(model, examples, targets, has, config, out_dir, main,
                                       acc.wait_for_everyone, tell)
        mining_meta = load_json(out_dir / MINING_DIR / "mining.json")
    keep = [i for i, e in enumerate(examples)
            if usable(e, train_config.mode, groups is not None and groups[i] is not None)]
    if not keep:
        raise ConvQAError(f"no training example is usable in mode {train_config.mode!r} "
                          f"(examples: {len(examples)}, with rewrite: {int(has.sum())})")
    data = TrainingSet([examples[i].query for i in keep], targets[keep], has[keep],
                       [groups[i] for i in keep] if groups is not None else None, vectors,
                       info={"examples": len(keep), "examples_meta": examples_meta["counts"],
                             "unusable_examples": len(examples) - len(keep),
                             "with_kd_target": int(has[keep].sum()),
                             "with_rank_group": sum(1 for i in keep if groups is not None
                                                    and groups[i] is not None),
                             "history": config.strategy().to_dict(),
                             "lora_r": config.lora_r, "mining": mining_meta})
    result = train_convdr(model, data, out_dir, train_config, acc)
    tell(f"training: {result.steps} steps, last loss {result.last_loss}")
    fidelity_result = None
    if main and config.fidelity_examples:
        fidelity_result = measure_fidelity(out_dir, model.teacher, config, tell)
    acc.wait_for_everyone()
    return {"training": result.info, "fidelity": fidelity_result}


def measure_fidelity(out: Path, teacher, config: ConvDRRunConfig,
                     say: Callable[[str], None]) -> dict[str, Any] | None:
    """OUT/fidelity.json for the trained model on the held-out examples (reused when it was
    measured for the same model)."""
    from .fidelity import fidelity
    from .model import ConvDR

    heldout = load_examples_jsonl(out / EXAMPLES_DIR / "heldout.jsonl")
    if not any(e.has_rewrite for e in heldout):
        say("fidelity: no held-out example with a rewrite; skipped")
        return None
    model = ConvDR.from_pretrained(out / "model", teacher=teacher).to(teacher.device)
    fingerprint = model.fingerprint()
    path = out / FIDELITY_JSON
    if path.exists():
        old = load_json(path)
        if old.get("model_fingerprint") == fingerprint and \
                old.get("max_examples") == config.fidelity_examples:
            return old
    if model.has_adapters:
        model.merge_adapters()
    began = time.perf_counter()
    result = fidelity(model, heldout, config.history, config.encode_batch_size,
                      config.fidelity_examples, config.train.seed)
    result.update(model_fingerprint=fingerprint, max_examples=config.fidelity_examples,
                  seconds=round(time.perf_counter() - began, 1))
    write_json(path, result)
    say(f"fidelity on {result['count']} held-out turns: cosine student "
        f"{result['student']['cosine']:.4f} vs zero-shot {result['zero_shot']['cosine']:.4f} "
        f"vs question-only {result['question_only']['cosine']:.4f}")
    return result
