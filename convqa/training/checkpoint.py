"""The files of a training run's checkpoint, OUT/checkpoint: the model (written by the
trainer's own save function), optimizer.pt and scheduler.pt, each process's rng-N.pt (and any
other per-process state as NAME-N.pt) and state.json. Written to a .partial folder and swapped
in, so a kill at any point leaves the previous checkpoint or the new one; tensors are read back
with `torch.load(weights_only=True)` (plain tensors and numbers, no pickled code). accelerate's
own save_state was not used: it pickles registered objects with weights_only=False and stores
the model under its own names rather than our safetensors folder."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from convqa.errors import DataError
from convqa.io import write_json

CHECKPOINT = "checkpoint"
MODEL = "model"
TRAINING_JSON = "training.json"
STATE = "state.json"


def load_tensors(path: Path) -> Any:
    """A torch.save'd file of plain tensors and numbers; DataError naming it if unreadable."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a damaged checkpoint
        raise DataError(f"cannot read checkpoint file ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''})", path) from None


def rng_state() -> dict[str, Any]:
    """This process's torch RNG states (CPU, and CUDA where there is one)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_checkpoint(accelerator, folder: Path, save_model: Callable[[Path], None], optimizer,
                     scheduler, state: Mapping[str, Any],
                     per_process: Mapping[str, Any] | None = None) -> None:
    """Write `folder`.partial, then swap it in as `folder`: a kill at any point leaves either
    the previous checkpoint or the new one. Every process writes its RNG state (and each
    `per_process` object as NAME-{process}.pt); the main process the model (`save_model(path)`),
    optimizer, scheduler and `state` (JSON). Shared by every convqa trainer."""
    acc = accelerator
    folder = Path(folder)
    partial = folder.with_name(f"{folder.name}.partial")
    if acc.is_main_process:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    acc.wait_for_everyone()
    torch.save(rng_state(), partial / f"rng-{acc.process_index}.pt")
    for name, value in (per_process or {}).items():
        torch.save(value, partial / f"{name}-{acc.process_index}.pt")
    acc.wait_for_everyone()
    if acc.is_main_process:
        save_model(partial / MODEL)
        torch.save(optimizer.state_dict(), partial / "optimizer.pt")
        torch.save(scheduler.state_dict(), partial / "scheduler.pt")
        write_json(partial / STATE, dict(state))
        old = folder.with_name(f"{folder.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            os.rename(folder, old)
        os.rename(partial, folder)
        shutil.rmtree(old, ignore_errors=True)
    acc.wait_for_everyone()
