"""BM25 with bm25s (pure Python/numpy, no Java), saved and loaded with memory-mapping.

Presets follow the papers: QReCC used k1=0.82, b=0.68; TopiOCQA/DPR-IHN used k1=0.9, b=0.4.

Building streams the corpus once: each passage is tokenized as it is read (bm25s's
`Tokenizer.streaming_tokenize`) and kept only as a compact int32 array of token ids, so neither
the passage texts nor lists of token strings are ever held for the whole corpus (221k passages:
~0.5 GB peak instead of ~0.8 GB, see docs/results/retrieval.md). Queries are tokenized the same
way (lowercase, `\\b\\w\\w+\\b`, English stopwords by default, no stemming), after the
history strategies' separators ("[SEP]") are removed (`BM25Config.strip`).

Scoring backend: bm25s's numba backend is ~5x faster than numpy on the 221k-passage corpus
(562 vs 118 top-100 queries/s) but compiles for seconds in every new process. The default
`backend="auto"` therefore starts on numpy and switches to numba, when it is importable, at the
first batch of `AUTO_NUMBA_BATCH` or more queries (an evaluation run), so one-off questions
never pay the compilation. numba is never required; the index files are the same for both.

Conversational queries: wrap the retriever in `retrievers.base.ConversationalRetriever` with any
history strategy; the shortcut inputs (question_only, last_answer, history_only, full) are then
one setting (`convqa retrieve --history NAME`).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
import shutil
import tempfile
from array import array
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.registry import RETRIEVERS
from convqa.types import Hit, Passage

from .base import Retriever

if TYPE_CHECKING:  # numpy is imported where scores are computed
    import numpy as np

PRESETS = {"default": (0.9, 0.4), "topiocqa": (0.9, 0.4), "qrecc": (0.82, 0.68)}
BACKENDS = ("auto", "numpy", "numba")
AUTO_NUMBA_BATCH = 64  # "auto" compiles numba for batches at least this large
META_FILE = "convqa_bm25.json"  # written last: its presence marks a finished index
_SPLITTER = r"(?u)\b\w\w+\b"  # bm25s's default; queries and passages must share it
_HASHED_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy",
                 "vocab.index.json")


@dataclass
class BM25Config:
    index: str = ""          # folder written by `BM25Retriever.build(...).save(folder)`
    # default|topiocqa|qrecc: sets k1 and b unless given explicitly. Left unset when loading,
    # the index's own parameters are used; set, they must match the index's.
    preset: str | None = None
    k1: float | None = None
    b: float | None = None
    stopwords: str = "en"
    backend: str = "auto"    # auto (numba for large batches, when importable) | numpy | numba
    # Removed from queries before tokenizing: the separators history strategies put between
    # utterances. Left in, "[SEP]" becomes the word "sep", once per utterance, and ranks the
    # few passages that contain "Sep." first for every long conversation. "" keeps everything.
    strip: str = r"\[(?:SEP|CLS)\]|</?s>"

    def __post_init__(self) -> None:
        try:
            re.compile(self.strip)
        except re.error as exc:
            raise ValueError(f"strip is not a valid regular expression ({exc})") from None

    def params(self) -> tuple[float, float]:
        preset = "default" if self.preset is None else self.preset
        if preset not in PRESETS:
            raise ConfigError(f"bm25: unknown preset '{preset}' (known: {', '.join(PRESETS)})")
        k1, b = PRESETS[preset]
        return (self.k1 if self.k1 is not None else k1, self.b if self.b is not None else b)

    def initial_backend(self) -> str:
        """The backend a model starts with: numba only when asked for by name."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"bm25: unknown backend '{self.backend}' "
                              f"(known: {', '.join(BACKENDS)})")
        if self.backend == "numba" and not has_numba():
            raise ConfigError("bm25: backend 'numba' needs the numba package (pip install numba); "
                              "use backend 'numpy' or 'auto'")
        return "numba" if self.backend == "numba" else "numpy"


def has_numba() -> bool:
    return importlib.util.find_spec("numba") is not None


def _use_numba(model) -> None:
    """What bm25s.BM25(backend="numba") sets up, on an existing model."""
    if model.backend != "numba":
        model.backend = "numba"
        model.activate_numba_scorer()


def _tokenizer(stopwords: str):
    from bm25s.tokenization import Tokenizer

    return Tokenizer(lower=True, splitter=_SPLITTER, stopwords=stopwords or None)


def _tokenize(texts: Sequence[str], stopwords: str) -> list[list[str]]:
    """Query tokens as strings (looked up in the index vocabulary by bm25s)."""
    import bm25s

    return bm25s.tokenize(list(texts), lower=True, token_pattern=_SPLITTER, return_ids=False,
                          stopwords=stopwords or None, show_progress=False)


def passage_text(passage: Passage) -> str:
    """What BM25 indexes for a passage: its title, then its text."""
    return f"{passage.title} {passage.text}" if passage.title else passage.text


@RETRIEVERS.register("bm25", config=BM25Config)
class BM25Retriever(Retriever):
    """Sparse lexical retriever.

    >>> from convqa.types import Passage
    >>> r = BM25Retriever.build([Passage("a", "Paris is the capital of France"),
    ...                          Passage("b", "Berlin is the capital of Germany")])
    >>> r.retrieve("capital of France", k=1)[0].passage_id
    'a'
    """

    def __init__(self, model, passage_ids: list[str], config: BM25Config,
                 corpus: dict[str, Any] | None = None, fingerprint: str | None = None):
        self.model = model
        self.passage_ids = passage_ids
        self.config = config
        self.corpus = corpus  # {"count", "checksum"} of the passage store it was built from
        self._fingerprint = fingerprint

    @classmethod
    def from_config(cls, config: BM25Config) -> "BM25Retriever":
        if not config.index:
            raise ConfigError("bm25: option 'index' (a folder made by `convqa index --bm25`) "
                              "is required")
        return cls.load(config.index, config)

    @classmethod
    def build(cls, passages: Iterable[Passage], config: BM25Config | None = None,
              show_progress: bool = False, corpus: dict[str, Any] | None = None) -> "BM25Retriever":
        """Index `passages` (streamed once). `corpus` is recorded in the saved metadata
        (`{"count", "checksum"}` of a passage store) so a mismatched store can be detected."""
        config = config or BM25Config()
        k1, b = config.params()
        backend = config.initial_backend()
        ids: list[str] = []
        docs: list[array] = []
        tokenizer = _tokenizer(config.stopwords)
        for token_ids in tokenizer.streaming_tokenize(_texts(passages, ids), update_vocab=True,
                                                      allow_empty=True):
            docs.append(array("i", token_ids))
        if not ids:
            raise ConvQAError("bm25: cannot index an empty corpus")
        vocab = tokenizer.get_vocab_dict()
        del tokenizer
        model = _lean_bm25_class()(k1=k1, b=b, backend="numpy")
        model.index((docs, vocab), show_progress=show_progress)
        del docs
        if backend == "numba":
            _use_numba(model)
        return cls(model, ids, config, corpus)

    @classmethod
    def build_from_store(cls, store, config: BM25Config | None = None,
                         show_progress: bool = False) -> "BM25Retriever":
        """Index a `PassageStore`, recording its size and checksum."""
        from tqdm.auto import tqdm

        passages: Iterable[Passage] = iter(store)
        if show_progress:
            passages = tqdm(passages, total=len(store), desc="BM25 index", unit=" psg")
        return cls.build(passages, config, show_progress=False,
                         corpus={"count": len(store), "checksum": store.checksum})

    def fingerprint(self) -> str:
        """Stable hash of what results depend on: the saved index (parameters, vocabulary,
        scores, passage ids) and the query-time `strip` pattern (not the backend)."""
        if self._fingerprint is None:
            raise ConvQAError("bm25: an index has a fingerprint only once saved")
        data = json.dumps({"index": self._fingerprint, "strip": self.config.strip})
        return "sha256:" + hashlib.sha256(data.encode()).hexdigest()

    def save(self, folder: str | Path) -> None:
        """Write atomically: a temporary sibling folder renamed into place."""
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            self.model.save(str(tmp), show_progress=False)
            fingerprint = _fingerprint(tmp, self.config, self.passage_ids)
            k1, b = self.config.params()  # recorded resolved, whatever presets become later
            config = dict(asdict(self.config), k1=k1, b=b, index="")
            meta = {"kind": "bm25", "config": config, "corpus": self.corpus,
                    "fingerprint": fingerprint, "passage_ids": self.passage_ids}
            (tmp / META_FILE).write_text(json.dumps(meta), encoding="utf-8")
            if folder.exists():
                if not (folder / META_FILE).exists():
                    raise ConvQAError(f"{folder}: exists and is not a BM25 index; not replacing it")
                shutil.rmtree(folder)
            tmp.rename(folder)
            self._fingerprint = fingerprint
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @classmethod
    def load(cls, folder: str | Path, config: BM25Config | None = None) -> "BM25Retriever":
        """Open a saved index (memory-mapped). `config` may choose the backend; its k1/b must
        match the index's."""
        import bm25s

        folder = Path(folder)
        meta_path = folder / META_FILE
        if not folder.is_dir():
            raise DataError("BM25 index not found (build it with `convqa index --bm25`)", folder)
        if not meta_path.exists():
            raise DataError("not a convqa BM25 index (no convqa_bm25.json)", folder)
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            known = {f.name for f in fields(BM25Config)}
            saved = BM25Config(**{k: v for k, v in meta["config"].items() if k in known})
            passage_ids = meta["passage_ids"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
            raise DataError(f"damaged BM25 metadata ({type(exc).__name__}: {exc})",
                            meta_path) from None
        explicit = config is not None and (config.preset, config.k1, config.b) != (None,) * 3
        if explicit and config.params() != saved.params():
            raise ConfigError(f"bm25: index {folder} was built with k1,b={saved.params()}, "
                              f"config asks for {config.params()}; rebuild the index")
        if config is not None:  # query-time options come from the caller
            saved.backend, saved.strip = config.backend, config.strip
        saved.index = str(folder)
        try:
            model = bm25s.BM25.load(str(folder), mmap=True, show_progress=False,
                                    backend=saved.initial_backend())
        except (OSError, ValueError) as exc:
            raise DataError(f"damaged BM25 index ({exc})", folder) from None
        if model.scores["num_docs"] != len(passage_ids):
            raise DataError(f"index has {model.scores['num_docs']} documents but "
                            f"{len(passage_ids)} passage ids (damaged?)", folder)
        fingerprint = meta.get("fingerprint") or _fingerprint(folder, saved, passage_ids)
        return cls(model, passage_ids, saved, meta.get("corpus"), fingerprint)

    @classmethod
    def for_store(cls, store, index: str | Path | None = None) -> "BM25Retriever":
        """The saved index at `index` when that folder exists (checked to belong to `store`),
        else one built from `store` in memory: what the example builders mine negatives with."""
        if index is not None and Path(index).is_dir():
            retriever = cls.load(index)
            retriever.check_store(store)
            return retriever
        return cls.build_from_store(store)

    def check_store(self, store) -> None:
        """ConvQAError unless this index was built from `store` (same size and checksum)."""
        if len(store) != len(self.passage_ids):
            raise ConvQAError(f"bm25: index has {len(self.passage_ids)} passages but the store "
                              f"{store.path} has {len(store)}: they do not belong together")
        if self.corpus and self.corpus.get("checksum") not in (None, store.checksum):
            raise ConvQAError(f"bm25: index was built from another corpus than {store.path} "
                              f"(checksum {self.corpus['checksum']} vs {store.checksum})")

    def retrieve_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        """Top-k per query, only passages sharing a term with it (score > 0): a query of
        stopwords only, or of words absent from the corpus, gets no hits."""
        if k < 1:
            raise ConfigError(f"bm25: k must be at least 1, got {k}")
        k = min(k, len(self.passage_ids))
        words = self._known_words(queries)
        results: list[list[Hit]] = [[] for _ in queries]
        searchable = [i for i, w in enumerate(words) if w]
        if not searchable:
            return results
        if (self.config.backend == "auto" and len(searchable) >= AUTO_NUMBA_BATCH
                and has_numba()):
            _use_numba(self.model)
        known = [words[i] for i in searchable]
        docs, scores = self.model.retrieve(known, k=k, show_progress=False)
        for row, i in enumerate(searchable):
            rank = 0
            for doc, score in zip(docs[row], scores[row]):
                if score <= 0:
                    break
                rank += 1
                results[i].append(Hit(self.passage_ids[int(doc)], float(score), rank))
        return results

    def all_scores(self, queries: Sequence[str]) -> list[np.ndarray | None]:
        """Per query, the BM25 score of every passage (float32, in passage order), or None
        for a query with no word of the index's vocabulary."""
        import numpy as np

        return [np.asarray(self.model.get_scores(words), dtype=np.float32) if words else None
                for words in self._known_words(queries)]

    def _known_words(self, queries: Sequence[str]) -> list[list[str]]:
        """Each query's words that the index knows, after `strip` and tokenizing."""
        if self.config.strip:
            pattern = re.compile(self.config.strip)
            queries = [pattern.sub(" ", query) for query in queries]
        vocab = self.model.vocab_dict
        return [[w for w in words if w and w in vocab]
                for words in _tokenize(queries, self.config.stopwords)]


def _lean_csc(data, rows, cols, shape):
    """bm25s's CSC assembly with a stable sort by column alone instead of an argsort of packed
    int64 (column, row) keys: the same arrays (scores arrive in row order, one entry per
    (row, column)), without three corpus-sized int64 temporaries (~250 MB on 221k passages)."""
    import numpy as np

    indptr = np.zeros(shape[1] + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=shape[1]), out=indptr[1:])
    order = np.argsort(cols, kind="stable")
    return data[order], rows[order], indptr


@functools.lru_cache(maxsize=None)
def _lean_bm25_class():
    import bm25s

    class LeanBM25(bm25s.BM25):
        _np_csc = staticmethod(_lean_csc)

    return LeanBM25


def _texts(passages: Iterable[Passage], ids: list[str]) -> Iterator[str]:
    """Passage texts, one at a time, recording each id as it goes by."""
    for passage in passages:
        ids.append(passage.id)
        yield passage_text(passage)


def _fingerprint(folder: Path, config: BM25Config, passage_ids: list[str]) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps({"params": config.params(), "stopwords": config.stopwords,
                              "splitter": _SPLITTER}).encode())
    for name in _HASHED_FILES:
        with open(folder / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    for pid in passage_ids:
        digest.update(pid.encode("utf-8") + b"\0")
    return "sha256:" + digest.hexdigest()
