"""Retriever and history specs from the command line or YAML, and building them.

A spec given as text is one of:
- a component name: `bm25`;
- inline YAML/JSON: `{name: bm25, index: idx/bm25, preset: qrecc}`;
- a YAML file holding such a mapping, or a pipeline config (`convqa answer --config`) whose
  `retriever`, `history` and `passages` are then used.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import yaml

from convqa.config import load_yaml
from convqa.errors import ConfigError
from convqa.registry import RETRIEVERS

# Retriever modules that register components beyond the registry's own built-ins; imported
# (when present) before a spec is built so every retriever name works from the command line.
_RETRIEVER_MODULES = ("retrievers.bm25", "retrievers.fusion", "retrievers.dense.retriever",
                      "retrievers.convdr.retriever")


def parse_spec(text: str, what: str = "retriever") -> tuple[Any, dict[str, Any]]:
    """(spec, pipeline defaults) from a name, inline YAML or a YAML file; see module doc."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"empty {what} spec")
    text = text.strip()
    if text.startswith("{"):
        return _check(inline_yaml(text, f"{what} spec"), what), {}
    path = Path(text)
    if text.endswith((".yaml", ".yml", ".json")) or os.sep in text:
        if not path.is_file():
            raise ConfigError(f"{what} spec: file not found: {text}")
        data = load_yaml(path)
        if what in data and isinstance(data[what], (dict, str)):  # a pipeline config
            defaults = {k: data[k] for k in ("passages", "history") if data.get(k)}
            return data[what], defaults
        return _check(data, what), {}
    return text, {}


def inline_yaml(text: str, where: str) -> Any:
    """`text` parsed as YAML; malformed: a ConfigError headed by `where`."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: malformed inline YAML ({exc.__class__.__name__}): "
                          f"{text}") from None


def _check(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ConfigError(f"{what} spec needs a 'name' field, got {data!r}")
    return data


def with_options(spec: Any, **options: Any) -> dict[str, Any]:
    """`spec` as a dict with `options` (those not None) set."""
    data = {"name": spec} if isinstance(spec, str) else dict(spec)
    data.update({k: v for k, v in options.items() if v is not None})
    return data


def load_retriever_modules() -> None:
    """Import every retriever module that exists in this checkout (see _RETRIEVER_MODULES)."""
    for module in _RETRIEVER_MODULES:
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)


def spec_names(spec: Any) -> list[str]:
    """Every component name in `spec`, nested ones (fusion's `retrievers`) included."""
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, dict):
        names = [spec["name"]] if isinstance(spec.get("name"), str) else []
        for value in spec.values():
            if isinstance(value, (dict, list)):
                names.extend(spec_names(value))
        return names
    if isinstance(spec, list):
        return [name for item in spec for name in spec_names(item)]
    return []


def build_retriever(spec: Any):
    """`RETRIEVERS.build(spec)`, importing the optional retriever modules first when the spec
    names a component the registry does not know yet (dense pulls in torch: only on demand)."""
    known = set(RETRIEVERS.names())
    if any(name not in known for name in spec_names(spec)):
        load_retriever_modules()
    return RETRIEVERS.build(spec)


def retriever_fingerprint(retriever: Any, spec: Any) -> str:
    """What a cached run depends on: the retriever's own `fingerprint()` when it has one, else
    the spec plus size and mtime of every file its path options name."""
    fingerprint = getattr(retriever, "fingerprint", None)
    if callable(fingerprint):
        return str(fingerprint())
    stats = []
    values = spec.values() if isinstance(spec, dict) else [spec]
    for value in values:
        if isinstance(value, str) and value and Path(value).exists():
            stats.extend(_stat(Path(value)))
    data = json.dumps({"spec": spec, "files": stats}, sort_keys=True, default=str)
    return "spec-sha256:" + hashlib.sha256(data.encode()).hexdigest()


def _stat(path: Path) -> list[tuple[str, int, int]]:
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]
