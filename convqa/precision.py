"""Inference precision chosen by measurement on the machine at hand, in one place.

Which precision is fastest depends on the CPU, not on the model: bf16 autocast roughly doubles
MiniLM's speed on CPUs with AVX512-BF16 (and on GPUs) but is 4-6x *slower* than fp32 on
AVX2-only CPUs, which emulate bf16; int8 dynamic quantization speeds up some CPUs and not
others, and is lossier. So `precision: auto` (the default everywhere) runs a short probe of every
candidate on the caller's real inputs, keeps the fastest whose output agrees with fp32, logs the
choice with the measured times once, and the caller records it (index manifests record it).
`fp32`, `bf16`, `int8` force one. A candidate other than fp32 moves the output a little, so it is
kept only when it is at least `MIN_SPEEDUP` times as fast as fp32: a near tie is probe noise.

    choice = choose_precision(lambda p: encode(prepare(model, p), sample, p), agreement=min_cosine,
                              threshold=0.99, what="passages", device=model.device)
    with autocast(choice.precision, model.device):
        vectors = encode(prepare(model, choice.precision), corpus)

- `fp32`: the reference.
- `bf16`: `torch.autocast(dtype=torch.bfloat16)`; weights stay fp32, outputs come back fp32.
- `int8`: PyTorch dynamic quantization (int8 weights per output channel, activations quantized
  per batch) of the attention projections only: quantizing every linear layer of MiniLM moves
  passage vectors down to cosine 0.956 from fp32 (0.90 with one scale per weight tensor), the
  attention projections alone keep >= 0.99 (docs/results/precision.md).
  CPU only. `prepare` makes (and caches) a quantized copy; the original model is untouched, so
  fingerprints are always computed on the fp32 weights.

A choice is remembered per machine (CPU capability and model, torch version, threads), kind of
work and model fingerprint in `~/.cache/convqa/precision-choices.json`, so a one-shot command
such as `convqa answer` probes once per machine, not at every run. A training run keeps its
choice in its own folder, so a resumed run on the same machine does not probe again.

Tests inject `timer` to cover every outcome without depending on the test machine's CPU.
"""
from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import platform
import tempfile
import time
import warnings
import weakref
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

import torch

from .errors import ConfigError

AUTO, FP32, BF16, INT8 = "auto", "fp32", "bf16", "int8"
FIXED = (FP32, BF16, INT8)
CHOICES = (AUTO, *FIXED)
# Names that older index manifests and configs hold for the same precisions.
_ALIASES = {"bf16-autocast": BF16, "float32": FP32, "bfloat16": BF16}

# Vectors (passages, queries, phrases) agree when every probe vector keeps this cosine to fp32:
# the bound under which retrieval Hits@5 on the vital dev turns moved by < 0.5 point
# (docs/results/precision.md).
VECTOR_AGREEMENT = 0.99

# A lossier candidate must be at least this many times as fast as fp32 to be chosen, above the
# probe's noise: on an AVX2-only AMD EPYC (family 23) the reranker's int8 probe took 0.470 s
# against fp32's 0.473 s, a tie that picked the precision with 0.964 order agreement for no
# time gained (the reader's int8, 1.09x there, still counts).
MIN_SPEEDUP = 1.05

log = logging.getLogger(__name__)

Timer = Callable[[str, Callable[[], Any]], "tuple[float, Any]"]


def normalize_precision(name: Any, where: str = "precision") -> str:
    """The canonical name of a precision setting; ConfigError naming `where` otherwise."""
    if isinstance(name, str):
        key = name.strip().lower()
        key = _ALIASES.get(key, key)
        if key in CHOICES:
            return key
    raise ConfigError(f"{where}: unknown precision {name!r} (one of {', '.join(CHOICES)})")


def candidates_for(device: torch.device | str) -> tuple[str, ...]:
    """What `auto` may pick on `device`: int8 dynamic quantization has CPU kernels only."""
    kind = torch.device(device).type
    return (FP32, BF16, INT8) if kind == "cpu" else (FP32, BF16)


def autocast(precision: str, device: torch.device | str) -> ContextManager:
    """The context to run in: bf16 autocast for `bf16`, nothing for `fp32` and `int8`."""
    precision = normalize_precision(precision)
    if precision == AUTO:
        raise ConfigError("precision 'auto' must be resolved (choose_precision) before running")
    if precision == BF16:
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


INT8_SCOPES = ("attention", "all")


def _in_int8_scope(name: str, scope: str) -> bool:
    return scope == "all" or "attention" in name.lower()


def quantize_model_int8(model: torch.nn.Module, scope: str | None = None) -> torch.nn.Module:
    """A copy of `model` with linear layers dynamically quantized to int8: the attention
    projections (`scope` "attention", the default) or every linear layer ("all"). A model may
    name its own default scope in an `int8_scope` attribute."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    scope = scope or getattr(model, "int8_scope", "attention")
    if scope not in INT8_SCOPES:
        raise ConfigError(f"int8 scope must be one of {', '.join(INT8_SCOPES)}, got {scope!r}")
    spec = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and _in_int8_scope(name, scope)}
    if not spec:
        raise ConfigError(f"precision int8: {type(model).__name__} has no attention linear "
                          "layers to quantize")
    with warnings.catch_warnings():  # torch.ao.quantization announces its successor on import
        warnings.simplefilter("ignore")
        return quantize_dynamic(copy.deepcopy(model).eval(), spec, dtype=torch.qint8)


_INT8_COPIES: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, torch.nn.Module]]" = \
    weakref.WeakKeyDictionary()


def _weights_version(model: torch.nn.Module) -> int:
    """Changes whenever a parameter is updated in place (an optimizer step, a load)."""
    return sum(p._version for p in model.parameters())


def prepare(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """The module to run for `precision`: `model` itself, or (int8) its quantized copy, made
    once and reused until the model's weights change (then made again)."""
    precision = normalize_precision(precision)
    if precision != INT8:
        return model
    if next(model.parameters()).device.type != "cpu":
        raise ConfigError("precision int8 runs on CPU only (dynamic quantization)")
    version = _weights_version(model)
    cached = _INT8_COPIES.get(model)
    if cached is None or cached[0] != version:
        cached = (version, quantize_model_int8(model))
        _INT8_COPIES[model] = cached
    return cached[1]


def check_resumed_precision(recorded: Any, requested: str, folder: Any, what: str) -> None:
    """A resumed encoding keeps the precision its manifest records: `auto` accepts it, a
    different forced precision would mix vectors (ConvQAError naming the folder)."""
    from .errors import ConvQAError

    recorded = normalize_precision(recorded, f"{folder}: precision")
    if requested != AUTO and recorded != requested:
        raise ConvQAError(f"{folder} was {what} with precision {recorded}; "
                          f"precision {requested} needs another folder")


@dataclass
class PrecisionChoice:
    """What `auto` picked for one kind of work, and why: the probe's seconds and agreement
    per candidate (fp32's agreement is 1 by definition)."""

    precision: str
    what: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    agreement: dict[str, float] = field(default_factory=dict)
    threshold: float | None = None
    cpu: str = ""
    remembered: bool = False
    source: str = ""  # the file a remembered choice came from
    min_speedup: float = MIN_SPEEDUP
    provisional: bool = False  # fp32 for inputs too small to probe on; decided on later ones

    @classmethod
    def forced(cls, precision: str, what: str = "") -> "PrecisionChoice":
        return cls(normalize_precision(precision), what, cpu=cpu_capability())

    @property
    def measured(self) -> bool:
        return bool(self.seconds)

    def summary(self) -> str:
        """One line: the choice and each candidate's probe time and agreement."""
        if self.provisional:
            return (f"precision for {self.what or 'inference'}: {self.precision} for now "
                    "(these inputs are too small to probe on)")
        if not self.measured:
            return f"precision for {self.what or 'inference'}: {self.precision} (forced)"
        if self.remembered:
            return (f"precision for {self.what or 'inference'}: {self.precision} "
                    f"(measured earlier on this machine, {self.source or choices_file()})")
        parts = []
        for name, seconds in self.seconds.items():
            agree = self.agreement.get(name)
            ok = "" if agree is None or self.threshold is None or agree >= self.threshold \
                else ", disagrees"
            if not ok and name != FP32 and not self.gains(name):
                ok = f", not {self.min_speedup:g}x fp32's speed"
            parts.append(f"{name} {seconds * 1000:.1f} ms (agreement {agree:.4f}{ok})"
                         if agree is not None else f"{name} {seconds * 1000:.1f} ms")
        return (f"precision for {self.what or 'inference'}: {self.precision} on {self.cpu} "
                f"[{'; '.join(parts)}]")

    def gains(self, name: str) -> bool:
        """Whether candidate `name`'s probe was at least `min_speedup` times as fast as fp32's
        (fp32 itself: True; unknown times: True)."""
        fp32, other = self.seconds.get(FP32), self.seconds.get(name)
        return name == FP32 or fp32 is None or other is None or \
            other * self.min_speedup <= fp32

    def to_dict(self) -> dict[str, Any]:
        return {"precision": self.precision, "what": self.what, "cpu": self.cpu,
                "probe_seconds": {k: round(v, 6) for k, v in self.seconds.items()},
                "agreement": {k: round(v, 6) for k, v in self.agreement.items()},
                "threshold": self.threshold, "min_speedup": self.min_speedup}


def cpu_capability() -> str:
    """What torch's CPU kernels dispatch to here (e.g. AVX2, AVX512), for reports."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # pragma: no cover - very old torch
        return "unknown"


@lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU as /proc/cpuinfo names it ("AMD EPYC 23 1 2": model name, family, model,
    stepping), so a speed is quoted with the machine it ran on: the kernel level alone
    (AVX2) does not tell a Zen 1 from a Zen 3."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in ("model name", "cpu family", "model", "stepping"):
                    fields.setdefault(name, value.strip())
                elif not line.strip() and fields:
                    break  # the first processor describes them all
    except OSError:
        pass
    return " ".join(fields[k] for k in ("model name", "cpu family", "model", "stepping")
                    if k in fields) or platform.processor()


def machine_key() -> str:
    """What probe timings depend on besides the model: CPU, torch build, threads (read at each
    call: a process may set its thread count after its first probe)."""
    return (f"{cpu_capability()}|{cpu_name()}|torch {torch.__version__}|"
            f"{torch.get_num_threads()} threads")


def choices_file() -> Path:
    from .cache import cache_dir

    return cache_dir() / "precision-choices.json"


def _remembered(key: str, path: Path | None = None) -> dict[str, Any] | None:
    try:
        with open(path or choices_file(), encoding="utf-8") as handle:
            entry = json.load(handle).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) else None


def _remember(key: str, choice: "PrecisionChoice", path: Path | None = None) -> None:
    """Add `choice` to the choices file (atomic replace; a failure only costs a new probe)."""
    path = path or choices_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, encoding="utf-8") as handle:
                known = json.load(handle)
            known = known if isinstance(known, dict) else {}
        except (OSError, ValueError):
            known = {}
        known[key] = choice.to_dict()
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(known, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        log.info("could not remember the precision choice in %s: %s", path, exc)


# A probe times each candidate at least this long (and at least `MIN_REPEATS` calls), so a
# millisecond-sized probe (one query) is not decided by scheduler noise; at most `MAX_REPEATS`.
PROBE_SECONDS = 0.3
MIN_REPEATS, MAX_REPEATS = 2, 25


def time_run(precision: str, run: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds of the fastest timed call after one warm-up call, and its output: calls repeat
    until `PROBE_SECONDS` have passed (between `MIN_REPEATS` and `MAX_REPEATS` calls)."""
    output = run()
    best, spent, calls = float("inf"), 0.0, 0
    while calls < MIN_REPEATS or (spent < PROBE_SECONDS and calls < MAX_REPEATS):
        start = time.perf_counter()
        output = run()
        took = time.perf_counter() - start
        best, spent, calls = min(best, took), spent + took, calls + 1
    return best, output


def choose_precision(run: Callable[[str], Any], agreement: Callable[[Any, Any], float], *,
                     threshold: float, what: str, device: torch.device | str,
                     requested: str = AUTO, candidates: Sequence[str] | None = None,
                     timer: Timer | None = None, remember: str | None = None,
                     inference: bool = True, choices: Path | None = None,
                     ready: bool = True) -> PrecisionChoice:
    """Resolve `requested`: a fixed precision is returned as is; `auto` times `run(p)` for every
    candidate, scores `agreement(fp32 output, output)` (higher is better; >= `threshold` agrees)
    and keeps the fastest candidate that agrees and is `MIN_SPEEDUP` times as fast as fp32 (else
    fp32). A candidate that fails to run is skipped
    (logged). The outcome is logged once, at INFO, with the measured times. With `remember`
    (the model's fingerprint) the choice is kept per machine and reused by later processes,
    in `choices` (default: the cache's choices file). `inference=False` runs the probe with
    autograd on (training steps). `ready=False` (inputs too small for a probe to mean anything,
    e.g. one window whose agreement can only be 0 or 1): a remembered choice still applies,
    otherwise fp32 `provisional`, neither measured nor remembered."""
    requested = normalize_precision(requested, f"precision for {what}")
    if requested != AUTO:
        return PrecisionChoice.forced(requested, what)
    pool = [FP32] + [c for c in (candidates or candidates_for(device)) if c != FP32]
    key = f"{machine_key()}|{torch.device(device).type}|{what}|{remember}" if remember else None
    known = _remembered(key, choices) if key else None
    if known and known.get("precision") in pool:
        choice = PrecisionChoice(known["precision"], what, known.get("probe_seconds") or {},
                                 known.get("agreement") or {}, known.get("threshold"),
                                 known.get("cpu", ""), remembered=True,
                                 source=str(choices or choices_file()))
        if known.get("min_speedup") != MIN_SPEEDUP and choice.seconds:
            # chosen under another speed rule: the same probe, decided by this one
            choice.precision = _fastest_agreeing(choice) or choice.precision
            _remember(key, choice, choices)
        log.info("%s", choice.summary())
        return choice
    if not ready:
        return PrecisionChoice(FP32, what, cpu=cpu_capability(), provisional=True)
    timer = timer or time_run
    seconds: dict[str, float] = {}
    scores: dict[str, float] = {}
    reference = None
    for name in pool:
        try:
            with torch.inference_mode() if inference else contextlib.nullcontext():
                took, output = timer(name, lambda name=name: _run_in(run, name, device))
        except Exception as exc:  # e.g. no int8 kernels for this layer type
            if name == FP32:
                raise
            log.info("precision probe for %s: %s failed (%s); skipped", what, name, exc)
            continue
        seconds[name] = float(took)
        if name == FP32:
            reference = output
            scores[name] = 1.0
        else:
            scores[name] = float(agreement(reference, output))
    choice = PrecisionChoice(FP32, what, seconds, scores, threshold, cpu_capability())
    choice.precision = _fastest_agreeing(choice) or FP32
    log.info("%s", choice.summary())
    if key:
        _remember(key, choice, choices)
    return choice


def _fastest_agreeing(probe: PrecisionChoice) -> str | None:
    """The fastest candidate of a probe that agrees with fp32 and gains `MIN_SPEEDUP` over it
    (fp32 when none does; None without fp32's time)."""
    if FP32 not in probe.seconds:
        return None
    fine = [name for name in probe.seconds if name == FP32 or (
        probe.agreement.get(name, 0.0) >= (probe.threshold or 0.0) and probe.gains(name))]
    return min(fine, key=lambda name: probe.seconds[name])


TRAINING_CHOICES = "precision-choice.json"  # in a run folder: the probe's outcome there

# A training step agrees with fp32 when the loss of the probe batch is within 2% of fp32's:
# bf16 autocast moves a MiniLM reader's loss by well under 1% (weights and optimizer stay fp32).
LOSS_AGREEMENT = 0.98


def training_precision_setting(precision: str, bf16: bool = False) -> str:
    """A training config's `precision` checked and normalised (`bf16=True`, the `--bf16` flag,
    means bf16); int8 cannot train."""
    precision = normalize_precision(precision, "precision")
    if precision == INT8:
        raise ConfigError("precision: int8 is for inference only; use auto, fp32 or bf16")
    return BF16 if bf16 else precision


def choose_training_precision(step: Callable[[str], float], *, what: str,
                              device: torch.device | str, requested: str = AUTO,
                              timer: Timer | None = None,
                              run_folder: Path | None = None) -> PrecisionChoice:
    """The precision of training steps: `step(p)` runs the forward and backward pass of one
    real batch in precision `p` (gradients discarded) and returns its loss; `auto` keeps the
    faster of fp32 and bf16 whose loss agrees (`LOSS_AGREEMENT`). int8 cannot train. With
    `run_folder` the choice is kept there (TRAINING_CHOICES) and a resumed run on the same
    machine reuses it: the probe of a slow candidate costs minutes (bf16 without native
    kernels ran a reader step 20x slower than fp32), at every restart."""
    requested = normalize_precision(requested, f"precision for {what}")
    if requested == INT8:
        raise ConfigError(f"precision for {what}: int8 is for inference only; use auto, fp32 "
                          "or bf16")
    return choose_precision(step, loss_agreement, threshold=LOSS_AGREEMENT, what=what,
                            device=device, requested=requested,
                            candidates=[c for c in candidates_for(device) if c != INT8],
                            timer=timer, inference=False,
                            remember="run" if run_folder is not None else None,
                            choices=Path(run_folder) / TRAINING_CHOICES if run_folder is not None
                            else None)


def _run_in(run: Callable[[str], Any], precision: str, device) -> Any:
    with autocast(precision, device):
        return run(precision)


# -- agreement measures ---------------------------------------------------------------------

def loss_agreement(reference: float, other: float) -> float:
    """1 minus the relative distance of a loss from the fp32 loss (1 = equal)."""
    return 1.0 - abs(float(other) - float(reference)) / max(abs(float(reference)), 1e-6)


def min_cosine(reference: Any, other: Any) -> float:
    """Worst row-wise cosine similarity of two `[n, d]` arrays or tensors (vectors)."""
    a = torch.as_tensor(reference).detach().float()
    b = torch.as_tensor(other).detach().float()
    if a.shape != b.shape:
        return float("-inf")
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1, eps=1e-12).min())


class PrecisionOnFirstUse:
    """A component's precision: fixed, or for `auto` measured the first time the component
    runs, on its real inputs, and kept from then on (what every retriever and reader does).

        self._precision = PrecisionOnFirstUse(config.precision, "dense: precision")
        precision = self._precision.resolve(lambda: choose_precision(run, ...))

    A component that subclasses `MeasuredPrecision` shows the outcome as `precision` and
    `precision_choice`.
    """

    def __init__(self, requested: Any, where: str = "precision"):
        self.requested = normalize_precision(requested, where)
        self.value: str | None = None if self.requested == AUTO else self.requested
        self.choice: PrecisionChoice | None = None

    def resolve(self, choose: Callable[[], PrecisionChoice]) -> str:
        """The precision, running `choose` (a probe) only while `auto` is still undecided; a
        provisional choice applies to this call only, and the next one chooses again."""
        if self.value is None:
            choice = choose()
            if choice.provisional:
                return choice.precision
            self.choice = choice
            self.value = choice.precision
        return self.value


class MeasuredPrecision:
    """What a component's `PrecisionOnFirstUse` (in `_precision`) decided, for reports."""

    _precision: PrecisionOnFirstUse

    @property
    def precision(self) -> str | None:
        """fp32, bf16 or int8 once decided (`auto`: on the first inputs run)."""
        return self._precision.value

    @property
    def precision_choice(self) -> PrecisionChoice | None:
        """What `auto` measured (None before the first inputs, or when forced)."""
        return self._precision.choice
