"""What a QReCC evaluation reads: conversations, the evaluated turns, their gold answers and gold
passage ids, and the passage collection as a `PassageStore`.

    data = load_qrecc_eval("qrecc_test.json", "passages.jsonl", "qrecc_test_qrels_binary.json")
    data = load_scai_eval("../shared/data/qrecc", ["topics_train.json", "topics_eval.json"])

`load_qrecc_eval`: the official `qrecc_*.json` (or JSON Lines; `convqa.loaders.qrecc`), every turn
evaluated. Gold passage ids come from the qrels when given (the official
`qrecc_*_qrels_binary.json`, or TREC qrels `qid Q0 pid rel`, told apart by the `.json` suffix),
else from the turns' `Passages` field where the file has it, else there are none (`gold` is
None: only span-F1 relevance can be scored). A turn without a qrels entry (or with an empty
`Passages`) has no gold. Qrels keys must match the turns ("<conv>_<turn>", see `id_prefix` in
the loader); qrels that match no turn at all are an error (another split?).

Passages: a `PassageStore` folder is used as it is; a JSONL or TSV file of {id, text, title?} is
built once into a store under `cache_dir` (keyed by the file's path, size and mtime).

`load_scai_eval`: the 95 human-evaluated SCAI-QReCC-21 turns (`convqa.loaders.scai`) with the 326
passages of that subset as the collection and gold ids from the test qrels in the same folder.
Those files hold only each turn's rewrite, not the conversation. QReCC's test conversations
1-80 are TREC CAsT 2019's topics 1-80 (train topics 1-30, evaluation topics 31-80) with the same
turn numbers and CAsT's raw utterances as questions (checked: turns 1-8 of conversation 1 in the
official format match topic 1 word for word, and the raw utterances of all 95 turns agree with
their rewrites; see tests/test_eval_qrecc_scai.py), so the conversations are rebuilt from the
CAsT topics files. Their answers are not in any of these files: history turns carry no answers
(`full` history is then the questions only), and the gold answers of the evaluated turns are
kept in `answers`, not in the conversations.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from convqa.corpus import PassageStore, read_passages
from convqa.errors import ConfigError, DataError
from convqa.types import Conversation, Passage, QueryId


@dataclass
class QReccEvalData:
    """Everything an evaluation reads; turns are keyed "<conv>_<turn>" (`str(QueryId)`)."""

    conversations: dict[str, Conversation]
    queries: list[str]                    # evaluated turns, in file order
    answers: dict[str, str]               # gold answer of each evaluated turn ("" = none)
    gold: dict[str, list[str]] | None     # gold passage ids; None when no source gives any
    store: Path                           # PassageStore folder of the collection
    name: str = "qrecc"                   # shown in results
    sources: dict[str, Any] = field(default_factory=dict)  # the files read, for the record

    def turn_of(self, qid: str) -> tuple[Conversation, int]:
        """(conversation, 1-based turn number) of an evaluated turn."""
        key = QueryId.parse(qid)
        return self.conversations[key.conversation_id], key.turn

    def has_gold(self, qid: str) -> bool:
        return bool(self.gold and self.gold.get(qid))

    def digest(self) -> str:
        """sha256 of what a run depends on: the evaluated turns and their conversations."""
        digest = hashlib.sha256()
        wanted = {QueryId.parse(q).conversation_id for q in self.queries}
        for cid in sorted(wanted):
            turns = [[t.question, t.answer, t.rewrite] for t in self.conversations[cid].turns]
            digest.update(json.dumps([cid, turns], ensure_ascii=False).encode() + b"\n")
        digest.update(json.dumps(self.queries).encode())
        return digest.hexdigest()


def default_cache_dir() -> Path:
    from convqa.cache import cache_dir

    return cache_dir() / "qrecc"


def load_qrecc_eval(qrecc_json: str | os.PathLike, passages: str | os.PathLike,
                    qrels: str | os.PathLike | None = None, *,
                    cache_dir: str | os.PathLike | None = None, id_prefix: str = "",
                    progress: bool = False) -> QReccEvalData:
    """An official QReCC file + passage collection (+ qrels); see the module doc."""
    from convqa.loaders.qrecc import load_qrecc

    conversations = load_qrecc(qrecc_json, id_prefix=id_prefix)
    queries = [str(qid) for conversation in conversations for qid in conversation.query_ids()]
    by_id = {c.id: c for c in conversations}
    answers = {}
    for qid in queries:
        conversation, number = by_id[QueryId.parse(qid).conversation_id], QueryId.parse(qid).turn
        answers[qid] = conversation.turn(number).answer or ""
    sources: dict[str, Any] = {"qrecc_json": str(qrecc_json), "passages": str(passages),
                               "qrels": None if qrels is None else str(qrels)}
    if qrels is not None:
        judged = _read_qrels(qrels, id_prefix)
        unmatched = [key for key in judged if key not in answers]
        if len(unmatched) == len(judged):
            raise DataError(f"no qrels key matches a turn of {qrecc_json} (e.g. "
                            f"{next(iter(judged), 'none')!r} vs {queries[0]!r}): qrels of "
                            "another split, or another id_prefix?", qrels)
        gold: dict[str, list[str]] | None = {
            qid: [pid for pid, rel in judged.get(qid, {}).items() if rel > 0] for qid in queries}
        sources["qrels_unmatched"] = len(unmatched)
    else:
        gold = _gold_from_turns(by_id, queries)
    store = passage_store(passages, cache_dir, progress)
    return QReccEvalData(by_id, queries, answers, gold, store, Path(qrecc_json).name, sources)


def _read_qrels(path: str | os.PathLike, id_prefix: str) -> dict[str, dict[str, int]]:
    from convqa.loaders.cast import load_trec_qrels
    from convqa.loaders.qrecc import load_qrecc_qrels

    if Path(path).name.lower().endswith(".json"):
        return load_qrecc_qrels(path, id_prefix)
    return {id_prefix + key: value for key, value in load_trec_qrels(path).items()}


def _gold_from_turns(conversations: dict[str, Conversation],
                     queries: Sequence[str]) -> dict[str, list[str]] | None:
    """Gold ids from the turns' `Passages` field; None when no turn has that field."""
    gold: dict[str, list[str]] = {}
    found = False
    for qid in queries:
        key = QueryId.parse(qid)
        passages = conversations[key.conversation_id].turn(key.turn).meta.get("passages")
        found = found or passages is not None
        gold[qid] = list(passages or [])
    return gold if found else None


def passage_store(passages: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                  progress: bool = False) -> Path:
    """The store folder for `passages`: the folder itself when it is a store, else a store built
    once from the JSONL/TSV file under `cache_dir`/passages."""
    path = Path(passages)
    if path.is_dir():
        PassageStore.open(path).close()  # a DataError unless it is a store
        return path
    if not path.is_file():
        raise DataError("passage collection not found (a PassageStore folder, or a JSONL/TSV "
                        "file of {id, text, title})", path)
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    target = _cache(cache_dir) / "passages" / f"{path.name}-{key.hexdigest()[:16]}"
    return _built(read_passages(path), target, str(path), progress)


def _built(passages: Iterable[Passage], target: Path, source: str, progress: bool) -> Path:
    if not (target / "meta.json").is_file():
        PassageStore.build(passages, target, progress=progress, source=source,
                           overwrite=target.exists()).close()
    return target


def _cache(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def load_scai_eval(directory: str | os.PathLike, cast_topics: Sequence[str | os.PathLike], *,
                   cache_dir: str | os.PathLike | None = None) -> QReccEvalData:
    """The SCAI-QReCC-21 subset as an evaluation (see the module doc). `cast_topics`: the CAsT
    2019 topics JSON files covering the subset's conversations (train and evaluation topics)."""
    from convqa.loaders.cast import load_cast_topics
    from convqa.loaders.scai import load_scai_subset

    if isinstance(cast_topics, (str, os.PathLike)):
        cast_topics = [cast_topics]
    if not cast_topics:
        raise ConfigError("load_scai_eval needs the CAsT 2019 topics files (the conversations)")
    subset = load_scai_subset(directory)
    topics: dict[str, Conversation] = {}
    for path in cast_topics:
        for conversation in load_cast_topics(path):
            if conversation.id in topics:
                raise DataError(f"topic {conversation.id} is in two of the topics files", path)
            topics[conversation.id] = conversation
    names = ", ".join(str(p) for p in cast_topics)
    conversations: dict[str, Conversation] = {}
    for item in subset.turns:
        key = QueryId.parse(item.query_id)
        if key.conversation_id not in topics:
            raise DataError(f"conversation {key.conversation_id} of turn {item.query_id} is not "
                            f"in the CAsT topics ({names})", directory)
        source = topics[key.conversation_id]
        if key.turn > len(source):
            raise DataError(f"turn {item.query_id}: CAsT topic {key.conversation_id} has only "
                            f"{len(source)} turns", directory)
        conversation = conversations.setdefault(key.conversation_id, Conversation(
            source.id, [dataclasses.replace(t, answer=None, meta={"source": "trec"})
                        for t in source.turns]))
        conversation.turns[key.turn - 1].rewrite = item.rewrite
    queries = [item.query_id for item in subset.turns]
    gold = None
    if all(item.gold_passage_ids is not None for item in subset.turns):
        gold = {item.query_id: list(item.gold_passage_ids or []) for item in subset.turns}
    digest = hashlib.sha256()
    for passage in subset.passages.values():
        digest.update(json.dumps(passage.to_dict(), ensure_ascii=False).encode() + b"\n")
    target = _cache(cache_dir) / "passages" / f"scai-qrecc-21-{digest.hexdigest()[:16]}"
    store = _built(subset.passages.values(), target, f"{directory} (batch1-top1.csv)", False)
    sources = {"scai": str(directory), "cast_topics": [str(p) for p in cast_topics],
               "passages": str(target), "qrels": "qrecc_test_qrels_binary.json"
               if gold is not None else None}
    return QReccEvalData(conversations, queries,
                         {item.query_id: item.answer for item in subset.turns}, gold, store,
                         "scai-qrecc-21", sources)
