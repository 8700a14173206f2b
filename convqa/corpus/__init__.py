"""The passage collection: splitting articles into passages, reading passage files, and an
on-disk store with random access by id.

- `sentences`: rule-based sentence splitter (`split_sentences`);
- `passages`: greedy packing of sentences into passages of at most `max_words` words;
- `readers`: streaming readers for JSONL / TSV passages and articles JSONL;
- `hf`: passages from a Hugging Face `datasets` dataset (imports `datasets` lazily);
- `store`: `PassageStore`, the memory-mapped collection the retrievers and readers look up.
"""
from .hf import read_hf_passages
from .passages import article_passages, split_passages
from .readers import (Article, detect_format, iter_article_passages, read_articles,
                      read_jsonl_passages, read_passages, read_tsv_passages)
from .sentences import split_sentences
from .store import PassageStore

__all__ = ["Article", "PassageStore", "article_passages", "detect_format",
           "iter_article_passages", "read_articles", "read_hf_passages", "read_jsonl_passages",
           "read_passages", "read_tsv_passages", "split_passages", "split_sentences"]
