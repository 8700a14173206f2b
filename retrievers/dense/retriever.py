"""The `dense` retriever: a dual encoder's query tower over a saved FAISS index.

    >>> import tempfile
    >>> from convqa.corpus import PassageStore
    >>> from convqa.registry import RETRIEVERS
    >>> from convqa.types import Passage
    >>> from retrievers.dense.build import build_dense_index
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     store = PassageStore.build([
    ...         Passage("Jupiter#0", "Jupiter is the fifth planet from the Sun and the largest "
    ...                 "in the Solar System.", "Jupiter"),
    ...         Passage("Stanley_Kubrick#0", "Stanley Kubrick was an American film director, "
    ...                 "screenwriter and producer.", "Stanley Kubrick")],
    ...         f"{tmp}/passages", progress=False)
    ...     index = build_dense_index("convqa-dpr-ihn", store, f"{tmp}/index", progress=False)
    ...     retriever = RETRIEVERS.build({"name": "dense", "index": f"{tmp}/index"})
    ...     [hit.passage_id for hit in retriever.retrieve("the largest planet", k=2)]
    ['Jupiter#0', 'Stanley_Kubrick#0']

Loading checks that the encoder (fingerprint, dimension) and the passage store (checksum) are
the ones the index was built from. Queries are encoded in the precision `precision` names; with
`auto` (the default) it is chosen on the first batch of queries by timing each candidate and
keeping the fastest whose vectors agree with fp32 (convqa/precision.py; logged once).

Heavy libraries (torch, transformers, faiss) are imported on first use, so registering this
retriever costs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from convqa.errors import ConfigError
from convqa.registry import RETRIEVERS
from convqa.types import Hit

from ..base import Retriever


@dataclass
class DenseRetrieverConfig:
    index: str = ""           # folder from `build_dense_index` / `convqa index --dense`
    model: str = ""           # encoder path or hub id; default: the one the index records
    passages: str = ""        # passage store folder; default: the one the index records
    batch_size: int = 16      # queries per forward pass (on 2 CPU cores 8-16 beat 64 by ~40%)
    device: str = "cpu"       # cpu | cuda | cuda:N | auto
    precision: str = "auto"   # auto (measured on the first queries) | fp32 | bf16 | int8
    nprobe: int | None = None     # IVF lists searched (index default 32)
    ef_search: int | None = None  # HNSW candidates (index default 128)
    mmap: bool = False        # memory-map a Flat index instead of reading it


@RETRIEVERS.register("dense", config=DenseRetrieverConfig)
class DenseRetriever(Retriever):
    """Dense passage retrieval: encode queries, inner-product search, rows -> passage ids."""

    def __init__(self, model, index, store, config: DenseRetrieverConfig | None = None):
        self.config = config or DenseRetrieverConfig()
        self.model = model.eval()
        self.index = index
        self.store = store
        index.check(fingerprint=model.fingerprint(), dim=model.dim,
                    corpus_checksum=store.checksum, encoder_name=model.source)
        index.set_search_params(self.config.nprobe, self.config.ef_search)
        self._init_precision()

    def _init_precision(self) -> None:
        from convqa.precision import PrecisionOnFirstUse

        self._precision = PrecisionOnFirstUse(self.config.precision,
                                              f"{type(self).__name__}: precision")

    @classmethod
    def from_config(cls, config: DenseRetrieverConfig) -> "DenseRetriever":
        from convqa.corpus import PassageStore

        from convqa.model_base import resolve_device

        from .build import load_encoder
        from .index import DenseIndex

        if not config.index:
            raise ConfigError("dense: option 'index' (a folder made by `convqa index --dense`) "
                              "is required")
        if isinstance(config.batch_size, bool) or config.batch_size < 1:
            raise ConfigError(f"dense: batch_size must be >= 1, got {config.batch_size}")
        index = DenseIndex.load(config.index, mmap=config.mmap)
        model_name = config.model or index.meta.get("encoder")
        passages = config.passages or index.meta.get("passages")
        if not model_name:
            raise ConfigError(f"dense: index {config.index} records no encoder; set 'model'")
        if not passages:
            raise ConfigError(f"dense: index {config.index} records no passage store; "
                              "set 'passages'")
        model = load_encoder(model_name).to(resolve_device(config.device, "dense"))
        return cls(model, index, PassageStore.open(Path(passages)), config)

    # precision and precision_choice as convqa.precision.MeasuredPrecision has them (not
    # inherited: that module imports torch, which registering this retriever must not)
    @property
    def precision(self) -> str | None:
        """fp32, bf16 or int8 once decided (`auto`: on the first batch of queries)."""
        return self._precision.value

    @property
    def precision_choice(self):
        """What `auto` measured (None before the first queries, or when forced)."""
        return self._precision.choice

    def encode_queries(self, queries: Sequence[str]):
        """float32 numpy `[len(queries), dim]` query vectors (length-sorted batches)."""
        from convqa.precision import FP32

        from .encode import choose_query_precision, encode_queries

        queries = list(queries)
        precision = self._precision.resolve(lambda: choose_query_precision(
            self.model, queries[:self.config.batch_size], self.config.batch_size,
            remember=self.index.fingerprint)) if queries else self.precision
        return encode_queries(self.model, queries, self.config.batch_size, precision or FP32)

    def search(self, query_vectors, k: int = 10) -> list[list[Hit]]:
        """Hits for precomputed query vectors (`[n, dim]`)."""
        scores, rows = self.index.search(query_vectors, k)
        results = []
        for score_row, index_row in zip(scores, rows):
            hits = [Hit(self.store.id_at(int(i)), float(s), rank)
                    for rank, (s, i) in enumerate(
                        ((s, i) for s, i in zip(score_row, index_row) if i >= 0), start=1)]
            results.append(hits)
        return results

    def retrieve_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        if not queries:
            return []
        return self.search(self.encode_queries(queries), k)
