"""ConvDR's results: fidelity to the teacher and retrieval on the OR-QuAC benchmark.

    python -m retrievers.convdr.orquac_bench build --orquac ../shared/data/orquac --out /tmp/orquac-bench
    convqa index --dense --passages /tmp/orquac-bench/passages --out /tmp/orquac-bench/indexes/minilm
    convqa index --bm25 --passages /tmp/orquac-bench/passages --out /tmp/orquac-bench/indexes/bm25
    python -m convqa.front.tools.convdr_table --bench /tmp/orquac-bench --runs runs \\
        --systems benchmarks/convdr_systems.yaml --out docs/results/convdr

Writes OUT.md and OUT.json. Rows whose model folder does not exist yet are skipped with a
note (so the table can be made while training runs). The TopiOCQA rows of ConvDR are in the
retrieval table (benchmarks/retrieval_systems.yaml).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from convqa.config import load_yaml
from convqa.errors import ConfigError, reports_errors
from convqa.io import load_json, write_json
from retrievers.convdr.orquac_bench import markdown_row, score_benchmark

HEADER = ("| retriever | input | n | MRR | Hits@1 | Hits@5 | Hits@20 | NDCG@3 |\n"
          "|---|---|---|---|---|---|---|---|")


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    return value


def _model_missing(spec: dict) -> str | None:
    model = spec.get("model")
    if spec.get("name") == "convdr" and model and not Path(model).exists():
        return model
    return None


def orquac_rows(systems: list[dict], names: dict[str, str], bench: str,
                progress: bool) -> tuple[list[dict], list[str]]:
    rows, notes = [], []
    for number, system in enumerate(systems, 1):
        if not isinstance(system, dict) or "retriever" not in system or "label" not in system:
            raise ConfigError(f"orquac system {number}: needs 'label' and 'retriever'")
        spec = _fill(system["retriever"], names)
        missing = _model_missing(spec)
        if missing:
            notes.append(f"skipped '{system['label']}': {missing} does not exist yet")
            continue
        history = system.get("history", "questions_only")
        result = score_benchmark(bench, spec, query_input=system.get("input", "conversation"),
                                 history=history, progress=progress)
        rows.append({"label": system["label"], "retriever": spec, "result": result})
    return rows, notes


def fidelity_rows(systems: list[dict], names: dict[str, str]) -> tuple[list[dict], list[str]]:
    rows, notes = [], []
    for system in systems:
        path = Path(_fill(system["model"], names)) / "fidelity.json"
        if not path.exists():
            notes.append(f"skipped fidelity of '{system['label']}': {path} does not exist yet")
            continue
        rows.append({"label": system["label"], "fidelity": load_json(path)})
    return rows, notes


def _fidelity_cells(stats: dict) -> str:
    cells = []
    for key in ("student", "zero_shot", "question_only"):
        value = stats.get(key) or {}
        cells.append(f"{value['cosine']:.3f} / {value['mse']:.5f}" if value else "-")
    return " | ".join(cells)


def _fidelity_table(rows: list[dict]) -> list[str]:
    lines = ["| model | turns | student(conversation) cos / MSE | zero-shot: teacher(conversation) "
             "cos / MSE | teacher(q_t alone) cos / MSE |", "|---|---|---|---|---|"]
    for row in rows:
        f = row["fidelity"]
        lines.append(f"| {row['label']} | {f.get('count', '-')} | {_fidelity_cells(f)} |")
        for source, stats in sorted((f.get("by_source") or {}).items()):
            lines.append(f"| {row['label']}: {source} | {stats.get('count', '-')} | "
                         f"{_fidelity_cells(stats)} |")
    return lines


def render(orquac: list[dict], fidelity: list[dict], notes: list[str]) -> str:
    lines = ["## OR-QuAC benchmark, label set 'reranker' (OR-QuAC train turns held out of ConvDR training)", "",
             HEADER]
    lines += [markdown_row(r["label"], r["result"], "reranker") for r in orquac]
    lines += ["", "## OR-QuAC benchmark, label set 'gold' (OR-QuAC sample turns)", "", HEADER]
    lines += [markdown_row(r["label"], r["result"], "gold") for r in orquac]
    if orquac:
        lines += ["", orquac[0]["result"]["labels"]]
    if fidelity:
        lines += ["", "## Fidelity (held-out CANARD / OR-QuAC turns)", ""] + _fidelity_table(fidelity)
    if notes:
        lines += [""] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


START, END = "<!-- convdr-table:start -->", "<!-- convdr-table:end -->"


def _write_block(path: Path, text: str) -> None:
    """Replace the generated block of an existing page (its prose stays), or write the page."""
    block = f"{START}\n{text}{END}\n"
    if path.exists():
        page = path.read_text(encoding="utf-8")
        if START in page and END in page:
            head, rest = page.split(START, 1)
            block = head + block + rest.split(END, 1)[1].lstrip("\n")
    path.write_text(block, encoding="utf-8")


@reports_errors("convdr_table")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True, help="OR-QuAC benchmark folder")
    parser.add_argument("--runs", default="runs", help="folder of the ConvDR training runs")
    parser.add_argument("--systems", default="benchmarks/convdr_systems.yaml")
    parser.add_argument("--out", required=True, help="output path without extension")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    config = load_yaml(args.systems)
    if not isinstance(config, dict):
        raise ConfigError(f"{args.systems}: expected a mapping with 'orquac' / 'fidelity'")
    names = {"bench": args.bench, "runs": args.runs}
    orquac, notes = orquac_rows(config.get("orquac") or [], names, args.bench,
                                not args.quiet)
    fidelity, more = fidelity_rows(config.get("fidelity") or [], names)
    text = render(orquac, fidelity, notes + more)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_block(out.with_suffix(".md"), text)
    write_json(out.with_suffix(".json"), {"orquac": orquac, "fidelity": fidelity,
                                          "notes": notes + more})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
