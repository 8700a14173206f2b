"""Model inputs for (query, passage) pairs, with token -> character offsets into the passage.

Layout of one window: `[CLS] query [SEP] title [SEP] text-window [SEP]` (BERT; other tokenizers
put their own special tokens, none is hard-coded). The title goes with the query, in the first
segment, so that
- every window of a long passage carries the title, not only the first one;
- the second segment is exactly `passage.text`, and the fast tokenizer's offsets of its tokens
  are character offsets into `passage.text` itself: `passage.text[start:end]` of a span is the
  answer, with no shifting past a title prefix.
Only the passage is truncated: the query keeps its first `max_query_length` tokens (history
strategies put what matters first, or budget the query themselves) and the title its first
`max_title_length`, both cut on word boundaries so they stay substrings of the originals. A
passage longer than one window is read in several windows overlapping by `doc_stride` tokens
(the tokenizer's own `stride`; it is lowered when a long query leaves too little room).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor

from convqa.errors import ConfigError
from convqa.types import Passage

_TENSORS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class ReaderFeatures:
    """Tokenized windows. `tensors` go to the model; `window_passage[w]` is the index (into the
    pairs given) of the passage window w reads; `context[w, t]` marks tokens of passage text and
    `offsets[w, t]` their (start, end) character offsets into that passage's text."""

    tensors: dict[str, Tensor]
    window_passage: Tensor   # [windows] long
    context: Tensor          # [windows, length] bool
    offsets: Tensor          # [windows, length, 2] long

    def __len__(self) -> int:
        return int(self.window_passage.shape[0])

    @property
    def length(self) -> int:
        return int(self.context.shape[1])

    def select(self, windows: Sequence[int] | Tensor, trim: bool = True) -> "ReaderFeatures":
        """Some windows only (in the order given); `trim` drops padding columns none of them use."""
        index = torch.as_tensor(windows, dtype=torch.long)
        tensors = {k: v.index_select(0, index) for k, v in self.tensors.items()}
        context, offsets = self.context.index_select(0, index), self.offsets.index_select(0, index)
        if trim and len(index):
            used = int(tensors["attention_mask"].sum(1).max())
            tensors = {k: v[:, :used] for k, v in tensors.items()}
            context, offsets = context[:, :used], offsets[:, :used]
        return ReaderFeatures(tensors, self.window_passage.index_select(0, index), context,
                              offsets)

    def windows_of(self, passage: int) -> list[int]:
        return [int(w) for w in torch.nonzero(self.window_passage == passage).flatten()]


def truncate_texts(tokenizer: Any, texts: Sequence[str], max_tokens: int) -> list[str]:
    """Each text cut to at most its first `max_tokens` tokens, on a word boundary (a first word
    longer than that is split between word pieces): convqa.history's truncation."""
    from convqa.history.text import tokenize_texts

    if not texts:
        return []
    return [unit.head(max_tokens, split_words=True).text
            for unit in tokenize_texts(tokenizer, list(texts))]


def first_segments(tokenizer: Any, queries: Sequence[str], passages: Sequence[Passage],
                   config: Any) -> list[str]:
    """The first segment of every pair: the query, then ` [SEP] title` when titles are used."""
    queries = truncate_texts(tokenizer, queries, config.max_query_length)
    if not config.use_title or config.max_title_length == 0:
        return queries
    titles = truncate_texts(tokenizer, [p.title for p in passages], config.max_title_length)
    sep = tokenizer.sep_token or "|"
    return [f"{q} {sep} {t}" if t.strip() else q for q, t in zip(queries, titles)]


def build_features(tokenizer: Any, queries: Sequence[str], passages: Sequence[Passage],
                   config: Any, padding: bool = True) -> ReaderFeatures:
    """Windows for the pairs (queries[i], passages[i]); `config` is an ExtractiveReaderConfig
    (max_length, doc_stride, max_query_length, max_title_length, use_title)."""
    if len(queries) != len(passages):
        raise ValueError(f"{len(queries)} queries for {len(passages)} passages")
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError("the reader needs a fast tokenizer (character offsets)")
    if not passages:
        return _empty()
    firsts = first_segments(tokenizer, queries, passages, config)
    first_lengths = [len(ids) for ids in tokenizer(firsts, add_special_tokens=False)["input_ids"]]
    room = config.max_length - tokenizer.num_special_tokens_to_add(pair=True) - max(first_lengths)
    if room < 1:
        raise ConfigError(f"max_length={config.max_length} leaves no room for the passage "
                          f"after a query of {max(first_lengths)} tokens")
    stride = min(config.doc_stride, room // 2)
    encoding = tokenizer(firsts, [p.text for p in passages], truncation="only_second",
                         max_length=config.max_length, stride=stride,
                         return_overflowing_tokens=True, return_offsets_mapping=True,
                         padding="longest" if padding else False, return_tensors="pt")
    windows = encoding["input_ids"].shape[0]
    context = torch.zeros(encoding["input_ids"].shape, dtype=torch.bool)
    for w in range(windows):
        ids = encoding.sequence_ids(w)
        context[w, :len(ids)] = torch.tensor([s == 1 for s in ids], dtype=torch.bool)
    offsets = encoding["offset_mapping"].long() * context.unsqueeze(-1)
    tensors = {k: encoding[k] for k in _TENSORS if k in encoding}
    mapping = encoding.get("overflow_to_sample_mapping")
    if mapping is None:
        mapping = torch.arange(windows)
    return ReaderFeatures(tensors, mapping.long(), context, offsets)


def _empty() -> ReaderFeatures:
    return ReaderFeatures({"input_ids": torch.zeros(0, 0, dtype=torch.long),
                           "attention_mask": torch.zeros(0, 0, dtype=torch.long)},
                          torch.zeros(0, dtype=torch.long), torch.zeros(0, 0, dtype=torch.bool),
                          torch.zeros(0, 0, 2, dtype=torch.long))


def char_span_to_tokens(features: ReaderFeatures, window: int, start: int,
                        end: int) -> tuple[int, int] | None:
    """Token positions (first, last) of the character span [start, end) of the passage in
    `window`: the first text token ending after `start` and the last text token starting before
    `end`. None when the span is not wholly inside the window's text."""
    mask = features.context[window]
    if not bool(mask.any()) or end <= start:
        return None
    positions = torch.nonzero(mask).flatten()
    begins = features.offsets[window, positions, 0]
    ends = features.offsets[window, positions, 1]
    if int(begins[0]) > start or int(ends[-1]) < end:
        return None  # starts before or ends after this window's text
    first = int(torch.nonzero(ends > start).flatten()[0])
    last = int(torch.nonzero(begins < end).flatten()[-1])
    if first > last:
        return None
    return int(positions[first]), int(positions[last])


def token_span_to_chars(features: ReaderFeatures, window: int, first: int,
                        last: int) -> tuple[int, int]:
    """Character offsets [start, end) of tokens first..last of `window`."""
    return int(features.offsets[window, first, 0]), int(features.offsets[window, last, 1])
