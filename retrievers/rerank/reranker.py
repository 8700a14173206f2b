"""The cross-encoder as a pipeline component: `RERANKERS.build({"name": "cross_encoder", ...})`,
with the shipped model (offline) or any reranker folder (`convqa train reranker`):

    >>> from convqa.registry import RERANKERS
    >>> from convqa.types import Hit, Passage, Turn
    >>> reranker = RERANKERS.build({"name": "cross_encoder", "model": "convqa-reranker"})
    >>> passages = {p.id: p for p in [
    ...     Passage("2001#3", "The film received diverse critical responses and is now "
    ...             "regarded as one of the greatest films ever made.", "2001: A Space Odyssey"),
    ...     Passage("2001#0", "2001: A Space Odyssey is a 1968 epic science fiction film "
    ...             "produced and directed by Stanley Kubrick.", "2001: A Space Odyssey")]}
    >>> hits = [Hit("2001#3", 0.9, 1), Hit("2001#0", 0.8, 2)]   # a retriever's ranking
    >>> history = [Turn("Who directed 2001: A Space Odyssey?", "Stanley Kubrick")]
    >>> reranked = reranker.rerank_turn("When was it released?", history, hits, passages)
    >>> [(hit.passage_id, hit.retriever_rank) for hit in reranked]
    [('2001#0', 2), ('2001#3', 1)]

`rerank(query, hits, passages)` does the same for a query text already formatted; `passages`
is a mapping from passage id, the hits' passages in order, or a passage store.

Only the retriever's first `top_n` hits are rescored, and only they are returned, best first by
the reranker's logit (ties keep the retriever's order); each keeps the retriever's score and
rank. With `rescore_within` only those of them whose retriever score is close to the best are
rescored and returned (at least the first `rescore_at_least`; retrievers/rerank/shortlist.py),
and with `rescore_word_matches: N` also the N hits left out whose words best match the question
and the one before it (retrievers/rerank/word_matches.py). `rescore_pairs: N` instead rescores
N hits on every turn, the first `rescore_at_least` and those a logistic model recorded in the
folder for the retriever ranks best (retrievers/rerank/learned_shortlist.py).
The query of `rerank_turn` is the conversation formatted by a history strategy: by default the
one the model was trained with (recorded in its folder), else the reader's (current question
first). Scoring runs under `torch.inference_mode` in batches of `batch_size` pairs of similar
length, in the precision `precision` names: `auto` (the default) times fp32, bf16 autocast and
int8 on the first pairs scored and keeps the fastest whose ranking of them agrees with fp32's
(convqa/precision.py).

The final score keeps some of the retriever's (retrievers/rerank/fusion.py): logit + w * the
retriever's standardised score, w the `retriever_weight` option, else the weight the model's
folder records for the retriever it follows (`for_retriever`, told by the pipeline and eval
rows), else 0 (the reranker alone).

A `second_stage` (another cross-encoder's spec, e.g. `{model: convqa-reranker-large, top_n:
5}`) reorders this stage's first `top_n` by its own logit, and only those come out: a slow
model reads the few passages a fast one kept out of many (a cascade). Their `score` is the
second stage's logit; ties keep the first stage's order. A turn whose first stage leads by at
least the second stage's `skip_margin` skips it (retrievers/rerank/cascade.py): its first
`top_n` come out in the first stage's order, with its scores. `skip_margin: auto` (the default)
is the margin the first stage's folder records for this second stage and retriever (`convqa
train reranker-cascade`; none recorded: never skip), `never` always runs it, a number sets it.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from convqa.errors import ConfigError, DataError
from convqa.precision import (MeasuredPrecision, PrecisionChoice, PrecisionOnFirstUse, autocast,
                              choose_precision, normalize_precision, prepare)
from convqa.registry import RERANKERS, build_dataclass
from convqa.types import Hit, Passage, RerankedHit, Turn

from .cascade import AUTO, NEVER, cascade_key, check_skip_margin, continue_below, skips
from .fusion import fuse, is_weight, retriever_key
from .learned_shortlist import hit_features, learned_shortlist
from .model import CrossEncoder
from .shortlist import check_within, shortlist
from .word_matches import match_text, passage_match_scores

# fp32's pairwise order of the probe pairs that another precision must keep
ORDER_AGREEMENT = 0.95
PROBE_PAIRS = 8


@dataclass
class CrossEncoderRerankerOptions:
    model: str = ""                     # a folder made by `convqa train reranker`
    top_n: int = 20                     # retriever hits rescored (and returned)
    history: str | dict | None = None   # None: the model's training strategy, else the reader's
    batch_size: int = 32                # pairs per forward pass
    max_length: int | None = None       # tokens per pair; None: the model's setting
    precision: str = "auto"             # auto (measured on the first pairs) | fp32 | bf16 | int8
    device: str = "auto"                # auto (GPU if there is one) | cpu | cuda | cuda:N
    retriever_weight: float | None = None  # None: the folder's weight for the retriever, else 0
    second_stage: str | dict | None = None  # a cross_encoder spec (or model) that reorders
    #                                         this stage's first top_n of its own; None: none
    skip_margin: float | str = AUTO     # as a second stage: the first stage's lead at which a
    #                                     turn skips it; auto (calibrated) | never | a number
    keep_rest: bool = False             # as a second stage: the first stage's hits after the
    #                                     top_n it reorders follow them (a reader may read on)
    rescore_within: float | None = None  # rescore only hits whose standardised retriever score
    #                                      is within this of the best (shortlist.py); None: all
    rescore_at_least: int = 5           # with rescore_within: the first hits always rescored
    rescore_word_matches: int = 0       # with rescore_within: also the hits left out whose
    #                                     words best match the question, this many (word_matches.py)
    rescore_pairs: int | None = None    # rescore this many hits a turn: the first rescore_at_least
    #                                     and the others the folder's learned shortlist ranks best
    #                                     for the retriever (learned_shortlist.py); None: off

    def __post_init__(self) -> None:
        weight = self.retriever_weight
        if weight is not None and not is_weight(weight):
            raise ValueError(f"retriever_weight must be a number >= 0 or null, got {weight!r}")
        self.rescore_within = check_within(self.rescore_within)
        if self.rescore_pairs is not None and self.rescore_within is not None:
            raise ValueError("rescore_pairs and rescore_within are two ways to choose the hits "
                             "rescored: set one of them")
        for name in ("top_n", "batch_size", "max_length", "rescore_at_least", "rescore_pairs"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        matches = self.rescore_word_matches
        if isinstance(matches, bool) or not isinstance(matches, int) or matches < 0:
            raise ValueError(f"rescore_word_matches must be an integer >= 0, got {matches!r}")
        self.precision = normalize_precision(self.precision, "reranker precision")
        self.skip_margin = check_skip_margin(self.skip_margin)
        if not isinstance(self.keep_rest, bool):
            raise ValueError(f"keep_rest must be true or false, got {self.keep_rest!r}")
        if isinstance(self.second_stage, str):
            self.second_stage = {"model": self.second_stage}
        if self.second_stage is not None:
            if not isinstance(self.second_stage, dict):
                raise ValueError("second_stage must be a reranker spec (a mapping with 'model') "
                                 f"or a model, got {self.second_stage!r}")
            spec = {k: v for k, v in self.second_stage.items() if k != "name"}
            if self.second_stage.get("name", "cross_encoder") != "cross_encoder":
                raise ValueError("second_stage must be a cross_encoder, got "
                                 f"{self.second_stage.get('name')!r}")
            if "second_stage" in spec:
                raise ValueError("second_stage cannot have a second_stage of its own")
            try:  # its names, types and values, as the registry checks the first stage's
                build_dataclass(CrossEncoderRerankerOptions, spec, "second_stage")
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
            if spec.get("rescore_within") is not None or spec.get("rescore_word_matches") \
                    or spec.get("rescore_pairs") is not None:
                raise ValueError("rescore_within, rescore_word_matches and rescore_pairs belong "
                                 "to the first stage (they choose among the retriever's hits), "
                                 "not second_stage")
            self.second_stage = {"top_n": 5, **spec}


def order_agreement(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Share of pairs of candidates that `other` orders as `reference` does (1: same ranking)."""
    ref = reference.float().flatten()
    out = other.float().flatten()
    if ref.numel() < 2:
        return 1.0
    upper = torch.triu(torch.ones(len(ref), len(ref), dtype=torch.bool), diagonal=1)
    same = torch.sign(ref[:, None] - ref[None, :]) == torch.sign(out[:, None] - out[None, :])
    return float(same[upper].float().mean())


@RERANKERS.register("cross_encoder", config=CrossEncoderRerankerOptions)
class CrossEncoderReranker(MeasuredPrecision):
    """Rescores (query, passage) pairs with a `CrossEncoder` and reorders the hits."""

    def __init__(self, model: CrossEncoder, options: CrossEncoderRerankerOptions | None = None):
        from convqa.history import model_history_strategy
        from readers.extractive.model import DEFAULT_HISTORY

        self.options = options or CrossEncoderRerankerOptions()
        self.model = model
        try:
            self.config = dataclasses.replace(
                model.config, **({"max_length": self.options.max_length}
                                 if self.options.max_length else {}))
        except ValueError as exc:
            raise ConfigError(f"reranker 'cross_encoder': {exc}") from None
        self.history = model_history_strategy(self.options.history or model.config.history
                                              or DEFAULT_HISTORY, model)
        self._precision = PrecisionOnFirstUse(self.options.precision)
        self.retriever: str | None = None
        self.second: CrossEncoderReranker | None = None   # the second_stage, built by from_config
        self._second_fingerprint: str | None = None

    @property
    def retriever_weight(self) -> float:
        """The weight of the retriever's standardised score in the final score."""
        if self.options.retriever_weight is not None:
            return float(self.options.retriever_weight)
        weights = getattr(self.model, "retriever_weights", None) or {}
        return float(weights.get(self.retriever, 0.0)) if self.retriever else 0.0

    @property
    def returned(self) -> int:
        """How many hits a turn gets back at most: `top_n`, or the second stage's when it
        keeps fewer (what a reader after it can read)."""
        if self.second is None or self.second.options.keep_rest:
            return int(self.options.top_n)
        return min(int(self.options.top_n), int(self.second.options.top_n))

    @property
    def returned_by(self) -> str:
        """The option that sets `returned`, as a pipeline config names it."""
        if self.second is not None and not self.second.options.keep_rest \
                and self.second.options.top_n <= self.options.top_n:
            return "reranker.second_stage.top_n"
        return "reranker.top_n"

    @property
    def read_deeper(self) -> str:
        """How a pipeline gets more passages than `returned` from this reranker."""
        if self.returned_by == "reranker.second_stage.top_n":
            return ("raise reranker.second_stage.top_n, or set reranker.second_stage.keep_rest "
                    "to read the first stage's next passages after them")
        return f"raise {self.returned_by}"

    @property
    def skip_margin(self) -> float | None:
        """The first stage's lead at which a turn skips the second stage (None: never; also
        None without a second stage)."""
        if self.second is None:
            return None
        option = self.second.options.skip_margin
        if option == NEVER:
            return None
        if option != AUTO:
            return float(option)
        margins = getattr(self.model, "cascade_margins", None) or {}
        if not margins:
            return None
        if self._second_fingerprint is None:
            self._second_fingerprint = self.second.model.known_fingerprint()
        return margins.get(cascade_key(self.retriever, self._second_fingerprint))

    @property
    def shortlist_weights(self) -> dict[str, float]:
        """The learned shortlist's weights for the retriever followed (`rescore_pairs`); a
        clear error when the folder has none for it."""
        recorded = getattr(self.model, "shortlist_weights", None) or {}
        if self.retriever in recorded:
            return recorded[self.retriever]
        known = ", ".join(sorted(recorded)) or "none"
        raise ConfigError(f"reranker {self.options.model}: rescore_pairs needs the learned "
                          f"shortlist's weights for retriever {self.retriever or '(unnamed)'} "
                          f"and its folder has them for: {known} (fit them with `python -m "
                          "convqa.front.tools.rescore_gaps --learn --write`, or use "
                          "rescore_within)")

    def for_retriever(self, spec: Any) -> "CrossEncoderReranker":
        """Follow the retriever `spec` (a name or spec; `fusion.retriever_key`): its calibrated
        weight applies unless the options set one. Returns self."""
        self.retriever = retriever_key(spec)
        return self

    @classmethod
    def from_config(cls, options: CrossEncoderRerankerOptions) -> "CrossEncoderReranker":
        if not options.model:
            raise ConfigError("reranker 'cross_encoder': option 'model' (a folder made by "
                              "`convqa train reranker`) is required")
        for name, default in (("skip_margin", AUTO), ("keep_rest", False)):
            if options.second_stage is not None and getattr(options, name) != default:
                raise ConfigError(f"reranker 'cross_encoder': {name} belongs in second_stage "
                                  "(the stage that reorders the first one's best), not beside "
                                  "it")
        model = CrossEncoder.from_pretrained(options.model)
        built = cls(model.for_inference(options.device, "reranker 'cross_encoder'"), options)
        if options.second_stage is not None:
            second = build_dataclass(CrossEncoderRerankerOptions,
                                     {"device": options.device, **options.second_stage,
                                      "retriever_weight": 0.0},
                                     "reranker 'cross_encoder': second_stage")
            built.second = cls.from_config(second)
        return built

    @classmethod
    def from_model(cls, model: CrossEncoder, **options: Any) -> "CrossEncoderReranker":
        """Wrap a model in memory (e.g. during training) with `options`."""
        return cls(model, CrossEncoderRerankerOptions(**options))

    def fingerprint(self) -> str:
        """The weights and every setting that changes the ranking (for result caches)."""
        import hashlib
        import json

        settings = {"model": self.model.fingerprint(), "config": dataclasses.asdict(self.config),
                    "history": self.history.to_dict(), "top_n": self.options.top_n,
                    "precision": self.options.precision,
                    **({"retriever_weight": self.retriever_weight}
                       if self.retriever_weight else {}),
                    **({"second_stage": self.second.fingerprint()} if self.second else {}),
                    **({"skip_margin": self.skip_margin}
                       if self.skip_margin is not None else {}),
                    **({"keep_rest": True} if self.options.keep_rest else {}),
                    **({"rescore_within": self.options.rescore_within,
                        "rescore_at_least": self.options.rescore_at_least}
                       if self.options.rescore_within is not None else {}),
                    **({"rescore_word_matches": self.options.rescore_word_matches}
                       if self.options.rescore_within is not None
                       and self.options.rescore_word_matches else {}),
                    **({"rescore_pairs": self.options.rescore_pairs,
                        "rescore_at_least": self.options.rescore_at_least,
                        "shortlist_weights": self.shortlist_weights}
                       if self.options.rescore_pairs is not None else {})}
        text = json.dumps(settings, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    # -- the API ----------------------------------------------------------------------------
    def query_text(self, question: str, history: Sequence[Turn] = ()) -> str:
        return self.history.format(question, list(history))

    def rerank_turn(self, question: str, history: Sequence[Turn], hits: Sequence[Hit],
                    passages: Any, timings: dict[str, float] | None = None
                    ) -> list[RerankedHit]:
        """`rerank` with the query formatted from the conversation (each stage its way). With a
        second stage and a `timings` dict, its time in ms is written there under "second" (0 on
        a turn that skips it), so a pipeline can tell the stages' costs apart."""
        first = self._rerank_first(self.query_text(question, history), hits, passages,
                                   match_text(question, history))
        if self.second is None:
            return first
        return self._cascade(first, self.second.query_text(question, history), hits, passages,
                             timings)

    def reorder(self, query: str, ranked: Sequence[RerankedHit], passages: Any
                ) -> list[RerankedHit]:
        """The first `top_n` of `ranked` (a first stage's output) by this model's logit alone,
        ties in their order; `score` becomes the logit, the retriever's score and rank stay."""
        top = list(ranked)[:self.options.top_n]
        if not top:
            return []
        scores = self.score(query, _passages_of(top, passages, len(top)))
        order = sorted(range(len(top)), key=lambda i: (-scores[i], i))
        return [RerankedHit(top[i].passage_id, scores[i], rank, top[i].retriever_score,
                            top[i].retriever_rank) for rank, i in enumerate(order, start=1)]

    def rerank(self, query: str, hits: Sequence[Hit], passages: Any) -> list[RerankedHit]:
        """The first `top_n` of `hits` rescored on (query, passage) (and fused with their
        retriever scores, `retriever_weight`), best first, then reordered by the second stage
        if there is one (on the same query) and the first stage's lead is under its margin.
        `passages`: the hits' passages in the same order, a mapping from passage id, or a
        passage store (anything with `get(passage_id)`)."""
        first = self._rerank_first(query, hits, passages, query)
        if self.second is None:
            return first
        return self._cascade(first, query, hits, passages)

    def _cascade(self, first: list[RerankedHit], second_query: str, hits: Sequence[Hit],
                 passages: Any, timings: dict[str, float] | None = None) -> list[RerankedHit]:
        """What a cascade returns after its first stage ranked `first`: the second stage's order
        of the first stage's best, or the first stage's own on a turn that skips it, and with
        `keep_rest` the first stage's other hits after them. `timings` (when given) gets the
        second stage's ms under "second" (0 on a skipped turn)."""
        if timings is not None:
            timings["second"] = 0.0
        if skips(first, self.skip_margin):
            head = first[:self.second.options.top_n]
        else:
            start = time.perf_counter()
            head = self.second.reorder(second_query, first, _by_id(hits, passages))
            if timings is not None:
                timings["second"] = (time.perf_counter() - start) * 1000
        if not self.second.options.keep_rest:
            return head
        return head + continue_below(head, first)

    def _rerank_first(self, query: str, hits: Sequence[Hit], passages: Any,
                      match_query: str) -> list[RerankedHit]:
        if not isinstance(query, str):
            raise DataError(f"expected the query text, got {type(query).__name__}",
                            field="query")
        top = list(hits)[:self.options.top_n]
        texts = _passages_of(top, passages, len(hits))
        if not top:
            return []
        retrieved = [float(hit.score) for hit in top]
        if self.options.rescore_pairs is not None:
            features = hit_features(retrieved, passage_match_scores(match_query, texts),
                                    [hit.passage_id for hit in top])
            kept = learned_shortlist(features, self.shortlist_weights,
                                     self.options.rescore_pairs, self.options.rescore_at_least)
        else:
            kept = shortlist(retrieved, self.options.rescore_within,
                             self.options.rescore_at_least, self.options.rescore_word_matches,
                             lambda: passage_match_scores(match_query, texts))
        logits = self.score(query, [texts[i] for i in kept])
        order = sorted(range(len(kept)), key=lambda j: (-logits[j], kept[j]))
        return fuse([RerankedHit(top[kept[j]].passage_id, logits[j], rank, retrieved[kept[j]],
                                 int(top[kept[j]].rank)) for rank, j in enumerate(order, start=1)],
                    self.retriever_weight, population=retrieved)

    def score(self, query: str, passages: Sequence[Passage]) -> list[float]:
        """The relevance logit of (query, passage) for each passage, in their order; a
        passage's score does not depend on the others scored with it (in fp32)."""
        return self.score_pairs([query] * len(passages), passages)

    def score_pairs(self, queries: Sequence[str], passages: Sequence[Passage]) -> list[float]:
        """Logits of the pairs (queries[i], passages[i]), scored `batch_size` at a time in
        order of length, so a batch is padded to little more than its own pairs."""
        if len(queries) != len(passages):
            raise DataError(f"{len(queries)} queries for {len(passages)} passages",
                            field="passages")
        if not passages:
            return []
        order = sorted(range(len(passages)), key=lambda i: -(len(queries[i]) +
                                                              len(passages[i].title) +
                                                              len(passages[i].text)))
        was_training = self.model.training
        self.model.eval()
        try:
            probe = order[:PROBE_PAIRS]
            precision = self._precision.resolve(lambda: self._choose_precision(
                [queries[i] for i in probe], [passages[i] for i in probe]))
            scores = [0.0] * len(passages)
            size = self.options.batch_size
            for begin in range(0, len(order), size):
                part = order[begin:begin + size]
                logits = self._logits([queries[i] for i in part], [passages[i] for i in part],
                                      precision)
                for i, value in zip(part, logits.tolist()):
                    scores[i] = float(value)
        finally:
            self.model.train(was_training)
        return scores

    # -- computation ------------------------------------------------------------------------
    def _logits(self, queries: Sequence[str], passages: Sequence[Passage],
                precision: str) -> torch.Tensor:
        tensors = self.model.encode_pairs(queries, passages, self.config.max_length)
        model = prepare(self.model, precision)
        with torch.inference_mode(), autocast(precision, self.model.device):
            return model(**self.model.model_inputs(tensors)).float().cpu()

    def _choose_precision(self, queries: Sequence[str], passages: Sequence[Passage]
                          ) -> PrecisionChoice:
        return choose_precision(
            lambda precision: self._logits(queries, passages, precision), order_agreement,
            threshold=ORDER_AGREEMENT, what="cross-encoder reranker", device=self.model.device,
            remember=self.model.fingerprint())


def _by_id(hits: Sequence[Hit], passages: Any) -> Any:
    """`passages` as something a later stage can look its hits up in: a list in hit order
    becomes a mapping from passage id (a mapping or store is kept)."""
    if isinstance(passages, (list, tuple)):
        return {hit.passage_id: passage for hit, passage in zip(hits, passages)}
    return passages


def _passages_of(hits: Sequence[Hit], passages: Any, total: int) -> list[Passage]:
    """The passage of each hit, from a list in hit order, a mapping or a store."""
    if isinstance(passages, Mapping) or (hasattr(passages, "get")
                                         and not isinstance(passages, (list, tuple))):
        found = []
        for hit in hits:
            try:
                passage = passages.get(hit.passage_id)
            except (KeyError, DataError):
                passage = None
            if passage is None:
                raise DataError(f"no passage for hit {hit.passage_id!r}", field="passages")
            found.append(passage)
        return found
    passages = list(passages)
    if len(passages) != total:
        raise DataError(f"{len(passages)} passages for {total} hits (give them in hit order, "
                        "or a mapping from passage id)", field="passages")
    for hit, passage in zip(hits, passages):
        if not isinstance(passage, Passage):
            raise DataError(f"expected a Passage for hit {hit.passage_id!r}, got "
                            f"{type(passage).__name__}", field="passages")
        if passage.id != hit.passage_id:
            raise DataError(f"passage {passage.id!r} given for hit {hit.passage_id!r} (give "
                            "them in hit order)", field="passages")
    return passages[:len(hits)]
