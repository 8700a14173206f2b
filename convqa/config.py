"""YAML configs with `key.sub=value` overrides from the command line."""
from __future__ import annotations

import os
from typing import Any

import yaml

from .errors import ConfigError, DataError
from .io import read_text


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    text = read_text(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise DataError(f"malformed YAML ({problem})", path, line) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DataError(f"expected a mapping at the top level, got {type(data).__name__}", path, 1)
    return data


def apply_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of `config` with each `a.b.c=value` applied; values parse as YAML scalars."""
    result = _deep_copy(config)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not of the form key.sub=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = result
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif isinstance(child, str) and part in ("retriever", "reranker", "reader", "history"):
                child = node[part] = {"name": child}
            elif not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: '{part}' is not a section")
            node = child
        node[parts[-1]] = value
    return result


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
