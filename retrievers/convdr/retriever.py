"""The `convdr` retriever: a ConvDR student's query tower over its TEACHER's dense index.

    retriever: {name: convdr, model: runs/convdr/model, index: indexes/minilm}
    history: questions_only        # the student's input (ConvDR's own)

The shipped answer-passage query tower is such a student, over DPR-IHN's index (here the
embedded collection's, built in seconds from the vectors the package ships):

    >>> import tempfile
    >>> from convqa.front.embedded import default_config, ensure_embedded
    >>> from convqa.registry import RETRIEVERS
    >>> with tempfile.TemporaryDirectory() as cache:
    ...     _ = ensure_embedded(cache, progress=False)
    ...     dpr_ihn = default_config(cache)["retriever"]["index"]
    ...     tower = RETRIEVERS.build({"name": "convdr", "model": "convqa-dpr-ihn-answer",
    ...                               "index": dpr_ihn})
    ...     [hit.passage_id for hit in tower.retrieve(
    ...         "Who directed 2001: A Space Odyssey? [SEP] Stanley Kubrick [SEP] When was it "
    ...         "released?", k=2)]
    ['2001:_A_Space_Odyssey#0', 'Stanley_Kubrick#0']

`index` is the folder `convqa index --dense --model TEACHER` wrote; it is used as it is (never
re-encoded, never written). Loading checks that the index's recorded encoder fingerprint is the
student's recorded teacher fingerprint (one-line ConvQAError otherwise), that the dimensions
agree, and that the passage store is the one the index was built over. Query encoding,
precision (`auto` by default) and search are the `dense` retriever's.

Heavy libraries are imported on first use, so registering this retriever costs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from convqa.errors import ConfigError, ConvQAError
from convqa.registry import RETRIEVERS

from ..dense.retriever import DenseRetriever


@dataclass
class ConvDRRetrieverConfig:
    model: str = ""           # ConvDR folder (`convqa train convdr` writes OUT/model)
    index: str = ""           # the TEACHER's dense index folder
    passages: str = ""        # passage store; default: the one the index records
    teacher: str = ""         # teacher id/path if it moved; default: the one the model records
    batch_size: int = 16
    device: str = "cpu"       # cpu | cuda | cuda:N | auto
    precision: str = "auto"   # auto (measured on the first queries) | fp32 | bf16 | int8
    nprobe: int | None = None
    ef_search: int | None = None
    mmap: bool = False


def check_teacher_index(model, index, store=None) -> None:
    """ConvQAError unless `index` was built by `model`'s teacher (and over `store`)."""
    where = f"dense index (built by encoder {index.meta.get('encoder')!r}, fingerprint " \
            f"{index.fingerprint})"
    if index.fingerprint != model.teacher_fingerprint:
        raise ConvQAError(f"convdr: {where} was not built by the student's teacher "
                          f"{model.config.teacher!r} (fingerprint {model.teacher_fingerprint}); "
                          f"use the teacher's index (`convqa index --dense --model "
                          f"{model.config.teacher}`)")
    if index.dim != model.dim:
        raise ConvQAError(f"convdr: {where} has {index.dim}-d vectors, the student makes "
                          f"{model.dim}-d vectors")
    if store is not None:
        index.check(corpus_checksum=store.checksum)


@RETRIEVERS.register("convdr", config=ConvDRRetrieverConfig)
class ConvDRRetriever(DenseRetriever):
    """Dense retrieval with the student's query embeddings and the teacher's passage index."""

    def __init__(self, model, index, store, config: ConvDRRetrieverConfig | None = None):
        self.config = config or ConvDRRetrieverConfig()
        check_teacher_index(model, index, store)
        self.convdr = model.eval()
        self.model = model.as_dual_encoder().eval()  # student query tower + teacher passages
        self.index = index
        self.store = store
        index.set_search_params(self.config.nprobe, self.config.ef_search)
        self._init_precision()
        self._fingerprint: str | None = None

    @classmethod
    def from_config(cls, config: ConvDRRetrieverConfig) -> "ConvDRRetriever":
        from convqa.corpus import PassageStore

        from ..dense.index import DenseIndex
        from .model import ConvDR

        if not config.model:
            raise ConfigError("convdr: option 'model' (a folder made by `convqa train convdr`) "
                              "is required")
        if not config.index:
            raise ConfigError("convdr: option 'index' (the teacher's dense index, made by "
                              "`convqa index --dense --model TEACHER`) is required")
        if isinstance(config.batch_size, bool) or config.batch_size < 1:
            raise ConfigError(f"convdr: batch_size must be >= 1, got {config.batch_size}")
        index = DenseIndex.load(config.index, mmap=config.mmap)
        passages = config.passages or index.meta.get("passages")
        if not passages:
            raise ConfigError(f"convdr: index {config.index} records no passage store; "
                              "set 'passages'")
        model = ConvDR.from_pretrained(config.model, teacher=config.teacher or None)
        check_teacher_index(model, index)  # before moving weights or opening the store
        model.for_inference(config.device, "convdr")
        return cls(model, index, PassageStore.open(Path(passages)), config)

    def fingerprint(self) -> str:
        """Student, teacher index and corpus: what a cached run depends on."""
        if self._fingerprint is None:
            self._fingerprint = (f"convdr:{self.convdr.fingerprint()}:{self.index.fingerprint}:"
                                 f"{self.store.checksum}")
        return self._fingerprint
