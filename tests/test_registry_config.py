from dataclasses import dataclass

import pytest

from convqa.config import apply_overrides, load_yaml
from convqa.errors import ConfigError, DataError
from convqa.registry import RETRIEVERS, Registry, config_to_dict


@dataclass
class ToyConfig:
    size: int = 3
    scale: float = 1.0
    name_field: str = "x"
    enabled: bool = True
    limit: int | None = None


def make_registry():
    registry = Registry("toy")

    @registry.register("toy", config=ToyConfig)
    class Toy:
        def __init__(self, config):
            self.config = config

    return registry


def test_build_with_typed_config_and_coercion():
    toy = make_registry().build({"name": "toy", "size": "5", "enabled": "false", "limit": 7})
    assert toy.config == ToyConfig(size=5, enabled=False, limit=7)
    assert config_to_dict("toy", toy.config)["size"] == 5


def test_unknown_component_and_option_are_config_errors():
    registry = make_registry()
    with pytest.raises(ConfigError, match=r"unknown toy 'nope' \(known: toy\)"):
        registry.build("nope")
    with pytest.raises(ConfigError, match="unknown option 'sise'"):
        registry.build({"name": "toy", "sise": 2})
    with pytest.raises(ConfigError, match="option 'size': expected int, got 'big'"):
        registry.build({"name": "toy", "size": "big"})
    with pytest.raises(ConfigError, match="expected true/false"):
        registry.build({"name": "toy", "enabled": "maybe"})


def test_builtin_retrievers_are_listed():
    assert "bm25" in RETRIEVERS.names()


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("retriever: bm25\ntop_k: 5\n", encoding="utf-8")
    config = load_yaml(path)
    merged = apply_overrides(config, ["retriever.k1=1.2", "top_k=10", "history.name=current_first"])
    assert merged == {"retriever": {"name": "bm25", "k1": 1.2}, "top_k": 10,
                      "history": {"name": "current_first"}}
    assert config == {"retriever": "bm25", "top_k": 5}  # original untouched
    with pytest.raises(ConfigError, match="not of the form"):
        apply_overrides(config, ["top_k"])


def test_malformed_yaml_names_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("a: 1\nb: [1, 2\nc: 3\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.yaml:\d+: malformed YAML"):
        load_yaml(path)
