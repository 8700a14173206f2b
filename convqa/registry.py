"""Components registered by name with a typed config.

    @RETRIEVERS.register("bm25", config=BM25Config)
    class BM25Retriever: ...

    retriever = RETRIEVERS.build({"name": "bm25", "k1": 0.9})

A component class receives its config dataclass; if it defines `from_config(config)` that is
used instead of the constructor. Built-in components live in modules listed per registry and are
imported on first lookup, so `import convqa` stays cheap.
"""
from __future__ import annotations

import dataclasses
import importlib
import typing
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Callable, Generic, TypeVar

from .errors import ConfigError

T = TypeVar("T")


@dataclass
class _Entry:
    cls: type
    config: type | None


class Registry(Generic[T]):
    def __init__(self, kind: str, builtin_modules: tuple[str, ...] = ()):
        self.kind = kind
        self._builtin_modules = builtin_modules
        self._loaded = False
        self._entries: dict[str, _Entry] = {}

    def register(self, name: str, config: type | None = None) -> Callable[[type], type]:
        if config is not None and not is_dataclass(config):
            raise TypeError(f"config for {self.kind} '{name}' must be a dataclass")

        def decorate(cls: type) -> type:
            existing = self._entries.get(name)
            if existing is not None and existing.cls is not cls:
                raise ValueError(f"{self.kind} '{name}' is already registered by {existing.cls}")
            self._entries[name] = _Entry(cls, config)
            cls.registered_name = name
            return cls

        return decorate

    def _load_builtins(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self._builtin_modules:
                importlib.import_module(module)

    def names(self) -> list[str]:
        self._load_builtins()
        return sorted(self._entries)

    def entry(self, name: str) -> _Entry:
        self._load_builtins()
        if name not in self._entries:
            known = ", ".join(self.names()) or "none"
            raise ConfigError(f"unknown {self.kind} '{name}' (known: {known})")
        return self._entries[name]

    def make_config(self, name: str, options: dict[str, Any] | None = None) -> Any:
        """The typed config of component `name` from a dict (as read from YAML or flags)."""
        entry = self.entry(name)
        options = dict(options or {})
        if entry.config is None:
            if options:
                raise ConfigError(f"{self.kind} '{name}' takes no options, got: {', '.join(options)}")
            return None
        return build_dataclass(entry.config, options, where=f"{self.kind} '{name}'")

    def build(self, spec: dict[str, Any] | str) -> T:
        """Build from `"name"` or `{"name": ..., option: value, ...}`."""
        if isinstance(spec, str):
            spec = {"name": spec}
        if not isinstance(spec, dict) or "name" not in spec:
            raise ConfigError(f"a {self.kind} spec needs a 'name' field, got {spec!r}")
        options = {k: v for k, v in spec.items() if k != "name"}
        name = spec["name"]
        entry = self.entry(name)
        config = self.make_config(name, options)
        if config is None:
            return entry.cls()
        if hasattr(entry.cls, "from_config"):
            return entry.cls.from_config(config)
        return entry.cls(config)


def config_to_dict(name: str, config: Any) -> dict[str, Any]:
    """Inverse of `Registry.build`'s spec: `{"name": name, **fields}`."""
    data = dataclasses.asdict(config) if config is not None else {}
    return {"name": name, **data}


def build_dataclass(cls: type, options: dict[str, Any], where: str = "config") -> Any:
    """Instantiate dataclass `cls` from `options`, checking names and coercing simple types."""
    known = {f.name: f for f in fields(cls)}
    unknown = [k for k in options if k not in known]
    if unknown:
        raise ConfigError(f"{where}: unknown option '{unknown[0]}' (options: {', '.join(known)})")
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in options.items():
        values[key] = _coerce(value, hints.get(key, Any), f"{where}: option '{key}'")
    try:
        return cls(**values)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{where}: {exc}") from None
    except ValueError as exc:  # __post_init__ validation
        raise ConfigError(f"{where}: {exc}") from None


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Accept what YAML or a `key=value` flag gives, convert to the declared type or fail."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any or value is None and (type(None) in args):
        return value
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", ())):
        for option in args:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: cannot use {value!r} as {hint}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if hint in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")
        try:
            converted = hint(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}") from None
        if hint is int and isinstance(value, float) and converted != value:
            raise ConfigError(f"{where}: expected int, got {value!r}")
        return converted
    if hint is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        item = args[0] if args else Any
        return origin(_coerce(v, item, where) for v in value)
    if origin is dict and isinstance(value, dict):
        return value
    if is_dataclass(hint) and isinstance(value, dict):
        return build_dataclass(hint, value, where)
    if isinstance(hint, type) and not isinstance(value, hint):
        raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")
    return value


RETRIEVERS: Registry = Registry(
    "retriever", ("retrievers.bm25", "retrievers.dense.retriever", "retrievers.fusion",
                  "retrievers.convdr.retriever"))
READERS: Registry = Registry("reader", ("readers.extractive.reader", "readers.fid.reader"))
RERANKERS: Registry = Registry("reranker", ("retrievers.rerank.reranker",))
HISTORY_STRATEGIES: Registry = Registry("history strategy", ("convqa.history",))
