"""Training batches built ahead of the step that uses them.

On a GPU a reader or reranker step spends most of its time tokenizing and padding its batch on
the training process while the GPU waits. Here a `torch.utils.data.DataLoader` over the run's
micro-batches (`MicroBatches`, in the loop's order) builds them in `workers` processes while
the model trains, prefetches a few, and pins them on CUDA. Nothing about the batches changes:
micro-batch k of a run is a function of (seed, epoch, step) and the process's rank alone, so 0
or N workers, a resumed run or an uninterrupted one, see the same tensors in the same order.

- `loader_workers` setting: `auto` (0 on a CPU-only run, where workers would take the
  training's own cores; min(4, CPUs - 1) with a GPU, per training process when several share
  the machine's CPUs) or a count, 0 building each batch in the
  training process when the step needs it (today's behaviour).
- Workers are forked (where the platform can) from the training process and so share its
  examples and tokenizer without pickling them; Hugging Face tokenizers' own thread pool is off
  while they run (TOKENIZERS_PARALLELISM=false), which is what keeps a forked tokenizer from
  deadlocking or warning.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from dataclasses import fields, is_dataclass, replace
from typing import Any, Callable, Sequence

import torch

from convqa.errors import ConfigError, ConvQAError

AUTO = "auto"
MAX_AUTO_WORKERS = 4
PREFETCH = 4  # micro-batches each worker builds ahead
TOKENIZERS_PARALLELISM = "TOKENIZERS_PARALLELISM"


def loader_workers_setting(value: Any) -> int | str:
    """`auto` or an integer >= 0 (also given as text, as a command line gives it)."""
    problem = ConfigError(f"loader_workers must be 'auto' or an integer >= 0, got {value!r}")
    if isinstance(value, str):
        text = value.strip().lower()
        if text == AUTO:
            return AUTO
        try:
            value = int(text)
        except ValueError:
            raise problem from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise problem
    return value


def loader_workers_arg(text: str) -> int | str:
    """An argparse type for --loader-workers."""
    try:
        return loader_workers_setting(text)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer >= 0, got {text!r}") \
            from None


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def resolve_workers(setting: int | str, device: Any, local_processes: int | None = None) -> int:
    """The number of worker processes for `setting` on `device`. `auto` with a GPU: min(4,
    CPUs - 1), the CPUs shared among the training processes of this machine (torchrun's
    LOCAL_WORLD_SIZE) so that several GPUs' workers do not crowd their trainers out."""
    if setting != AUTO:
        return int(setting)
    if torch.device(device).type == "cpu":
        return 0
    if local_processes is None:
        local_processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(0, min(MAX_AUTO_WORKERS, (available_cpus() - local_processes) // local_processes))


class MicroBatches(torch.utils.data.Dataset):
    """Item k: this process's k-th micro-batch of the run from optimizer step `start`, built
    by `build(indices, epoch)`; `plan(epoch)` gives the epoch's global batches of example
    numbers (the loop's seeded, possibly length-bucketed order), and the process takes its
    slice `rank * size : (rank + 1) * size` of each."""

    def __init__(self, plan: Callable[[int], Sequence[Sequence[int]]],
                 build: Callable[[Sequence[int], int], Any], *, start: int, total: int,
                 per_epoch: int, grad_accum: int, rank: int, size: int):
        self.plan, self.build = plan, build
        self.start, self.total, self.per_epoch = start, total, per_epoch
        self.grad_accum, self.rank, self.size = grad_accum, rank, size
        self._epoch: tuple[int, Sequence[Sequence[int]]] | None = None

    def __len__(self) -> int:
        return max(0, self.total - self.start) * self.grad_accum

    def batches_of(self, epoch: int) -> Sequence[Sequence[int]]:
        """The epoch's global batches (the last epoch's kept: a run asks for one at a time)."""
        if self._epoch is None or self._epoch[0] != epoch:
            self._epoch = (epoch, self.plan(epoch))
        return self._epoch[1]

    def locate(self, item: int) -> tuple[Sequence[int], int]:
        """(this process's example numbers, epoch) of micro-batch `item`."""
        step, micro = divmod(item, self.grad_accum)
        step += self.start
        epoch = step // self.per_epoch
        batch = self.batches_of(epoch)[(step % self.per_epoch) * self.grad_accum + micro]
        return batch[self.rank * self.size:(self.rank + 1) * self.size], epoch

    def __getitem__(self, item: int) -> "Prepared":
        if not 0 <= item < len(self):
            raise IndexError(item)
        indices, epoch = self.locate(item)
        try:
            return Prepared(self.build(indices, epoch))
        except ConvQAError as exc:  # raised again by the training process: one clear line
            return Prepared(None, exc)


class Prepared:
    """A built batch (or the input error building it gave), as the loader hands it over; the
    loader's pinning thread pins its tensors on CUDA."""

    __slots__ = ("batch", "error")

    def __init__(self, batch: Any, error: ConvQAError | None = None):
        self.batch, self.error = batch, error

    def pin_memory(self, device: Any = None) -> "Prepared":
        return Prepared(pinned(self.batch), self.error)


def pinned(value: Any) -> Any:
    """`value` with every tensor in it (dataclass fields, dicts, lists, tuples) in pinned
    memory."""
    if isinstance(value, torch.Tensor):
        return value.pin_memory()
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: pinned(getattr(value, f.name))
                                 for f in fields(value) if f.init})
    if isinstance(value, dict):
        return {k: pinned(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(pinned(v) for v in value)
    return value


def _as_is(item: Any) -> Any:
    return item


def _start_method() -> Any:
    """Fork where it is safe and available (Linux): the workers share the training process's
    examples and tokenizer instead of receiving pickled copies."""
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return None


class BatchStream:
    """The micro-batches of `dataset` in order: built by `workers` processes ahead of use
    (pinned on CUDA), or, with 0, each built in this process when asked for. `close()` stops
    the workers and gives back the tokenizers' setting."""

    def __init__(self, dataset: MicroBatches, workers: int, device: Any):
        self.workers = workers
        self._saved_parallelism = os.environ.get(TOKENIZERS_PARALLELISM)
        cuda = torch.device(device).type == "cuda"
        options: dict[str, Any] = {}
        if workers:
            # Before the fork: a forked tokenizer must not use the parent's thread pool.
            os.environ[TOKENIZERS_PARALLELISM] = "false"
            options = dict(prefetch_factor=PREFETCH, multiprocessing_context=_start_method())
            if len(dataset):  # plan the first epoch here: the workers inherit it
                dataset.locate(0)
        # Its own generator: the loader draws its workers' seed from it, and a draw from the
        # global one would change the training's dropout (and a resumed run's).
        self.loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, shuffle=False, num_workers=workers, pin_memory=cuda,
            collate_fn=_as_is, generator=torch.Generator().manual_seed(0), **options)
        self._iterator = iter(self.loader)

    def next(self) -> Any:
        prepared = next(self._iterator)
        if prepared.error is not None:
            raise prepared.error
        return prepared.batch

    def close(self) -> None:
        shutdown = getattr(self._iterator, "_shutdown_workers", None)
        if shutdown is not None:  # at once, not when the iterator is collected
            shutdown()
        self._iterator = None
        if self.workers:
            if self._saved_parallelism is None:
                os.environ.pop(TOKENIZERS_PARALLELISM, None)
            else:
                os.environ[TOKENIZERS_PARALLELISM] = self._saved_parallelism


class DirectStream:
    """The micro-batches of `dataset` in order, each built when asked for, outside any loader:
    the trainers without a `loader_workers` setting."""

    def __init__(self, dataset: MicroBatches):
        self.dataset, self.item = dataset, 0

    def next(self) -> Any:
        indices, epoch = self.dataset.locate(self.item)
        self.item += 1
        return self.dataset.build(indices, epoch)

    def close(self) -> None:
        pass


def open_stream(dataset: MicroBatches, setting: int | str | None, device: Any
                ) -> BatchStream | DirectStream:
    """The batches of a run: through the loader for a trainer with a `loader_workers` setting,
    else built in this process as the step needs them."""
    if setting is None:
        return DirectStream(dataset)
    return BatchStream(dataset, resolve_workers(setting, device), device)
