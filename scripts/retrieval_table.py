#!/usr/bin/env python
"""The retrieval table: every system on every corpus of the TopiOCQA x Wikipedia benchmark.

    python scripts/retrieval_table.py --corpus vital=/tmp/bench/vital \\
        --corpus full=/tmp/bench/full [--systems systems.yaml] [--split dev] \\
        [--out docs/results/retrieval.md] [--no-cache]

Writes OUT (Markdown) and OUT with .json (every number, per system, corpus, level and question
type). Without --systems the rows are BM25 with each shortcut input of DPR-IHN's analysis.
A systems file is YAML:

    systems:
      - label: "BM25, X_t (full)"
        retriever: {name: bm25, index: "{corpus}/indexes/bm25"}
        history: full
      - label: MiniLM zero-shot, current-first
        retriever: {name: dense, index: "{corpus}/indexes/minilm"}
        history: current_first

`{corpus}` in any string stands for the corpus's benchmark folder; `corpora: [vital]` limits a
system to the named corpora (the default is every corpus). A BM25 index that does not
exist yet is built from `{corpus}/passages`. Runs are cached (convqa.evaluation.retrieval), so
adding a system and rerunning costs only the new rows.

If OUT already exists and holds the markers `<!-- retrieval-table:start -->` and
`<!-- retrieval-table:end -->`, only the text between them is replaced, so notes written
around the table survive a rerun.
"""
from __future__ import annotations

import argparse
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from convqa.config import load_yaml
from convqa.errors import ConfigError, ConvQAError
from convqa.evaluation.retrieval import KS, evaluate_retrieval
from convqa.io import atomic_write, write_json

START, END = "<!-- retrieval-table:start -->", "<!-- retrieval-table:end -->"
BM25 = {"name": "bm25", "index": "{corpus}/indexes/bm25"}
DEFAULT_SYSTEMS = [
    {"label": "BM25, q_t (question_only)", "retriever": BM25, "history": "question_only"},
    {"label": "BM25, a_{t-1} (last_answer)", "retriever": BM25, "history": "last_answer"},
    {"label": "BM25, X_t without q_t (history_only)", "retriever": BM25,
     "history": "history_only"},
    {"label": "BM25, X_t (full = oldest_first)", "retriever": BM25, "history": "full"},
    {"label": "BM25, current_first", "retriever": BM25, "history": "current_first"},
]
TYPES = ("first", "no-switch", "switch")


def substitute(value: Any, corpus: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{corpus}", str(corpus))
    if isinstance(value, dict):
        return {k: substitute(v, corpus) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, corpus) for v in value]
    return value


def ensure_bm25_indexes(spec: Any, corpus: Path, progress: bool) -> None:
    """Build any BM25 index the spec names that does not exist yet, from {corpus}/passages."""
    if isinstance(spec, list):
        for item in spec:
            ensure_bm25_indexes(item, corpus, progress)
        return
    if not isinstance(spec, dict):
        return
    if spec.get("name") == "bm25" and spec.get("index") and not Path(spec["index"]).exists():
        from convqa.corpus import PassageStore
        from retrievers.bm25 import BM25Config, BM25Retriever

        config = BM25Config(preset=spec.get("preset", "default"), k1=spec.get("k1"),
                            b=spec.get("b"))
        started = time.perf_counter()
        store = PassageStore.open(corpus / "passages")
        BM25Retriever.build_from_store(store, config, show_progress=progress).save(spec["index"])
        print(f"built BM25 index {spec['index']} ({len(store)} passages) in "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
    for value in spec.values():
        if isinstance(value, (dict, list)):
            ensure_bm25_indexes(value, corpus, progress)


def load_systems(path: str | None) -> list[dict[str, Any]]:
    if path is None:
        return DEFAULT_SYSTEMS
    data = load_yaml(path)
    systems = data.get("systems")
    if not isinstance(systems, list) or not systems:
        raise ConfigError(f"{path}: expected a non-empty list under 'systems'")
    for index, system in enumerate(systems):
        if not isinstance(system, dict) or not system.get("label") or "retriever" not in system:
            raise ConfigError(f"{path}: systems[{index}] needs 'label' and 'retriever'")
        corpora = system.get("corpora", [])
        if not isinstance(corpora, list) or not all(isinstance(c, str) for c in corpora):
            raise ConfigError(f"{path}: systems[{index}].corpora must be a list of corpus names")
    return systems


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def main_table(results: list[dict[str, Any]], level: str) -> list[str]:
    """Rows: systems; columns: Hits@k and MRR over all turns, then Hits@5/Hits@20 per type."""
    header = (["system", "n"] + [f"H@{k}" for k in KS] + ["MRR"]
              + [f"{t} H@5 / H@20 (n)" for t in TYPES])
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for result in results:
        groups = result["levels"][level]["groups"]
        overall = groups["all"]
        row = [result["label"], str(int(overall["count"]))]
        row += [pct(overall[f"hits@{k}"]) for k in KS] + [f"{overall['mrr']:.3f}"]
        for qtype in TYPES:
            g = groups.get(qtype)
            row.append(f"{pct(g['hits@5'])} / {pct(g['hits@20'])} ({int(g['count'])})"
                       if g and g.get("count") else "-")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def breakdown_table(results: list[dict[str, Any]], level: str) -> list[str]:
    """Rows: system x question type; every metric."""
    header = ["system", "turns", "n"] + [f"H@{k}" for k in KS] + ["MRR"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for result in results:
        groups = result["levels"][level]["groups"]
        for qtype in TYPES:
            g = groups.get(qtype)
            if not g or not g.get("count"):
                continue
            lines.append("| " + " | ".join(
                [result["label"], qtype, str(int(g["count"]))]
                + [pct(g[f"hits@{k}"]) for k in KS] + [f"{g['mrr']:.3f}"]) + " |")
    return lines


def render(all_results: dict[str, list[dict[str, Any]]], command: str, split: str) -> str:
    lines = [START, "",
             f"Generated by `{command}` on {time.strftime('%Y-%m-%d')} "
             f"({platform.machine()}, Python {platform.python_version()}).", "",
             f"Split: **{split}**. Hits@k (H@k) = % of turns with a relevant passage in the top "
             "k; MRR over the top 100. Article level: a hit is any passage of the turn's topic "
             "article (retrieval-evaluable turns); answer level: a passage containing the "
             "answer (answer-evaluable turns). Per-run timings are in the .json file.", ""]
    for corpus, results in all_results.items():
        for level in ("article", "answer"):
            lines += [f"### {corpus} corpus, {level} level", ""]
            lines += main_table(results, level) + [""]
            lines += ["<details><summary>by question type, every metric</summary>", ""]
            lines += breakdown_table(results, level) + ["", "</details>", ""]
    lines.append(END)
    return "\n".join(lines)


def write_markdown(out: Path, block: str) -> None:
    if out.exists():
        text = out.read_text(encoding="utf-8")
        if START in text and END in text:
            before, rest = text.split(START, 1)
            after = rest.split(END, 1)[1]
            block = before + block + after
        else:
            block = "# Retrieval results\n\n" + block + "\n"
    else:
        block = "# Retrieval results\n\n" + block + "\n"
    with atomic_write(out) as handle:
        handle.write(block if block.endswith("\n") else block + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="append", required=True, metavar="NAME=DIR",
                        help="a benchmark folder, e.g. vital=/tmp/bench/vital (repeatable)")
    parser.add_argument("--systems", metavar="YAML", help="systems file (default: BM25 shortcuts)")
    parser.add_argument("--split", default="dev", choices=("train", "dev", "all"))
    parser.add_argument("--out", default="docs/results/retrieval.md", metavar="FILE")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="run cache (default ~/.cache/convqa/runs)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--no-cache", action="store_true", help="retrieve again, ignore the cache")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        corpora = {}
        for item in args.corpus:
            name, sep, folder = item.partition("=")
            if not sep or not name or not folder:
                raise ConfigError(f"--corpus {item!r}: expected NAME=DIR")
            corpora[name] = Path(folder)
        systems = load_systems(args.systems)
        all_results: dict[str, list[dict[str, Any]]] = {}
        for name, folder in corpora.items():
            all_results[name] = []
            for system in systems:
                if name not in system.get("corpora", [name]):
                    continue  # e.g. a dense index built for the vital corpus only
                spec = substitute(system["retriever"], folder)
                ensure_bm25_indexes(spec, folder, not args.quiet)
                result = evaluate_retrieval(
                    folder, spec, substitute(system.get("history", "oldest_first"), folder),
                    split=args.split, cache_dir=args.cache_dir, batch_size=args.batch_size,
                    progress=not args.quiet, label=system["label"],
                    use_cache=not args.no_cache)
                result["corpus_name"] = name
                all_results[name].append(result)
                overall = result["levels"]["article"]["groups"]["all"]
                print(f"{name:6s} {system['label']:45s} H@5 {pct(overall['hits@5']):>5s} "
                      f"H@20 {pct(overall['hits@20']):>5s} H@100 {pct(overall['hits@100']):>5s}"
                      f"{' (cached)' if result['cached'] else ''}", file=sys.stderr)
    except ConvQAError as exc:
        print(f"retrieval_table: error: {exc}", file=sys.stderr)
        return 2
    command = "python scripts/retrieval_table.py " + " ".join(shlex.quote(a) for a in
                                                               (argv if argv is not None
                                                                else sys.argv[1:]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_markdown(out, render(all_results, command, args.split))
    write_json(out.with_suffix(".json"), {"command": command, "split": args.split,
                                          "results": all_results})
    print(f"wrote {out} and {out.with_suffix('.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
