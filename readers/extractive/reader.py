"""The extractive reader as a pipeline component: `READERS.build({"name": "extractive", ...})`,
with the shipped model (offline) or any reader folder (`convqa train reader`):

    >>> from convqa.registry import READERS
    >>> from convqa.types import Passage, Turn
    >>> reader = READERS.build({"name": "extractive", "model": "convqa-reader"})
    >>> film = Passage("2001#0", "2001: A Space Odyssey is a 1968 epic science fiction film "
    ...                "produced and directed by Stanley Kubrick. It follows a voyage to "
    ...                "Jupiter.", "2001: A Space Odyssey")
    >>> answer = reader.read("Who directed 2001: A Space Odyssey?", [], [film])
    >>> answer.text, answer.passage_id, film.text[answer.start:answer.end]
    ('Stanley Kubrick', '2001#0', 'Stanley Kubrick')
    >>> history = [Turn("Who directed 2001: A Space Odyssey?", "Stanley Kubrick")]
    >>> reader.read("Where does the voyage go?", history, [film], always_answer=True).text
    'Jupiter'

The query is the conversation formatted by a history strategy: by default the one the reader
was trained with (recorded in its folder), else current-first with 64 tokens. A LoRA reader is
merged on load (same answers, faster). Inference runs under `torch.inference_mode`, in batches
of `batch_size` windows, in the precision `precision` names: `auto` (the default) times fp32,
bf16 autocast and int8 on the first passages read and keeps the fastest whose best start and end
tokens agree with fp32's (convqa/precision.py); bf16 is ~2x faster than fp32 on CPUs with
AVX512-BF16 and several times slower on AVX2-only CPUs, so nothing is assumed.

With `fusion: {selection: 1, span: 0.1, retriever: 0.5}` the passage to answer from is chosen
by a weighted sum of the reader's selection logit, its span score and the retriever's evidence
(decode.py); the retriever's scores come with `read(..., scores=[hit.score, ...])`, as the
pipeline and `convqa eval answers` pass them (`reads_retriever_scores`).

Options left unset take the reader folder's decoding defaults (decoding.py): its fusion (unless
a `strategy` is given, which then decides alone), strategy and answer length, so a spec naming
only the model reads as the model was calibrated to. With a calibrated confidence in the folder
the reader answers "no answer in the collection" (`Answer.no_answer`, its best passage kept as
evidence) below the folder's threshold (or `no_answer_threshold`); `always_answer: true`, or
`read(..., always_answer=True)` as evaluation on answerable questions does, never abstains.

With `stop_when_sure` (the folder's, chosen on training turns, or a number) a read of several
passages reads the first alone and stops when the one-passage confidence of its answer reaches
that value (and, unless the reader always answers, its one-passage no-answer threshold);
otherwise it reads the others and answers from all of them exactly as without the option. A
turn whose best passage plainly answers then costs one passage instead of k.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from convqa.errors import ConfigError
from convqa.precision import (MeasuredPrecision, PrecisionChoice, PrecisionOnFirstUse, autocast,
                              choose_precision, normalize_precision, prepare)
from convqa.registry import READERS
from convqa.types import Answer, Passage, Turn

from .decode import (STRATEGIES, Fusion, PassageSpan, choice_answer, choose_span,
                     passage_spans)
from .decoding import Decoding, NoAnswer, confidence_features
from .inputs import ReaderFeatures, build_features
from .model import DEFAULT_HISTORY, ExtractiveReader

# The reader agrees with fp32 when at least this share of the probe windows keeps the same best
# start token and the same best end token.
SPAN_AGREEMENT = 0.9
PROBE_WINDOWS = 4


@dataclass
class ExtractiveReaderOptions:
    model: str = ""                     # reader folder (`convqa train reader`) or HF QA checkpoint
    history: str | dict | None = None   # None: the reader's training strategy, else current_first
    strategy: str | None = None         # best_passage (DPR) | global; None: the folder's, else
                                        # best_passage
    max_answer_length: int | None = None  # tokens; None: the folder's decoding, else the model's
    max_length: int | None = None       # tokens per window; None: the model's setting
    batch_size: int = 16                # windows per forward pass
    precision: str = "auto"             # auto (measured on the first read) | fp32 | bf16 | int8
    device: str = "auto"                # auto (GPU if there is one) | cpu | cuda | cuda:N
    fusion: dict | None = None          # {selection, span, retriever} weights; None: the
                                        # folder's (unless `strategy` is set), else `strategy`
    always_answer: bool = False         # never answer "no answer in the collection"
    no_answer_threshold: float | None = None  # confidence under which there is no answer;
                                        # None: the folder's calibrated one
    stop_when_sure: float | bool | None = None  # one-passage confidence at which a read stops
                                        # after its first passage; None: the folder's (off
                                        # without one); true: the folder's, required; false: off

    def __post_init__(self) -> None:
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, "
                             f"got {self.strategy!r}")
        self.precision = normalize_precision(self.precision, "reader precision")
        for name in ("max_answer_length", "max_length", "batch_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        Fusion.from_value(self.fusion)  # a ConfigError naming the bad weight
        if not isinstance(self.always_answer, bool):
            raise ValueError(f"always_answer must be true or false, got {self.always_answer!r}")
        threshold = self.no_answer_threshold
        if threshold is not None and (isinstance(threshold, bool)
                                      or not isinstance(threshold, (int, float))
                                      or not 0.0 <= threshold <= 1.0):
            raise ValueError(f"no_answer_threshold must be a probability in [0, 1], "
                             f"got {threshold!r}")
        stop = self.stop_when_sure
        if stop is not None and not isinstance(stop, bool) and (
                not isinstance(stop, (int, float)) or not 0.0 <= stop <= 1.0):
            raise ValueError(f"stop_when_sure must be true, false or a probability in [0, 1], "
                             f"got {stop!r}")


def _passage_choice(options: ExtractiveReaderOptions, defaults: Decoding
                    ) -> tuple[Fusion | None, str]:
    """(fusion, strategy): the options' fusion; else a strategy the options name, alone; else
    the folder's decoding defaults; else "best_passage"."""
    if options.fusion is not None:
        return Fusion.from_value(options.fusion), options.strategy or "best_passage"
    if options.strategy is not None:
        return None, options.strategy
    return defaults.fusion, defaults.strategy or "best_passage"


def _no_answer(options: ExtractiveReaderOptions, defaults: Decoding, null_option: bool
               ) -> NoAnswer | None:
    """The folder's calibrated confidence with the options' threshold, if any (None: the
    reader always answers, whatever the threshold)."""
    if defaults.no_answer is not None and not null_option \
            and defaults.no_answer.weighs("answerable"):
        raise ConfigError("reader 'extractive': the no-answer confidence weighs 'answerable', "
                          "which only a reader trained with the null option has "
                          "(`convqa train reader --unanswerable`)")
    if defaults.no_answer is None:
        if options.no_answer_threshold is not None and not options.always_answer:
            raise ConfigError("reader 'extractive': no_answer_threshold needs a reader folder "
                              "with a calibrated confidence (`convqa train reader-decoding`)")
        return None
    if options.no_answer_threshold is None:
        return defaults.no_answer
    return defaults.no_answer.with_threshold(float(options.no_answer_threshold))


def _stop_when_sure(options: ExtractiveReaderOptions, defaults: Decoding,
                    no_answer: NoAnswer | None) -> float | None:
    """The one-passage confidence at which a read stops after its first passage (None: every
    passage is read): the option's number, else (None or true) the folder's block's."""
    stop = options.stop_when_sure
    from_folder = stop is None or stop is True  # (not `in (None, True)`: 1.0 == True)
    if stop is False or (from_folder and defaults.stop_when_sure is None):
        return None
    if no_answer is None or no_answer.one_passage is None:
        raise ConfigError("reader 'extractive': stop_when_sure needs a reader folder with a "
                          "calibrated one-passage confidence (`convqa train reader-decoding "
                          "--one-passage`)")
    return float(defaults.stop_when_sure if from_folder else stop)


@READERS.register("extractive", config=ExtractiveReaderOptions)
class SpanReader(MeasuredPrecision):
    """Reads passages with an `ExtractiveReader` and returns the best span as an `Answer`."""

    reads_retriever_scores = True  # `read` takes the retriever's scores (convqa/pipeline.py)
    reads_reranked = True  # `read` takes `reranked`: the passages are a reranker's (the same)
    abstains = True  # `read` may answer "no answer" and takes `always_answer` (the same)

    def __init__(self, model: ExtractiveReader, options: ExtractiveReaderOptions | None = None):
        from convqa.history import model_history_strategy

        self.options = options or ExtractiveReaderOptions()
        self.model = model
        defaults = getattr(model, "decoding", None) or Decoding()
        answer_length = self.options.max_answer_length or defaults.max_answer_length
        changes = {k: v for k, v in (("max_length", self.options.max_length),
                                     ("max_answer_length", answer_length))
                   if v is not None}
        try:
            self.config = dataclasses.replace(model.config, **changes)
        except ValueError as exc:
            raise ConfigError(f"reader 'extractive': {exc}") from None
        history = self.options.history or model.config.history or DEFAULT_HISTORY
        self.history = model_history_strategy(history, model)
        self.fusion, self.strategy = _passage_choice(self.options, defaults)
        self.no_answer = _no_answer(self.options, defaults, self.config.null_option)
        # the same choices for passages a reranker ordered (the folder's after_reranker block)
        reranked = defaults.reranked()
        self.reranked_fusion, self.reranked_strategy = _passage_choice(self.options, reranked)
        self.reranked_no_answer = _no_answer(self.options, reranked, self.config.null_option)
        self.stop_when_sure = _stop_when_sure(self.options, defaults, self.no_answer)
        self.reranked_stop_when_sure = _stop_when_sure(self.options, reranked,
                                                       self.reranked_no_answer)
        if self.options.stop_when_sure is True and self.stop_when_sure is None \
                and self.reranked_stop_when_sure is None:
            raise ConfigError("reader 'extractive': stop_when_sure: true needs a reader folder "
                              "that records one (`convqa train reader-decoding "
                              "--stop-when-sure`)")
        self._precision = PrecisionOnFirstUse(self.options.precision)

    @classmethod
    def from_config(cls, options: ExtractiveReaderOptions) -> "SpanReader":
        if not options.model:
            raise ConfigError("reader 'extractive': option 'model' (a reader folder made by "
                              "`convqa train reader`, or a question-answering checkpoint) is "
                              "required")
        model = ExtractiveReader.from_pretrained(options.model)
        return cls(model.for_inference(options.device, "reader 'extractive'"), options)

    def fingerprint(self, always_answer: bool = False) -> str:
        """The model's weights and everything that changes its answers (for result caches);
        `always_answer`: of answers read with `always_answer=True`, which the confidence
        does not change."""
        import hashlib
        import json

        settings = {"model": self.model.fingerprint(), "config": self.config.record(),
                    "history": self.history.to_dict(), "strategy": self.strategy,
                    "precision": self.options.precision}  # auto: an agreeing choice
        if self.fusion is not None:
            settings["fusion"] = self.fusion.to_dict()
        if (self.stop_when_sure, self.reranked_stop_when_sure) != (None, None):
            settings["stop_when_sure"] = [self.stop_when_sure, self.reranked_stop_when_sure]
        confident = not (always_answer or self.options.always_answer)
        if self.no_answer is not None and confident:
            settings["no_answer"] = self.no_answer.to_dict()
        after = (self.reranked_fusion, self.reranked_strategy,
                 self.reranked_no_answer if confident else None)
        if after != (self.fusion, self.strategy, self.no_answer if confident else None):
            settings["after_reranker"] = {
                "fusion": after[0].to_dict() if after[0] else None, "strategy": after[1],
                "no_answer": after[2].to_dict() if after[2] is not None else None}
        text = json.dumps(settings, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    @classmethod
    def from_model(cls, model: ExtractiveReader, **options: Any) -> "SpanReader":
        """Wrap a reader model in memory (e.g. during training) with `options`."""
        return cls(model, ExtractiveReaderOptions(**options))

    def read(self, question: str, history: Sequence[Turn], passages: Sequence[Passage],
             scores: Sequence[float] | None = None, always_answer: bool = False,
             reranked: bool = False) -> Answer | None:
        """The answer to `question` asked after `history`, from `passages` (None if there is
        no passage, or none has text to answer from); `scores`: the retriever's (or with
        `reranked`, the reranker's), one per passage, used by a `fusion`; `always_answer`:
        never a no-answer; `reranked`: decode as the folder's `after_reranker` block says."""
        if not passages:
            return None
        return self.read_query(self.history.format(question, list(history)), passages, scores,
                               always_answer, reranked)

    def read_query(self, query: str, passages: Sequence[Passage],
                   scores: Sequence[float] | None = None, always_answer: bool = False,
                   reranked: bool = False) -> Answer | None:
        """The answer for a query text already formatted."""
        if not passages:
            return None
        passages = list(passages)
        stop = self.reranked_stop_when_sure if reranked else self.stop_when_sure
        if stop is None or len(passages) < 2:
            return self.answer_from(self.passage_spans(query, passages), passages, scores,
                                    always_answer, reranked)
        first = self.passage_spans(query, passages[:1])
        if self._sure(first, passages[:1], scores, stop, always_answer, reranked):
            return self.answer_from(first, passages[:1], scores[:1] if scores else scores,
                                    always_answer, reranked)
        rest = [s if s is None else dataclasses.replace(s, passage=s.passage + 1)
                for s in self.passage_spans(query, passages[1:])]  # indices into `passages`
        return self.answer_from(first + rest, passages, scores, always_answer, reranked)

    def _sure(self, first: list[PassageSpan | None], passage: list[Passage],
              scores: Sequence[float] | None, stop: float, always_answer: bool,
              reranked: bool) -> bool:
        """Whether the first passage's answer is sure enough to stop reading: its one-passage
        confidence reaches `stop`, and the no-answer threshold too when the reader may abstain
        (a read that stops is never one that says "no answer")."""
        answer = self.answer_from(first, passage, scores[:1] if scores else scores,
                                  always_answer=True, reranked=reranked)
        if answer is None or answer.confidence is None:
            return False
        no_answer = (self.reranked_no_answer if reranked else self.no_answer).for_passages(1)
        abstains = not (always_answer or self.options.always_answer)
        return answer.confidence >= (max(stop, no_answer.threshold) if abstains else stop)

    def answer_from(self, spans: Sequence[PassageSpan | None], passages: Sequence[Passage],
                    scores: Sequence[float] | None = None, always_answer: bool = False,
                    reranked: bool = False) -> Answer | None:
        """The answer chosen among passages' best spans, as `read` decides it."""
        strategy, fusion, no_answer = (
            (self.reranked_strategy, self.reranked_fusion, self.reranked_no_answer) if reranked
            else (self.strategy, self.fusion, self.no_answer))
        choice = choose_span(spans, strategy, fusion, scores)
        if choice is None:
            return None
        answer = choice_answer(choice, passages)
        if no_answer is not None:
            no_answer = no_answer.for_passages(len(passages))
            answer.confidence = no_answer.confidence(
                confidence_features(choice, spans, passages, self.config.null_option))
            abstains = not (always_answer or self.options.always_answer)
            if abstains and answer.confidence < no_answer.threshold:
                answer = dataclasses.replace(answer, text="", start=None, end=None,
                                             no_answer=True)
        return answer

    def passage_spans(self, query: str, passages: Sequence[Passage]
                      ) -> list[PassageSpan | None]:
        """The best span of every passage with its scores (None: no valid span); a passage's
        span and scores do not depend on the other passages read with it (in fp32; in bf16 or
        int8 the batch's padding and activation range can move the last digits)."""
        passages = list(passages)
        if not passages:
            return []
        features, start, end, selection = self.window_logits(query, passages)
        return passage_spans(start, end, selection, features, len(passages),
                             self.config.max_answer_length)

    def window_logits(self, query: str, passages: Sequence[Passage]
                      ) -> tuple[ReaderFeatures, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The windows of (query, passage) pairs and every window's start, end (and selection)
        logits, float32 on CPU, in the reader's precision (`auto` measured on its first read):
        what `passage_spans` decodes, and what a teacher's targets keep (distill.py)."""
        features = build_features(self.model.tokenizer, [query] * len(passages), list(passages),
                                  self.config)
        was_training = self.model.training
        self.model.eval()
        try:
            precision = self._precision.resolve(lambda: self._choose_precision(features))
            start, end, selection = self._logits(features, precision)
        finally:
            self.model.train(was_training)
        return features, start, end, selection

    def _logits(self, features, precision: str) -> tuple[torch.Tensor, torch.Tensor,
                                                         torch.Tensor | None]:
        """Start, end (and selection) logits of every window, float32 on CPU."""
        model = prepare(self.model, precision)
        starts, ends, selections = [], [], []
        with torch.inference_mode(), autocast(precision, self.model.device):
            for begin in range(0, len(features), self.options.batch_size):
                part = features.select(range(begin, min(begin + self.options.batch_size,
                                                        len(features))), trim=False)
                logits = model(**self.model.model_inputs(part.tensors))
                starts.append(logits.start.float().cpu())
                ends.append(logits.end.float().cpu())
                if logits.selection is not None:
                    selections.append(logits.selection.float().cpu())
        return torch.cat(starts), torch.cat(ends), torch.cat(selections) if selections else None

    def _choose_precision(self, features) -> PrecisionChoice:
        """`auto`: time each candidate on the first windows of this read (convqa/precision.py).
        A read of fewer than PROBE_WINDOWS windows (a first passage read alone to see whether
        it is sure) runs in fp32 undecided, unless this machine remembers a choice: on one
        window the agreement can only be 0 or 1, and that one read would decide for good."""
        probe = features.select(range(min(PROBE_WINDOWS, len(features))), trim=False)

        def agreement(reference, other) -> float:
            same = [(ref.argmax(-1) == out.argmax(-1)).float()
                    for ref, out in zip(reference[:2], other[:2])]
            return float((same[0] * same[1]).mean())

        return choose_precision(
            lambda precision: self._logits(probe, precision), agreement,
            threshold=SPAN_AGREEMENT, what="extractive reader", device=self.model.device,
            remember=self.model.fingerprint(), ready=len(features) >= PROBE_WINDOWS)
