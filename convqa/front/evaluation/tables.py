"""The retrieval and end-to-end tables: run a systems file over targets, write Markdown, JSON, PNG.

    results = retrieval_table(targets, systems, split="dev")
    write_retrieval_outputs("docs/results/retrieval", results, command, "dev")

Retrieval table (DPR-IHN's Tables 2 and 4 on our data): a row per system with Hits@k and MRR
over all turns and Hits@5 / Hits@20 per question type, then every metric per question type;
one table per target and relevance level. End-to-end table (the TopiOCQA paper's Table 5
shape): a row per retriever + reader with EM / F1 for each number of passages read, per
question type at the largest, and the reader's time per question.

Outputs for OUT (`docs/results/retrieval` or `docs/results/retrieval.md`): OUT.md, OUT.json and
PNGs named OUT-{target}-{level}-hits.png / -types.png (retrieval) or OUT-{target}-em-f1.png /
-types.png (end to end), linked from the Markdown. When OUT.md exists and holds the table's
start and end markers, only the text between them is replaced, so notes around the tables
survive a rerun. Runs and predictions are cached by configuration (`convqa.front.evaluation`), so a
rerun after adding a system computes only the new rows.
"""
from __future__ import annotations

import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from convqa.io import atomic_write, write_json

from . import plots
from .phrase import scores_at
from .systems import Systems
from .targets import Target, run_answers, run_retrieval

RETRIEVAL_MARKERS = ("<!-- retrieval-table:start -->", "<!-- retrieval-table:end -->")
ANSWER_MARKERS = ("<!-- answer-table:start -->", "<!-- answer-table:end -->")
TYPES = ("first", "no-switch", "switch")
TYPE_KS = (5, 20)  # the per-type columns of the main retrieval table
LEVEL_NOTES = {
    "article": "article level: a hit is any passage of the turn's topic article "
               "(retrieval-evaluable turns)",
    "answer": "answer level: a passage of that article containing the answer "
              "(answer-evaluable turns)",
    "passage": "passage level: the gold passage of the official file",
}
PHRASE_NOTE = ("Phrase-index rows (PRO-ConvQA) have no reader: the best phrase of the index "
               "answers, once per question, shown in the first EM / F1 column and the per-type "
               "columns; their time is the whole answer (query encoding + phrase search).")
Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


# -- running ------------------------------------------------------------------------------------

def retrieval_table(targets: Sequence[Target], systems: Systems, split: str = "dev",
                    cache_dir: str | None = None, batch_size: int = 64, progress: bool = True,
                    use_cache: bool = True, levels: Sequence[str] | None = None,
                    log: Log = _stderr) -> dict[str, list[dict[str, Any]]]:
    """{target name: [one result per system that runs on it]}; one status line per row.
    Every target's turns are read (and checked) once, before the first row runs."""
    loaded = [target.load() for target in targets]
    all_results: dict[str, list[dict[str, Any]]] = {}
    for target, data in zip(targets, loaded):
        all_results[target.name] = []
        for system in systems.systems:
            if not system.runs_on(target.name):
                continue  # e.g. a dense index built for the vital corpus only
            started = time.perf_counter()
            result = run_retrieval(target, system, split, cache_dir, batch_size, progress,
                                   use_cache, levels, data)
            all_results[target.name].append(result)
            level = next(iter(result["levels"]), None)
            overall = result["levels"][level]["groups"]["all"] if level else {}
            scores = " ".join(f"H@{k} {pct(overall[f'hits@{k}']):>5s}" for k in result["ks"]
                              if f"hits@{k}" in overall)
            log(f"{target.name:6s} {system.label:45s} {scores}"
                f"{' (cached)' if result['cached'] else ''} "
                f"({time.perf_counter() - started:.1f} s)")
    return all_results


def answer_table(targets: Sequence[Target], systems: Systems, split: str = "dev",
                 cache_dir: str | None = None, progress: bool = True, use_cache: bool = True,
                 log: Log = _stderr) -> dict[str, list[dict[str, Any]]]:
    """{target name: [one end-to-end result per system that runs on it]}."""
    loaded = [target.load() for target in targets]
    all_results: dict[str, list[dict[str, Any]]] = {}
    for target, data in zip(targets, loaded):
        for system in systems.systems:
            if not system.runs_on(target.name):
                continue
            started = time.perf_counter()
            result = run_answers(target, system, systems.top_ks, split, cache_dir, progress,
                                 use_cache, data)
            all_results.setdefault(target.name, []).append(result)
            log(f"{target.name}: {system.label}: " + ", ".join(
                f"@{k} EM {scores['groups']['all']['em']:.1f}"
                for k, scores in result["by_k"].items())
                + f" ({time.perf_counter() - started:.0f} s)")
    return all_results


# -- Markdown -----------------------------------------------------------------------------------

def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _header(cells: Sequence[str]) -> list[str]:
    return [_row(cells), "|---" * len(cells) + "|"]


def retrieval_main_table(results: Sequence[dict[str, Any]], level: str) -> list[str]:
    """Rows: systems; columns: Hits@k and MRR over all turns, then Hits@5 / Hits@20 per type."""
    ks = results[0]["ks"]
    type_ks = [k for k in TYPE_KS if k in ks]
    lines = _header(["system", "n"] + [f"H@{k}" for k in ks] + ["MRR"]
                    + [f"{t} " + " / ".join(f"H@{k}" for k in type_ks) + " (n)" for t in TYPES])
    for result in results:
        groups = result["levels"][level]["groups"]
        overall = groups.get("all", {})
        if not overall.get("count"):
            lines.append(_row([result["label"], "0"] + ["-"] * (len(ks) + 1 + len(TYPES))))
            continue
        row = [result["label"], str(int(overall["count"]))]
        row += [pct(overall[f"hits@{k}"]) for k in ks] + [f"{overall['mrr']:.3f}"]
        for qtype in TYPES:
            g = groups.get(qtype)
            row.append(" / ".join(pct(g[f"hits@{k}"]) for k in type_ks)
                       + f" ({int(g['count'])})" if g and g.get("count") else "-")
        lines.append(_row(row))
    return lines


def retrieval_breakdown_table(results: Sequence[dict[str, Any]], level: str) -> list[str]:
    """Rows: system x question type; every metric."""
    ks = results[0]["ks"]
    lines = _header(["system", "turns", "n"] + [f"H@{k}" for k in ks] + ["MRR"])
    for result in results:
        groups = result["levels"][level]["groups"]
        for qtype in TYPES:
            g = groups.get(qtype)
            if g and g.get("count"):
                lines.append(_row([result["label"], qtype, str(int(g["count"]))]
                                  + [pct(g[f"hits@{k}"]) for k in ks] + [f"{g['mrr']:.3f}"]))
    return lines


def _levels(results: Sequence[dict[str, Any]]) -> list[str]:
    return list(results[0]["levels"]) if results else []


def _generated(command: str) -> str:
    return (f"Generated by `{command}` on {time.strftime('%Y-%m-%d')} "
            f"({platform.machine()}, Python {platform.python_version()}).")


def _images(images: dict[tuple[str, ...], list[Path]], key: tuple[str, ...], alt: str) -> list[str]:
    files = images.get(key, [])
    return [" ".join(f"![{alt}]({path.name})" for path in files), ""] if files else []


def render_retrieval(all_results: dict[str, list[dict[str, Any]]], command: str, split: str,
                     images: dict[tuple[str, ...], list[Path]] | None = None) -> str:
    """The Markdown block between the retrieval markers."""
    images = images or {}
    levels = list(dict.fromkeys(level for results in all_results.values()
                                for level in _levels(results)))
    notes = "; ".join(LEVEL_NOTES.get(level, level) for level in levels)
    lines = [RETRIEVAL_MARKERS[0], "", _generated(command), "",
             f"Split: **{split}**. Hits@k (H@k) = % of turns with a relevant passage in the top "
             f"k; MRR over the top 100. {notes[:1].upper() + notes[1:]}. Per-run timings are in "
             "the .json file.", ""]
    for corpus, results in all_results.items():
        for level in _levels(results):
            lines += [f"### {corpus} corpus, {level} level", ""]
            lines += retrieval_main_table(results, level) + [""]
            lines += _images(images, (corpus, level), f"{corpus}, {level} level")
            lines += ["<details><summary>by question type, every metric</summary>", ""]
            lines += retrieval_breakdown_table(results, level) + ["", "</details>", ""]
    lines.append(RETRIEVAL_MARKERS[1])
    return "\n".join(lines)


def answer_rows(results: Sequence[dict[str, Any]], top_ks: Sequence[int]) -> list[str]:
    top = max(top_ks)
    lines = _header(["system", "n"] + [f"EM / F1 @{k}" for k in top_ks]
                    + [f"{t} EM / F1 @{top} (n)" for t in TYPES] + ["reader ms p50 / p90"])
    for result in results:
        row = [result["label"], str(result["turns"])]
        for index, k in enumerate(top_ks):
            scores = result["by_k"].get(str(k))
            if result.get("phrase_index") is not None:  # one answer: in the first column only
                scores = scores_at(result, k) if index == 0 else None
            overall = scores["groups"]["all"] if scores else None
            row.append(f"{overall['em']:.1f} / {overall['f1']:.1f}" if overall else "-")
        at_top = scores_at(result, top)
        for qtype in TYPES:
            g = at_top["groups"].get(qtype)
            row.append(f"{g['em']:.1f} / {g['f1']:.1f} ({int(g['count'])})" if g else "-")
        ms = at_top["reader_ms"]
        row.append(f"{ms['p50']:.0f} / {ms['p90']:.0f}")
        lines.append(_row(row))
    return lines


def rerank_note(results: Sequence[dict[str, Any]]) -> list[str]:
    """A line under a table with reranked rows: what their reader read, the reranker's time."""
    reranked = [r for r in results if r.get("rerank")]
    if not reranked:
        return []
    times = "; ".join(
        f"{r['label']} {r['rerank']['ms_per_turn']['p50']:.0f} / "
        f"{r['rerank']['ms_per_turn']['p90']:.0f}" for r in reranked
        if r["rerank"].get("ms_per_turn"))
    cpu = reranked[0]["rerank"].get("cpu")
    return [f"Rows with a reranker read its best k of the retriever's top_n (at most top_n "
            f"passages; after a second stage, at most its top_n). Reranker ms per turn p50 / "
            f"p90 ({cpu}): {times}.", ""]


def render_answers(all_results: dict[str, list[dict[str, Any]]], top_ks: Sequence[int],
                   command: str, images: dict[tuple[str, ...], list[Path]] | None = None) -> str:
    """The Markdown block between the end-to-end markers."""
    images = images or {}
    lines = [ANSWER_MARKERS[0], "", _generated(command), "",
             "Answer-evaluable turns of a benchmark (every turn of an official file); EM / F1 "
             "in percent, TopiOCQA convention; the reader reads the top k passages of the "
             "retriever. Reader time per question at the largest k "
             f"({max(top_ks)} passages).", ""]
    if any(r.get("phrase_index") for results in all_results.values() for r in results):
        lines += [PHRASE_NOTE, ""]
    for corpus, results in all_results.items():
        lines += [f"### {corpus} corpus", ""] + answer_rows(results, top_ks) + [""]
        lines += rerank_note(results)
        lines += _images(images, (corpus,), f"{corpus} corpus")
    lines.append(ANSWER_MARKERS[1])
    return "\n".join(lines)


def write_block(path: Path, block: str, markers: tuple[str, str], title: str) -> None:
    """Replace the text between `markers` in `path`, or write a new file with a title."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if markers[0] in text and markers[1] in text:
        before, rest = text.split(markers[0], 1)
        block = before + block + rest.split(markers[1], 1)[1]
    else:
        block = f"# {title}\n\n" + block + "\n"
    with atomic_write(path) as handle:
        handle.write(block if block.endswith("\n") else block + "\n")


# -- output files -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outputs:
    """Where a table goes: OUT.md, OUT.json and OUT-*.png."""

    base: Path

    @classmethod
    def for_out(cls, out: str | Path) -> "Outputs":
        out = Path(out)
        return cls(out.with_name(out.name[:-3]) if out.name.endswith(".md") else out)

    @property
    def markdown(self) -> Path:
        return self.base.with_name(self.base.name + ".md")

    @property
    def json(self) -> Path:
        return self.base.with_name(self.base.name + ".json")

    def png(self, *parts: str) -> Path:
        safe = "-".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", part) for part in parts)
        return self.base.with_name(f"{self.base.name}-{safe}.png")


def write_retrieval_outputs(out: str | Path, all_results: dict[str, list[dict[str, Any]]],
                            command: str, split: str, with_plots: bool = True) -> list[Path]:
    """Write OUT.md, OUT.json and (with_plots) the PNGs; returns the files written."""
    outputs = Outputs.for_out(out)
    outputs.base.parent.mkdir(parents=True, exist_ok=True)
    images: dict[tuple[str, ...], list[Path]] = {}
    if with_plots:
        for corpus, results in all_results.items():
            for level in _levels(results):
                where = f"{corpus} corpus, {level} level, split {split}"
                hits, bars = outputs.png(corpus, level, "hits"), outputs.png(corpus, level, "types")
                plots.hits_curve(results, level, hits, f"Hits@k, {where}")
                k = 5 if 5 in results[0]["ks"] else results[0]["ks"][0]
                plots.type_bars(results, bars, f"Hits@{k} by question type, {where}",
                                f"hits@{k}", f"Hits@{k} (%)",
                                lambda r, level=level: r["levels"][level]["groups"], scale=100)
                images[(corpus, level)] = [hits, bars]
    write_block(outputs.markdown, render_retrieval(all_results, command, split, images),
                RETRIEVAL_MARKERS, "Retrieval results")
    write_json(outputs.json, {"command": command, "split": split, "results": all_results})
    return [outputs.markdown, outputs.json] + [p for files in images.values() for p in files]


def write_answer_outputs(out: str | Path, all_results: dict[str, list[dict[str, Any]]],
                         top_ks: Sequence[int], command: str,
                         with_plots: bool = True) -> list[Path]:
    """Write OUT.md, OUT.json ({target: [results]}) and the PNGs; returns the files written."""
    outputs = Outputs.for_out(out)
    outputs.base.parent.mkdir(parents=True, exist_ok=True)
    images: dict[tuple[str, ...], list[Path]] = {}
    if with_plots:
        top = str(max(top_ks))
        for corpus, results in all_results.items():
            curve, bars = outputs.png(corpus, "em-f1"), outputs.png(corpus, "types")
            plots.answer_curve(results, top_ks, curve, f"EM / F1 by passages read, {corpus}")
            plots.type_bars(results, bars, f"F1 by question type, top-{top}, {corpus}", "f1",
                            "F1 (%)", lambda r: scores_at(r, int(top))["groups"])
            images[(corpus,)] = [curve, bars]
    write_block(outputs.markdown, render_answers(all_results, top_ks, command, images),
                ANSWER_MARKERS, "End-to-end results")
    write_json(outputs.json, all_results)
    return [outputs.markdown, outputs.json] + [p for files in images.values() for p in files]
