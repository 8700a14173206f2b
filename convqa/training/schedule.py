"""The settings every trainer config shares and what they imply: checks of those settings, the
key a checkpoint must match to be resumed, the number of optimizer steps, the LR schedule, and
the seeded order in which the examples are seen (so a resumed run, or one on another number of
processes, sees the same batches)."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from convqa.errors import ConfigError

# Settings that do not change what is learned: a checkpoint written with other values resumes.
# The precision is one of them: it changes the arithmetic, not the data, the order or the
# schedule, and the fastest one differs between the machines a long run may span; so is the
# number of processes building the batches (the same batches either way).
VOLATILE = frozenset({"progress", "checkpoint_every", "keep_checkpoint", "bf16", "precision",
                      "loader_workers"})


@dataclass
class StepSchedule:
    """The settings every trainer's config has: the optimizer schedule, the seed and the
    checkpoints. A trainer's config subclasses it, adds its own settings and redeclares a
    default where its model wants another (a redeclared field keeps its place)."""

    epochs: int = 1
    batch_size: int = 16              # examples (questions) per process per micro-step
    grad_accum: int = 1               # micro-steps per optimizer step
    lr: float = 2e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1         # of the total optimizer steps
    max_steps: int | None = None      # cap on optimizer steps (None: epochs decide)
    max_grad_norm: float | None = 2.0
    bf16: bool = False                # bf16 autocast; where `precision` exists, its older spelling
    seed: int = 0
    checkpoint_every: int = 200       # optimizer steps; 0 = only at the end
    keep_checkpoint: bool = False     # keep OUT/checkpoint after a finished run
    progress: bool = True

    def __post_init__(self) -> None:
        check_counts(self, ("epochs", "batch_size", "grad_accum"), 1)
        check_counts(self, ("checkpoint_every", "seed"), 0)
        check_schedule(self)

    def schedule_key(self, skip: Iterable[str] = ()) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it (`schedule_key`
        below); a config passes the settings of its own that change nothing learned."""
        return schedule_key(self, skip)


def check_counts(config: Any, names: Iterable[str], minimum: int) -> None:
    """Each of the config's `names` must be an integer (not a bool) >= `minimum`."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_schedule(config: Any) -> None:
    """The optimizer settings every trainer config has: max_steps, lr, warmup_ratio and
    weight_decay."""
    max_steps = config.max_steps
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                  or max_steps < 1):
        raise ConfigError(f"max_steps must be an integer >= 1, got {max_steps!r}")
    lr = config.lr
    if not isinstance(lr, (int, float)) or not lr > 0 or not math.isfinite(lr):
        raise ConfigError(f"lr must be a positive number, got {lr!r}")
    if not 0.0 <= config.warmup_ratio < 1.0:
        raise ConfigError(f"warmup_ratio must be in [0, 1), got {config.warmup_ratio!r}")
    if not config.weight_decay >= 0:
        raise ConfigError(f"weight_decay must be >= 0, got {config.weight_decay!r}")


def schedule_key(config: Any, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The settings of a config dataclass that a checkpoint must share with the run that
    resumes it: all but the VOLATILE ones and the config's own `skip` (settings that change
    nothing learned, or one added later while it holds the value that means "off", so runs
    from before it existed still resume)."""
    left_out = VOLATILE | frozenset(skip)
    return {f.name: getattr(config, f.name) for f in fields(config) if f.name not in left_out}


def same_schedule(recorded: Any, current: Any) -> bool:
    """Whether a schedule key stored by a run equals `current`, ignoring VOLATILE settings
    that older runs stored in it (at any depth: some keys nest the train config)."""
    return _without_volatile(recorded) == _without_volatile(current)


def _without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE}
    return value


def plan_steps(examples: int, config: Any, processes: int) -> tuple[int, int]:
    """(optimizer steps per epoch, total optimizer steps) for `config`'s batch_size,
    grad_accum, epochs and max_steps."""
    global_batch = config.batch_size * processes
    micro = examples // global_batch
    per_epoch = micro // config.grad_accum
    if per_epoch == 0:
        raise ConfigError(f"{examples} training examples are too few for one optimizer step "
                          f"(batch {config.batch_size} x {processes} processes x "
                          f"{config.grad_accum} accumulation steps)")
    total = per_epoch * config.epochs
    return per_epoch, min(total, config.max_steps) if config.max_steps else total


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    """LR multiplier: 0 -> 1 over `warmup` steps, then linearly to 0 at `total`."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


def epoch_order(count: int, seed: int, epoch: int) -> np.ndarray:
    """The order of the examples in `epoch`: a permutation seeded by (seed, epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(count)


def global_batches(count: int, global_batch: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The epoch's global batches of example numbers; the ragged tail is dropped so every
    process always holds the same number of examples (needed to gather passages)."""
    order = epoch_order(count, seed, epoch)
    full = count // global_batch
    return [order[i * global_batch:(i + 1) * global_batch] for i in range(full)]


def example_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of one example's random choices in one epoch (negatives, answer...)."""
    return np.random.default_rng([seed, epoch, int(index), 1])


def bucketed_batches(lengths: Sequence[float], global_batch: int, seed: int, epoch: int,
                     pool: int) -> list[np.ndarray]:
    """The epoch's global batches with examples of similar length together, so a batch padded
    to its longest item wastes little: the seeded epoch order is cut into pools of `pool`
    global batches, each pool sorted by length (ties in epoch order) and cut into batches, and
    the batches of all pools shuffled. Seeded by (seed, epoch) alone: a resumed run sees the
    same batches. As `global_batches`, the ragged tail of the order is dropped."""
    count = len(lengths)
    order = epoch_order(count, seed, epoch)[:(count // global_batch) * global_batch]
    lengths = np.asarray(lengths, dtype=float)
    size = global_batch * max(1, pool)
    batches: list[np.ndarray] = []
    for begin in range(0, len(order), size):
        chunk = order[begin:begin + size]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i:i + global_batch] for i in range(0, len(chunk), global_batch)]
    shuffle = np.random.default_rng([seed, epoch, 2]).permutation(len(batches))
    return [batches[i] for i in shuffle]
