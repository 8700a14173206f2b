"""A small conversational retrieval benchmark over the real OR-QuAC Wikipedia blocks we have.

OR-QuAC's 11M-block collection (`all_blocks`) is not available; ../shared/data/orquac holds
~2,000 of its blocks inside two sample files, and that is the corpus here:
- `canard_convir_sample_quadruples_top3.jsonl`: 1,000 rows {utterance, context (earlier
  questions joined by "|"), pos_passage, neg_passage}. pos/neg are a RERANKER's judgements
  (its top-3 vs a lower-ranked block), NOT gold relevance labels. Matching the questions to the
  OR-QuAC question files shows these turns are OR-QuAC/CANARD TRAIN turns (990 of the 1,000 rows
  match exactly one train dialog turn; no dev turn has labelled blocks here): label set
  `reranker`;
- `orconvqa_sample.jsonl`: 100 OR-QuAC rows with their history, rewrite and the gold passage
  (label 1, the block holding the answer): label set `gold`, 17 distinct blocks.

Corpus: every distinct block text of both files (positives and the reranker's negatives, also
those of rows left out), id
`"orquac-" + sha1(text)[:16]`, no title. Queries: each labelled turn, its rewrite and history
taken from the OR-QuAC files (train turns: the earlier questions, no answers, as ConvDR reads
OR-QuAC); relevant = its positive block(s). Rows whose question sequence matches no OR-QuAC
dialog, or several with different turns, are left out and counted.

Because the turns are OR-QuAC train turns, a model trained on OR-QuAC train must not see these
dialogs: `convqa train convdr --exclude-benchmark BENCH` holds them out (`benchmark_conversations`).

    BENCH/passages/      the blocks as a PassageStore (index it with `convqa index --dense`)
    BENCH/queries.jsonl  {"qid", "label_set", "conversation_id", "turn", "question", "rewrite",
                          "history": [{"question", "answer"}], "relevant": {pid: 1},
                          "reranker_negatives": [pid]}
    BENCH/meta.json      inputs (sha256), counts, and the warning about the labels

Scoring (`score_benchmark`, or `python -m retrievers.convdr.orquac_bench score`): any retriever
fed one of three inputs: `conversation` (a history strategy's rendering: ConvDR's input),
`rewrite` (the manual rewrite: the teacher's oracle), `question` (q_t alone); MRR, Hits@k,
Recall@k, NDCG@3 per label set via `convqa.metrics.evaluate_run`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from convqa.errors import ConfigError, ConvQAError, DataError, reports_errors
from convqa.io import iter_jsonl, load_json, require, write_json, write_jsonl
from convqa.model_install import sha256_of
from convqa.types import Passage, Turn

QUADRUPLES = "canard_convir_sample_quadruples_top3.jsonl"
SAMPLE = "orconvqa_sample.jsonl"
QUERIES = "queries.jsonl"
META = "meta.json"
PASSAGES = "passages"
FORMAT = "convqa-orquac-bench"
VERSION = 1
LABEL_SETS = ("reranker", "gold")
INPUTS = ("conversation", "rewrite", "question")
KS = (1, 5, 10, 20, 100)
LABELS_NOTE = ("label set 'reranker': positives are a reranker's top-ranked blocks "
               "(canard_convir_sample_quadruples_top3.jsonl), NOT gold relevance; label set "
               "'gold': the OR-QuAC gold blocks of orconvqa_sample.jsonl (label 1)")


def block_id(text: str) -> str:
    return "orquac-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class BenchQuery:
    qid: str
    label_set: str
    conversation_id: str
    turn: int
    question: str
    rewrite: str
    history: list[Turn]
    relevant: dict[str, int]
    reranker_negatives: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"qid": self.qid, "label_set": self.label_set,
                "conversation_id": self.conversation_id, "turn": self.turn,
                "question": self.question, "rewrite": self.rewrite,
                "history": [{"question": t.question, "answer": t.answer} for t in self.history],
                "relevant": self.relevant, "reranker_negatives": self.reranker_negatives}


def _turn_index(conversations) -> dict[tuple[tuple[str, ...], str], list[tuple[Any, int]]]:
    """(earlier questions, question) -> [(conversation, turn number)]."""
    index: dict[tuple[tuple[str, ...], str], list[tuple[Any, int]]] = {}
    for conversation in conversations:
        questions = [t.question for t in conversation.turns]
        for i, question in enumerate(questions):
            index.setdefault((tuple(questions[:i]), question), []).append((conversation, i + 1))
    return index


def build_orquac_benchmark(orquac_dir: str | os.PathLike, out: str | os.PathLike,
                           overwrite: bool = False, progress: bool = False) -> dict[str, Any]:
    """Write the benchmark of the module doc into `out` from the OR-QuAC folder."""
    from convqa.corpus import PassageStore
    from convqa.loaders import load_orquac
    from convqa.loaders.orquac import orquac_paths

    source = Path(orquac_dir)
    out = Path(out)
    for name in (QUADRUPLES, SAMPLE):
        if not (source / name).exists():
            raise DataError(f"OR-QuAC folder lacks {name}", source)
    if (out / META).exists() and not overwrite:
        raise ConvQAError(f"{out}: benchmark already built (add --overwrite to rebuild)")
    splits = [s for s in ("train", "dev") if "question" in orquac_paths(source, s)]
    conversations = [c for split in splits for c in load_orquac(source, split)]
    blocks: dict[str, str] = {}  # text -> id, in first-seen order
    counts = {"quadruple_rows": 0, "unmatched": 0, "ambiguous": 0, "sample_rows": 0,
              "sample_unmatched_dialogs": 0}
    records: dict[tuple[str, str], BenchQuery] = {}
    _add_reranker_queries(source, conversations, blocks, records, counts)
    _add_gold_queries(source, conversations, blocks, records, counts)
    for query in records.values():  # a reranker negative that is also a positive is not one
        query.reranker_negatives = [p for p in query.reranker_negatives
                                    if p not in query.relevant]
    passages = [Passage(pid, text) for text, pid in blocks.items()]
    store = PassageStore.build(passages, out / PASSAGES, progress=progress, overwrite=overwrite,
                               source=f"OR-QuAC blocks of {QUADRUPLES} and {SAMPLE}")
    queries = list(records.values())
    write_jsonl(out / QUERIES, (q.to_dict() for q in queries))
    meta = {"format": FORMAT, "version": VERSION, "labels": LABELS_NOTE,
            "inputs": {name: {"path": str((source / name).resolve()),
                              "sha256": sha256_of(source / name)}
                       for name in (QUADRUPLES, SAMPLE)},
            "orquac_splits_matched": splits,
            "counts": {**counts, "passages": len(store),
                       "queries": {s: sum(q.label_set == s for q in queries)
                                   for s in LABEL_SETS},
                       "conversations": len({q.conversation_id for q in queries})},
            "store_checksum": store.checksum}
    write_json(out / META, meta)
    return meta


def _add_reranker_queries(source: Path, conversations: list, blocks: dict[str, str],
                          records: dict[tuple[str, str], BenchQuery],
                          counts: dict[str, int]) -> None:
    """The "reranker" label set: each quadruple row's positive and negative block, on the
    OR-QuAC turn its context and utterance name (rows matching no turn, or several, are
    counted and left out)."""
    from convqa.loaders import load_convir_quadruples

    turns = _turn_index(conversations)
    for row in load_convir_quadruples(source / QUADRUPLES):
        counts["quadruple_rows"] += 1
        positive = blocks.setdefault(row.pos_passage, block_id(row.pos_passage))
        negative = blocks.setdefault(row.neg_passage, block_id(row.neg_passage))
        matches = turns.get((tuple(row.context), row.utterance), [])
        if not matches:
            counts["unmatched"] += 1
            continue
        if len(matches) > 1:
            counts["ambiguous"] += 1
            continue
        conversation, number = matches[0]
        turn = conversation.turn(number)
        qid = f"{conversation.id}_{number}"
        query = records.get(("reranker", qid))
        if query is None:
            query = records[("reranker", qid)] = BenchQuery(
                qid, "reranker", conversation.id, number, turn.question, turn.rewrite or "",
                [Turn(t.question, t.answer) for t in conversation.history(number)], {})
        query.relevant[positive] = 1
        if negative not in query.reranker_negatives and negative not in query.relevant:
            query.reranker_negatives.append(negative)


def _add_gold_queries(source: Path, conversations: list, blocks: dict[str, str],
                      records: dict[tuple[str, str], BenchQuery],
                      counts: dict[str, int]) -> None:
    """The "gold" label set: the sample file's rows, a dialog starting at each row without
    history, its gold block relevant."""
    from convqa.loaders import load_orconvqa_sample

    by_turn = {(t.question, n + 1, t.rewrite): c.id
               for c in conversations for n, t in enumerate(c.turns)}
    samples = load_orconvqa_sample(source / SAMPLE)
    dialog, dialog_number = None, 0
    for position, row in enumerate(samples):
        counts["sample_rows"] += 1
        if not row.history or dialog is None:
            dialog_number += 1
            dialog = _sample_dialog(samples, position, by_turn, dialog_number, counts)
        number = len(row.history) + 1
        passage = blocks.setdefault(row.passage, block_id(row.passage))
        qid = f"{dialog}_{number}"
        query = records.get(("gold", qid))
        if query is None:
            query = records[("gold", qid)] = BenchQuery(
                qid, "gold", dialog, number, row.question, row.rewrite,
                [Turn(q, a) for q, a in row.history], {})
        query.relevant[passage] = 1


def _sample_dialog(samples, start: int, by_turn: dict, number: int,
                   counts: dict[str, int]) -> str:
    """The OR-QuAC dialog id of the sample dialog starting at row `start` (rows up to the next
    empty history): the one dialog its matched rows agree on, else a made-up id."""
    found = set()
    for i in range(start, len(samples)):
        row = samples[i]
        if i > start and not row.history:
            break
        dialog = by_turn.get((row.question, len(row.history) + 1, row.rewrite))
        if dialog is not None:
            found.add(dialog)
    if len(found) == 1:
        return found.pop()
    counts["sample_unmatched_dialogs"] += 1
    return f"orconvqa_sample_{number}"


# ---------------------------------------------------------------------------------------------
# Reading


def load_benchmark(folder: str | os.PathLike) -> tuple[list[BenchQuery], dict[str, Any]]:
    """(queries, meta); a malformed line is a DataError naming file, line and field."""
    folder = Path(folder)
    if not (folder / META).exists():
        raise DataError(f"not an OR-QuAC benchmark folder (no {META})", folder)
    meta = load_json(folder / META)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataError(f"not an OR-QuAC benchmark (format is not {FORMAT!r})", folder / META)
    path = folder / QUERIES
    queries, seen = [], set()
    for line, data in iter_jsonl(path):
        qid = require(data, "qid", path, line, str)
        label_set = require(data, "label_set", path, line, str)
        if label_set not in LABEL_SETS:
            raise DataError(f"expected one of {', '.join(LABEL_SETS)}, got {label_set!r}", path,
                            line, "label_set")
        if (label_set, qid) in seen:
            raise DataError(f"query {qid!r} appears twice in label set {label_set}", path, line,
                            "qid")
        seen.add((label_set, qid))
        turn = require(data, "turn", path, line, int)
        relevant = require(data, "relevant", path, line, dict)
        if not relevant or not all(isinstance(k, str) and isinstance(v, int)
                                   and not isinstance(v, bool) for k, v in relevant.items()):
            raise DataError("expected a non-empty {passage id: integer label} object", path,
                            line, "relevant")
        history = []
        for i, item in enumerate(require(data, "history", path, line, list)):
            if not isinstance(item, dict) or not isinstance(item.get("question"), str) or \
                    not isinstance(item.get("answer"), (str, type(None))):
                raise DataError("expected {question: string, answer: string or null}", path,
                                line, f"history[{i}]")
            history.append(Turn(item["question"], item["answer"]))
        negatives = data.get("reranker_negatives", [])
        if not isinstance(negatives, list) or not all(isinstance(p, str) for p in negatives):
            raise DataError("expected a list of passage ids", path, line, "reranker_negatives")
        queries.append(BenchQuery(
            qid, label_set, require(data, "conversation_id", path, line, str), turn,
            require(data, "question", path, line, str),
            require(data, "rewrite", path, line, str), history, dict(relevant), negatives))
    return queries, meta


def benchmark_conversations(folder: str | os.PathLike) -> set[str]:
    """Every conversation (dialog) id of the benchmark: what training must hold out."""
    return {q.conversation_id for q in load_benchmark(folder)[0]}


def query_text(query: BenchQuery, query_input: str, strategy=None) -> str:
    if query_input == "rewrite":
        return query.rewrite
    if query_input == "question":
        return query.question
    if query_input == "conversation":
        return strategy.format(query.question, query.history)
    raise ConfigError(f"input must be one of {', '.join(INPUTS)}, got {query_input!r}")


def score_benchmark(folder: str | os.PathLike, retriever: Any,
                    query_input: str = "conversation", history: Any = "questions_only",
                    k: int = 100, ks: Sequence[int] = KS, batch_size: int = 64,
                    progress: bool = False) -> dict[str, Any]:
    """Retrieve for every query with `retriever` (a spec or a built retriever) fed
    `query_input`, and score each label set (see module doc)."""
    from convqa.runs import retrieve_all
    from convqa.specs import build_retriever
    from convqa.history import build_history_strategy
    from convqa.metrics import evaluate_run

    if query_input not in INPUTS:
        raise ConfigError(f"input must be one of {', '.join(INPUTS)}, got {query_input!r}")
    if k < max(ks):
        raise ConfigError(f"k={k} is smaller than the largest cutoff {max(ks)}")
    queries, meta = load_benchmark(folder)
    strategy = build_history_strategy(history) if query_input == "conversation" else None
    if isinstance(retriever, (str, dict)):
        import retrievers.convdr.retriever  # noqa: F401  (registers "convdr")

        retriever = build_retriever(retriever)
    texts = {f"{q.label_set}:{q.qid}": query_text(q, query_input, strategy) for q in queries}
    distinct = {text: None for text in texts.values()}
    ranked = retrieve_all(retriever, {str(i): t for i, t in enumerate(distinct)}, k,
                          batch_size, progress, desc=f"retrieve ({query_input})")
    by_text = {text: ranked[str(i)] for i, text in enumerate(distinct)}
    result: dict[str, Any] = {"benchmark": str(folder), "input": query_input,
                              "history": strategy.to_dict() if strategy else None, "k": k,
                              "labels": meta.get("labels", LABELS_NOTE), "sets": {}}
    for label_set in LABEL_SETS:
        chosen = [q for q in queries if q.label_set == label_set]
        if not chosen:
            continue
        run = {q.qid: by_text[texts[f"{label_set}:{q.qid}"]] for q in chosen}
        qrels = {q.qid: q.relevant for q in chosen}
        report = evaluate_run(run, qrels, ks=ks, ndcg_ks=(3,), queries=list(qrels))
        result["sets"][label_set] = {"num_queries": report.num_queries,
                                     "metrics": report.summary()}
    return result


def markdown_row(label: str, result: dict[str, Any], label_set: str = "reranker") -> str:
    """`| label | input | n | MRR | Hits@1 | Hits@5 | Hits@20 | NDCG@3 |` for one result."""
    values = result["sets"].get(label_set)
    if values is None:
        return f"| {label} | {result['input']} | 0 | - | - | - | - | - |"
    m = values["metrics"]
    return (f"| {label} | {result['input']} | {values['num_queries']} | {m['mrr']:.3f} | "
            f"{100 * m['hits@1']:.1f} | {100 * m['hits@5']:.1f} | {100 * m['hits@20']:.1f} | "
            f"{m['ndcg@3']:.3f} |")


# ---------------------------------------------------------------------------------------------
# Command line: python -m retrievers.convdr.orquac_bench build|score ...


@reports_errors("orquac_bench")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retrievers.convdr.orquac_bench",
                                     description=__doc__.split("\n\n")[0])
    jobs = parser.add_subparsers(dest="job", required=True)
    build = jobs.add_parser("build", help="build the benchmark from the OR-QuAC folder")
    build.add_argument("--orquac", default="../shared/data/orquac", metavar="DIR")
    build.add_argument("--out", required=True, metavar="DIR")
    build.add_argument("--overwrite", action="store_true")
    score = jobs.add_parser("score", help="score a retriever on it")
    score.add_argument("--bench", required=True, metavar="DIR")
    score.add_argument("--retriever", required=True, metavar="SPEC",
                       help="name, inline YAML '{name: convdr, model: M, index: I}' or YAML file")
    score.add_argument("--input", choices=INPUTS, default="conversation")
    score.add_argument("--history", default="questions_only", metavar="STRATEGY",
                       help="with --input conversation (default questions_only, ConvDR's)")
    score.add_argument("--k", type=int, default=100)
    score.add_argument("--label", default=None, help="row label for the printed table")
    score.add_argument("--out", metavar="FILE", help="write the result as JSON")
    args = parser.parse_args(argv)
    if args.job == "build":
        meta = build_orquac_benchmark(args.orquac, args.out, args.overwrite, progress=True)
        print(json.dumps(meta["counts"]))
        print(meta["labels"])
        return 0
    from convqa.specs import parse_spec

    spec, _ = parse_spec(args.retriever)
    history: Any = args.history
    if history.strip().startswith("{"):
        history, _ = parse_spec(history, "history")
    result = score_benchmark(args.bench, spec, args.input, history, args.k, progress=True)
    if args.out:
        write_json(args.out, result)
    print("| retriever | input | n | MRR | Hits@1 | Hits@5 | Hits@20 | NDCG@3 |")
    print("|---|---|---|---|---|---|---|---|")
    for label_set in LABEL_SETS:
        print(markdown_row(f"{args.label or 'retriever'} ({label_set})", result, label_set))
    print(f"note: {result['labels']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
