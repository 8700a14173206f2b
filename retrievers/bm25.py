"""BM25 with bm25s (pure Python/numpy, no Java), saved and loaded with memory-mapping.

Presets follow the papers: QReCC used k1=0.82, b=0.68; TopiOCQA/DPR-IHN used k1=0.9, b=0.4.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.registry import RETRIEVERS
from convqa.types import Hit, Passage

from .base import Retriever

PRESETS = {"default": (0.9, 0.4), "topiocqa": (0.9, 0.4), "qrecc": (0.82, 0.68)}
_META = "convqa_bm25.json"


@dataclass
class BM25Config:
    index: str = ""          # folder written by `BM25Retriever.build(...).save(folder)`
    preset: str = "default"  # default|topiocqa|qrecc; sets k1 and b unless given explicitly
    k1: float | None = None
    b: float | None = None
    stopwords: str = "en"

    def params(self) -> tuple[float, float]:
        if self.preset not in PRESETS:
            raise ConfigError(f"bm25: unknown preset '{self.preset}' (known: {', '.join(PRESETS)})")
        k1, b = PRESETS[self.preset]
        return (self.k1 if self.k1 is not None else k1, self.b if self.b is not None else b)


def _tokenize(texts: Sequence[str], stopwords: str) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(list(texts), return_ids=False, stopwords=stopwords, show_progress=False)


@RETRIEVERS.register("bm25", config=BM25Config)
class BM25Retriever(Retriever):
    """Sparse lexical retriever.

    >>> from convqa.types import Passage
    >>> r = BM25Retriever.build([Passage("a", "Paris is the capital of France"),
    ...                          Passage("b", "Berlin is the capital of Germany")])
    >>> r.retrieve("capital of France", k=1)[0].passage_id
    'a'
    """

    def __init__(self, model, passage_ids: list[str], config: BM25Config):
        self.model = model
        self.passage_ids = passage_ids
        self.config = config

    @classmethod
    def from_config(cls, config: BM25Config) -> "BM25Retriever":
        if not config.index:
            raise ConfigError("bm25: option 'index' (a folder made by `convqa index --bm25`) is required")
        return cls.load(config.index, config)

    @classmethod
    def build(cls, passages: Iterable[Passage], config: BM25Config | None = None,
              show_progress: bool = False) -> "BM25Retriever":
        import bm25s

        config = config or BM25Config()
        k1, b = config.params()
        ids: list[str] = []
        texts: list[str] = []
        for passage in passages:
            ids.append(passage.id)
            texts.append(f"{passage.title} {passage.text}" if passage.title else passage.text)
        if not ids:
            raise ConvQAError("bm25: cannot index an empty corpus")
        tokens = _tokenize(texts, config.stopwords)
        del texts
        model = bm25s.BM25(k1=k1, b=b)
        model.index(tokens, show_progress=show_progress)
        return cls(model, ids, config)

    def save(self, folder: str | Path) -> None:
        """Write atomically: a temporary sibling folder renamed into place."""
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            self.model.save(str(tmp), show_progress=False)
            meta = {"kind": "bm25", "config": asdict(self.config), "passage_ids": self.passage_ids}
            (tmp / _META).write_text(json.dumps(meta), encoding="utf-8")
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @classmethod
    def load(cls, folder: str | Path, config: BM25Config | None = None) -> "BM25Retriever":
        import bm25s

        folder = Path(folder)
        meta_path = folder / _META
        if not meta_path.exists():
            raise DataError("not a convqa BM25 index (no convqa_bm25.json)", folder)
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        saved = BM25Config(**meta["config"])
        if config is not None and config.params() != saved.params():
            raise ConfigError(f"bm25: index {folder} was built with k1,b={saved.params()}, "
                              f"config asks for {config.params()}; rebuild the index")
        model = bm25s.BM25.load(str(folder), mmap=True, show_progress=False)
        return cls(model, meta["passage_ids"], saved)

    def retrieve_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        k = min(k, len(self.passage_ids))
        tokens = _tokenize(queries, self.config.stopwords)
        results: list[list[Hit]] = [[] for _ in queries]
        searchable = [i for i, t in enumerate(tokens) if any(w in self.model.vocab_dict for w in t)]
        if not searchable:
            return results
        docs, scores = self.model.retrieve([tokens[i] for i in searchable], k=k, show_progress=False)
        for row, i in enumerate(searchable):
            rank = 0
            for doc, score in zip(docs[row], scores[row]):
                if score <= 0:
                    break
                rank += 1
                results[i].append(Hit(self.passage_ids[int(doc)], float(score), rank))
        return results
