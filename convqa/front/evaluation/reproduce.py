"""The reproduction matrix: named runs with the scores we measured, run and compared.

    matrix = load_matrix("benchmarks/reproduce.yaml")
    run = matrix.runs["bm25-xt-vital"].resolved({"bench": "/tmp/bench", "out": "/tmp/r"})
    missing_needs(run)          # inputs that must exist first, with the command that makes them
    outcome = execute(run)      # runs the command, reads its output JSON, compares
    print(comparison_table(outcome))

A matrix file is YAML:

    runs:
      bm25-xt-vital:
        description: BM25 with X_t on the vital benchmark, dev split (about 1 min)
        needs:
          - {path: "{bench}/vital/turns.jsonl", how: "convqa data topiocqa-wiki --out {bench}"}
        command: [convqa, eval, retrieval, --benchmark, "vital={bench}/vital", ...]
        output: "{out}/retrieval.json"
        source: docs/results/retrieval.json      # where the expected numbers were measured
        expect:
          - path: [results, vital, "label=BM25, X_t (full = oldest_first)", levels, article,
                   groups, all, hits@5]
            value: 0.6107497741644083
            tolerance: 0.0005

Placeholders in strings: `{bench}` (the benchmark root of `convqa data topiocqa-wiki --out`),
`{out}` (a folder for this run's outputs), `{here}` (the folder of the matrix file),
`{python}` (this interpreter). A command starting with `convqa` runs as
`python -m convqa.front.cli.main ...` and one starting with `python` with this interpreter, so the
installation being checked is the one running `convqa reproduce`.

A path step is a key of an object, an index of a list, or `label=TEXT`: the element of a list
whose "label" is TEXT. A metric passes when |got - value| <= tolerance.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from convqa.config import load_yaml
from convqa.errors import ConfigError, DataError
from convqa.io import load_json

from .systems import substitute

_RUN_KEYS = {"description", "needs", "command", "output", "source", "expect"}
_STRUCTURE = {"results", "levels", "groups", "by_k"}  # left out when a path is shown


@dataclass(frozen=True)
class Expectation:
    path: tuple[Any, ...]
    value: float
    tolerance: float

    def describe(self) -> str:
        """The path without the structural steps: "vital / BM25, X_t / article / all / mrr"."""
        steps = [str(step) for step in self.path if step not in _STRUCTURE]
        return " / ".join(s[len("label="):] if s.startswith("label=") else s for s in steps)


@dataclass(frozen=True)
class Need:
    path: str
    how: str = ""


@dataclass(frozen=True)
class RunSpec:
    name: str
    description: str
    command: tuple[str, ...]
    output: str
    expect: tuple[Expectation, ...]
    needs: tuple[Need, ...] = ()
    source: str | None = None

    def resolved(self, placeholders: dict[str, str]) -> "RunSpec":
        """This run with the placeholders replaced in its command, output and needs."""
        return replace(self, command=tuple(substitute(list(self.command), placeholders)),
                       output=substitute(self.output, placeholders),
                       needs=tuple(Need(substitute(n.path, placeholders),
                                        substitute(n.how, placeholders)) for n in self.needs),
                       source=substitute(self.source, placeholders))


@dataclass(frozen=True)
class Matrix:
    path: Path
    runs: dict[str, RunSpec] = field(default_factory=dict)

    def get(self, name: str) -> RunSpec:
        if name not in self.runs:
            raise ConfigError(f"{self.path}: no run named {name!r} (runs: "
                              f"{', '.join(self.runs) or 'none'})")
        return self.runs[name]


def load_matrix(path: str | os.PathLike) -> Matrix:
    """Read and check a matrix file; a problem is a one-line ConfigError naming the run."""
    path = Path(path)
    data = load_yaml(path)
    runs = data.get("runs")
    if not isinstance(runs, dict) or not runs:
        raise ConfigError(f"{path}: expected a mapping of named runs under 'runs'")
    return Matrix(path, {str(name): _run(path, str(name), spec) for name, spec in runs.items()})


def _run(path: Path, name: str, spec: Any) -> RunSpec:
    where = f"{path}: run '{name}'"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = sorted(set(spec) - _RUN_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}' (keys: "
                          f"{', '.join(sorted(_RUN_KEYS))})")
    command = spec.get("command")
    if (not isinstance(command, list) or not command
            or not all(isinstance(a, (str, int, float)) for a in command)):
        raise ConfigError(f"{where}: 'command' must be a non-empty list of arguments")
    if not isinstance(spec.get("output"), str):
        raise ConfigError(f"{where}: 'output' must name the JSON file the command writes")
    expect = spec.get("expect")
    if not isinstance(expect, list) or not expect:
        raise ConfigError(f"{where}: 'expect' must be a non-empty list of {{path, value, "
                          "tolerance}}")
    expectations = []
    for index, item in enumerate(expect):
        if not isinstance(item, dict) or not isinstance(item.get("path"), list) or not item["path"]:
            raise ConfigError(f"{where}: expect[{index}] needs a non-empty 'path' list")
        value, tolerance = item.get("value"), item.get("tolerance", 0.0)
        if not _number(value) or not _number(tolerance) or tolerance < 0:
            raise ConfigError(f"{where}: expect[{index}]: 'value' and 'tolerance' (>= 0) must "
                              "be numbers")
        expectations.append(Expectation(tuple(item["path"]), float(value), float(tolerance)))
    needs = []
    for index, item in enumerate(spec.get("needs") or []):
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise ConfigError(f"{where}: needs[{index}] must be a path or {{path, how}}")
        needs.append(Need(item["path"], str(item.get("how") or "")))
    return RunSpec(name, str(spec.get("description") or ""), tuple(str(a) for a in command),
                   spec["output"], tuple(expectations), tuple(needs), spec.get("source"))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def missing_needs(run: RunSpec) -> list[Need]:
    """The inputs of `run` (resolved) that do not exist."""
    return [need for need in run.needs if not Path(need.path).exists()]


def argv(run: RunSpec) -> list[str]:
    """The command to execute: `convqa ...` and `python ...` use this interpreter."""
    command = list(run.command)
    if command[0] == "convqa":
        return [sys.executable, "-m", "convqa.front.cli.main", *command[1:]]
    if command[0] in ("python", "python3"):
        return [sys.executable, *command[1:]]
    return command


def lookup(data: Any, path: Sequence[Any]) -> Any:
    """The value at `path` in `data` (see the module doc); KeyError naming the failing step."""
    node = data
    for step in path:
        if isinstance(node, list):
            if isinstance(step, str) and step.startswith("label="):
                label = step[len("label="):]
                found = [x for x in node if isinstance(x, dict) and x.get("label") == label]
                if not found:
                    raise KeyError(f"no element with label {label!r}")
                node = found[0]
            elif (isinstance(step, int) and not isinstance(step, bool)
                  and -len(node) <= step < len(node)):
                node = node[step]
            else:
                raise KeyError(f"bad list step {step!r}")
        elif isinstance(node, dict) and str(step) in node:
            node = node[str(step)]
        else:
            raise KeyError(f"no key {step!r}")
    return node


@dataclass
class Check:
    expectation: Expectation
    got: float | None
    passed: bool
    note: str = ""


@dataclass
class Outcome:
    run: RunSpec
    returncode: int
    seconds: float
    checks: list[Check]
    stderr_tail: str = ""

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and bool(self.checks) and all(c.passed for c in self.checks)


def compare(run: RunSpec, output: Any) -> list[Check]:
    """One check per expectation of `run` against the parsed output JSON."""
    checks = []
    for expectation in run.expect:
        try:
            got = lookup(output, expectation.path)
        except KeyError as exc:
            checks.append(Check(expectation, None, False, f"missing: {exc.args[0]}"))
            continue
        if not _number(got):
            checks.append(Check(expectation, None, False, f"not a number: {got!r}"))
            continue
        checks.append(Check(expectation, float(got),
                            abs(float(got) - expectation.value) <= expectation.tolerance))
    return checks


def execute(run: RunSpec, stream: bool = True) -> Outcome:
    """Run the command (stdout/stderr shown live when `stream`), then compare its output."""
    Path(run.output).parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv(run), stderr=None if stream else subprocess.PIPE,
                              stdout=None if stream else subprocess.PIPE, text=True)
    except OSError as exc:
        raise ConfigError(f"run '{run.name}': cannot start {run.command[0]!r} ({exc})") from None
    seconds = time.perf_counter() - started
    tail = "" if stream else (proc.stderr or "").strip()[-2000:]
    if proc.returncode != 0:
        return Outcome(run, proc.returncode, seconds, [], tail)
    if not Path(run.output).is_file():
        raise DataError(f"run '{run.name}' finished but did not write its output", run.output)
    return Outcome(run, 0, seconds, compare(run, load_json(run.output)), tail)


def comparison_table(outcome: Outcome) -> str:
    """Markdown: one row per metric with expected, got, difference, tolerance, pass/FAIL."""
    lines = ["| metric | expected | got | diff | tolerance | result |",
             "|---|---:|---:|---:|---:|---|"]
    for check in outcome.checks:
        e = check.expectation
        got = "-" if check.got is None else f"{check.got:.6g}"
        diff = "-" if check.got is None else f"{check.got - e.value:+.2g}"
        verdict = "pass" if check.passed else "FAIL" + (f" ({check.note})" if check.note else "")
        lines.append(f"| {e.describe()} | {e.value:.6g} | {got} | {diff} | {e.tolerance:g} | "
                     f"{verdict} |")
    return "\n".join(lines)
