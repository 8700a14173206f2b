#!/usr/bin/env python
"""Promote a reader training run's latest weights to the shipped `convqa-reader`, only if they
are better on the held-out questions.

    OMP_NUM_THREADS=1 python -m convqa.front.tools.promote_reader /tmp/work/runs/reader-all

1. The run's latest weights: RUN/model when it finished, else RUN/checkpoint/model (a run in
   progress: promoting does not disturb it).
2. Exported as the shipped reader is (convqa/front/tools/export_lora.py: a rank-64 LoRA adapter with the
   token-type and position embeddings, biases, LayerNorms and heads exact) into a temporary
   folder; a reader trained with --lora is saved as its own adapter.
3. That export and the shipped reader read the same held-out questions (RUN/data/heldout.jsonl,
   --per-source per source, a seeded sample), gold passage alone; the macro F1 over sources
   decides. Only when the export beats the shipped reader by more than --min-gain, and answers
   each --check question of the embedded default (`convqa answer`: dense retrieval, this reader)
   with exactly its expected text (default: the README's question, "Stanley Kubrick"), and
   declines each --decline question, one the collection cannot answer (default: "What is the
   capital of Australia?": no passage names Canberra), is it copied
   next to the assets folder and swapped in (two renames), with a model card (README.md:
   data, steps, examples seen, scores per source, the curve) whose "History" section keeps the
   previous card. Otherwise nothing under the assets folder changes. The candidate reads with
   the decoding its run carried from its initial reader, or with `--decoding FOLDER`'s: the
   passage choice and no-answer confidence `convqa train reader-decoding --write` calibrated on
   an export of the same weights, so the checks and the shipped folder use the new reader's
   own confidence.
4. The curve (--curve, default docs/results/reader-curve.png) is redrawn from RUN/log.jsonl
   merged with the curve's history beside it (reader-curve.jsonl: the earlier points of a run
   continued on other machines), which is updated.
5. `--keep DIR`: a candidate that beats the reader to beat but is not installed (a dry run, or
   a failed check) is written to DIR with a card and candidate.json (reader_candidate.py), to
   commit: the run's compute outlives its machine. A candidate already kept there that reads
   at least as well on the same held-out file stays. `promote_reader DIR --heldout FILE` later
   compares and installs the kept folder as it would the run.

A reader of another family gets its own folder and alias. The first large reader is compared
with the shipped one and creates its folder only when it beats it (its curve left out, so the
shipped reader's stays):

    python -m convqa.front.tools.promote_reader RUN --assets convqa/assets/reader-extractive-large \
        --alias convqa-reader-large --baseline convqa-reader --int8 --curve '' --per-source 30

Its checks go through the family's own pipeline with `--model-family large` (the reranker its
confidence is calibrated behind), as `convqa answer --model-family large` answers.

Exit status 0 either way; the last line says whether the reader was promoted.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from convqa.errors import ConvQAError, DataError, reports_errors

from .answer_checks import DECLINE_CHECK, README_CHECK, failed_checks, parse_check, parse_decline
from .promotion_cards import score_table
from .reader_card import DEFAULT_ALIAS, REPO, examples_seen, model_card, run_data_lines


def latest_weights(run: Path) -> tuple[Path, dict[str, Any]]:
    """(model folder, facts about the training so far) of a run folder."""
    from convqa.io import load_json

    finished = run / "training.json"
    if (run / "model").is_dir() and finished.exists():
        record = load_json(finished)
        config = record.get("config", {})
        return run / "model", {"steps": record["steps"], "finished": True,
                               "processes": record.get("processes", 1),
                               "schedule": config.get("schedule", {})}
    state = run / "checkpoint" / "state.json"
    if not state.exists():
        raise DataError("no finished model and no checkpoint yet (not a `convqa train reader` "
                        "run, or one that has not reached its first checkpoint)", run)
    record = load_json(state)
    return run / "checkpoint" / "model", {"steps": record["step"], "finished": False,
                                          "processes": record.get("processes", 1),
                                          "schedule": record.get("schedule", {})}


def snapshot(run: Path, into: Path, tries: int = 5) -> tuple[Path, dict[str, Any]]:
    """Copy the run's latest weights into `into` (a running training swaps its checkpoint
    folder every N steps: a copy taken while the step did not change is whole)."""
    for _ in range(tries):
        weights, facts = latest_weights(run)
        shutil.rmtree(into, ignore_errors=True)
        try:
            shutil.copytree(weights, into)
        except (FileNotFoundError, shutil.Error):
            continue  # swapped while copying
        if latest_weights(run)[1]["steps"] == facts["steps"]:
            return weights, facts
    raise DataError(f"the run's checkpoint changed during {tries} copies in a row", run)


def export_candidate(weights: Path, out: Path, rank: int, int8: bool = False) -> dict[str, Any]:
    """The run's weights as the shipped reader's kind of folder (adapter + heads); `int8`
    stores the LoRA factors as int8 (docs/training.md, "Adapters with int8 factors"): a large
    reader's adapter takes about half the bytes of fp16 factors."""
    from convqa.lora_storage import FP32, INT8
    from readers.extractive.model import ExtractiveReader

    tuned = ExtractiveReader.from_pretrained(weights)
    storage = INT8 if int8 else FP32
    if tuned.has_adapters:  # trained with --lora: its own adapter is the export
        if int8:
            raise ConvQAError(f"{weights}: a LoRA-trained reader is its own adapter; "
                              "store its factors with store_lora_int8 instead of --int8")
        tuned.save_pretrained(out, adapter_only=True)
        return {"tuned": str(weights), "tuned_fingerprint": tuned.fingerprint(), "lora": True,
                "base": tuned.config.model}
    from convqa.front.tools import export_lora as export
    exact = export.EXACT_MODULES + export.SMALL_EMBEDDINGS
    fingerprint, report = export.export_reader(str(weights), rank, str(out), None, exact,
                                               storage)
    return {"tuned": str(weights), "tuned_fingerprint": fingerprint, "rank": rank,
            "base": tuned.config.model, **export.store_export(out, storage, report)}


def carry_passage_choice(assets: Path, candidate: Path, say=print) -> None:
    """Give the candidate the shipped reader's passage choice (fusion, strategy, answer length,
    the fusion after a reranker) when it has none of its own, so it is compared and answers as
    the shipped one does; its
    no-answer calibration is not carried (a confidence fits one reader's logits): calibrate
    the new reader with `convqa train reader-decoding`."""
    from convqa.io import load_json
    from readers.extractive.decoding import Decoding
    from readers.extractive.model import META_FILE, write_decoding

    mine = load_json(candidate / META_FILE).get("decoding")
    shipped = load_json(assets / META_FILE).get("decoding")
    if mine or not shipped:
        return
    decoding = Decoding.from_dict(shipped, assets / META_FILE)
    after = decoding.after_reranker
    after = Decoding(after.fusion) if after is not None and after.fusion is not None else None
    kept = Decoding(decoding.fusion, decoding.strategy, decoding.max_answer_length,
                    after_reranker=after)
    if kept.to_dict():
        write_decoding(candidate, kept)
        say(f"candidate reads with the shipped passage choice {kept.to_dict()}")


def take_decoding(source: Path, candidate: Path, tuned_fingerprint: str, say=print) -> None:
    """Give the candidate the decoding block (passage choice and no-answer confidence) that
    `convqa train reader-decoding --write` calibrated in `source`, an export of the same
    weights: a confidence fits one reader's logits, so the export report of `source` must name
    the weights the candidate was exported from."""
    from convqa.io import load_json
    from readers.extractive.decoding import Decoding
    from readers.extractive.model import META_FILE, write_decoding

    report = source / "export_report.json"
    if not report.exists():
        raise DataError("no export_report.json: not an export of a run (export_lora), so the "
                        "weights it was calibrated for are unknown", source)
    calibrated_for = load_json(report).get("tuned_fingerprint")
    if calibrated_for != tuned_fingerprint:
        raise DataError(f"calibrated for other weights (fingerprint {calibrated_for}, the "
                        f"candidate's {tuned_fingerprint})", source)
    decoding = Decoding.from_dict(load_json(source / META_FILE).get("decoding") or {},
                                  source / META_FILE)
    after = decoding.after_reranker
    if decoding.no_answer is None and (after is None or after.no_answer is None):
        raise DataError("no calibrated no-answer confidence in its decoding block: run "
                        "`convqa train reader-decoding --reader FOLDER --write` first", source)
    write_decoding(candidate, decoding)
    say(f"candidate reads with the decoding calibrated in {source}")


def load_reader(folder: str | Path):
    from readers.extractive.model import ExtractiveReader

    reader = ExtractiveReader.from_pretrained(folder)
    if reader.has_adapters:
        reader.merge_adapters()
    return reader.eval()


def score(folder: str | Path, sample) -> dict[str, Any]:
    from readers.extractive.heldout import scores_by_source

    reader = load_reader(folder)
    return {"fingerprint": reader.fingerprint(), **scores_by_source(reader, sample)}


def install(candidate: Path, assets: Path) -> None:
    """Copy `candidate` next to `assets` and swap it in (two renames: a reader of the folder,
    or a kill, sees the old reader or the new one)."""
    from convqa.model_folder import replace_folder

    tmp = Path(tempfile.mkdtemp(prefix=f".{assets.name}.", suffix=".tmp", dir=assets.parent))
    try:
        shutil.rmtree(tmp)
        shutil.copytree(candidate, tmp)
        replace_folder(tmp, assets)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def promote(run: Path, assets: Path, per_source: int, seed: int, rank: int, min_gain: float,
            curve: Path | None, dry_run: bool = False, say=print,
            checks: list[tuple[str, str | None]] = (), baseline: str | Path | None = None,
            alias: str = DEFAULT_ALIAS, int8: bool = False,
            decoding: Path | None = None, keep: Path | None = None,
            heldout: Path | None = None, family: str | None = None) -> dict[str, Any]:
    """Compare the run's export with `baseline` (default: the reader in `assets`) and install
    it into `assets` when it is better. `assets` need not exist yet: a first large reader
    (`alias` convqa-reader-large) is compared with the shipped reader and becomes the folder.
    `decoding`: an export of the same weights whose decoding was calibrated
    (`take_decoding`); without it the candidate keeps the decoding its run carried from its
    initial reader, or takes the shipped passage choice.
    `run` may also be a candidate folder that `keep` wrote earlier (reader_candidate.py): it
    is compared as it is, on `heldout` (default: the held-out file its run had).
    `keep`: when the export beats the baseline but is not installed (a dry run or a failed
    check), write it there with a card and candidate.json.
    `family`: the checks run through that model family's pipeline (`failed_checks`)."""
    from convqa.front.tools import reader_candidate as kept_candidate
    from convqa.models import resolve_model
    from readers.extractive.data import load_examples
    from readers.extractive.heldout import heldout_sample

    record = (kept_candidate.candidate_record(run) if kept_candidate.is_kept_candidate(run)
              else None)
    heldout_path = _heldout_file(run, record, heldout, say)
    sample = heldout_sample(load_examples(heldout_path), per_source, seed)
    first = _first_reader_of(assets, baseline)
    against = baseline if baseline is not None else assets
    against_folder = Path(resolve_model(str(against)))
    with tempfile.TemporaryDirectory(prefix="convqa-promote-") as tmp:
        candidate = Path(tmp) / "reader"
        weights, facts, export = _prepare_candidate(run, record, candidate, rank, int8,
                                                    decoding, against_folder, say)
        say(f"candidate: {weights} (step {facts['steps']}); {len(sample)} held-out questions")
        new = score(candidate, sample)
        say(f"candidate export: F1 {new['f1']:.2f} (mean over sources)")
        old = score(against_folder, sample)
        say(f"reader to beat ({against}): F1 {old['f1']:.2f}")
        better = new["f1"] > old["f1"] + min_gain
        failed = failed_checks(candidate, checks, family) if better else []
        result = {"run": str(run), "alias": alias, "baseline": str(against),
                  "weights": str(weights), "steps": facts["steps"],
                  "examples_seen": examples_seen(facts), "candidate": new, "shipped": old,
                  "min_gain": min_gain, "failed_checks": failed,
                  "promoted": bool(better and not failed and not dry_run)}
        if record is not None:
            curve = None  # a kept folder has no run log to draw
        elif curve is not None and (run / "log.jsonl").exists():
            curve = _draw_curve(run, curve)
        if not result["promoted"]:
            why = (f"F1 {new['f1']:.2f} is not above {old['f1']:.2f} + {min_gain}" if not better
                   else "check failed: " + "; ".join(failed) if failed else "dry run")
            say(f"not promoted: {why}; {assets} unchanged")
            if better and keep is not None and record is None:
                kept_to = _keep_unless_held(candidate, Path(keep), run, facts, export, new, old,
                                            str(baseline) if baseline is not None else alias,
                                            alias, heldout_path, why, say)
                if kept_to:
                    result["kept"] = kept_to
            return result
        _install_with_card(candidate, assets, run, record, facts, export, result, curve,
                           alias, baseline=str(against) if first else None)
    say(f"promoted: {assets} now holds the reader of step {facts['steps']} "
        f"(F1 {new['f1']:.2f} > {old['f1']:.2f})")
    return result


def _heldout_file(run: Path, record: dict[str, Any] | None, heldout: Path | None,
                  say) -> Path:
    """The held-out examples to compare on: `heldout`, else the run's own (a kept candidate's:
    the file its run had)."""
    from convqa.front.tools import reader_candidate as kept_candidate

    if record is not None:
        return kept_candidate.heldout_file(run, record, heldout, say)
    path = heldout or run / "data" / "heldout.jsonl"
    if not path.exists():
        raise DataError("no held-out examples (data/heldout.jsonl)", run)
    return path


def _first_reader_of(assets: Path, baseline: str | Path | None) -> bool:
    """True when `assets` holds no reader yet (a new family's first); refuses a folder that
    is not a reader's, and a first reader without a `baseline` to beat."""
    first = not assets.exists()
    if not first and not (assets / "convqa_reader.json").exists():
        raise DataError("not a reader folder (no convqa_reader.json)", assets)
    if first and baseline is None:
        raise DataError("no reader here yet: name the reader to beat with --baseline", assets)
    return first


def _prepare_candidate(run: Path, record: dict[str, Any] | None, candidate: Path, rank: int,
                       int8: bool, decoding: Path | None, against_folder: Path,
                       say) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """Write the candidate folder (the run's export, or a kept candidate as it is) with the
    decoding it reads with; (weights, facts, export report)."""
    from convqa.front.tools import reader_candidate as kept_candidate

    if record is not None:
        weights, facts, export = run, record["facts"], record["export"]
        kept_candidate.prepare(run, candidate)
    else:
        weights, facts = snapshot(run, candidate.parent / "weights")
        export = {**export_candidate(candidate.parent / "weights", candidate, rank, int8),
                  "tuned": str(weights)}
    if decoding is not None:
        take_decoding(decoding, candidate, export["tuned_fingerprint"], say)
    elif record is None:
        carry_passage_choice(against_folder, candidate, say)
    return weights, facts, export


def _keep_unless_held(candidate: Path, keep: Path, run: Path, facts: dict[str, Any],
                      export: dict[str, Any], new: dict[str, Any], old: dict[str, Any],
                      baseline: str, alias: str, heldout_path: Path, why: str,
                      say) -> str | None:
    """Keep the candidate in `keep` unless a candidate there reads at least as well on the
    same held-out file; the folder kept to, or None."""
    from convqa.front.tools import reader_candidate as kept_candidate

    held = kept_candidate.kept_score(keep, heldout_path)
    if held is not None and held >= new["f1"]:
        say(f"not kept: {keep} holds a candidate that reads F1 {held:.2f} on the "
            "same held-out file")
        return None
    _keep(candidate, keep, run, facts, export, new, old, baseline, alias, heldout_path, why)
    say(f"kept: {keep} holds the candidate with its card")
    return str(keep)


def _install_with_card(candidate: Path, assets: Path, run: Path, record: dict[str, Any] | None,
                       facts: dict[str, Any], export: dict[str, Any], result: dict[str, Any],
                       curve: Path | None, alias: str, baseline: str | None) -> None:
    """Write the candidate's card (the previous card as its history) and reports, and swap it
    in for `assets`."""
    from convqa.io import load_json, write_json

    first = not assets.exists()
    seconds = record["training_seconds"] if record is not None else _training_seconds(run)
    old_meta = {} if first else load_json(assets / "convqa_reader.json")
    old_card = (assets / "README.md").read_text(encoding="utf-8") \
        if (assets / "README.md").exists() else ""
    (candidate / "README.md").write_text(
        model_card(run, facts, export, result["candidate"], result["shipped"], curve, old_card,
                   str(old_meta.get("fingerprint")), seconds, alias=alias, baseline=baseline,
                   data_lines=record["data_lines"] if record is not None else None),
        encoding="utf-8")
    write_json(candidate / "export_report.json", export)
    write_json(candidate / "heldout.json", {k: v for k, v in result.items()
                                            if k not in ("promoted", "failed_checks")})
    install(candidate, assets)


def _keep(candidate: Path, into: Path, run: Path, facts: dict[str, Any],
          export: dict[str, Any], new: dict[str, Any], old: dict[str, Any], baseline: str,
          alias: str, heldout_path: Path, why: str) -> None:
    """Keep a candidate that beat `baseline` but was not installed (reader_candidate.py)."""
    from convqa.front.tools import reader_candidate as kept_candidate
    from convqa.io import write_json
    from convqa.model_install import sha256_of

    record = {"alias": alias, "baseline": baseline, "run": str(run), "facts": facts,
              "export": export, "data_lines": run_data_lines(run),
              "training_seconds": _training_seconds(run),
              "heldout": {"path": str(heldout_path.resolve()),
                          "sha256": sha256_of(heldout_path)},
              "scores": {"candidate": new["f1"], "baseline": old["f1"]},
              "not_installed": why, "kept_on": _dt.date.today().isoformat()}
    write_json(candidate / "export_report.json", export)
    write_json(candidate / "heldout.json", {"candidate": new, "shipped": old,
                                            "baseline": baseline})
    try:
        hint = str(into.resolve().relative_to(REPO))
    except ValueError:
        hint = str(into)
    card = kept_candidate.candidate_card(alias, baseline, record, score_table(new, old), hint)
    kept_candidate.write_records(candidate, record, card)
    into.parent.mkdir(parents=True, exist_ok=True)
    install(candidate, into)


def _training_seconds(run: Path) -> float:
    total = 0.0
    with open(run / "log.jsonl", encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break
            if "loss" in record:
                total += float(record.get("seconds", 0.0))
    return total


def _draw_curve(run: Path, curve: Path) -> Path | None:
    """Redraw `curve` from the run, merged with the curve's history (CURVE.jsonl beside the
    PNG, updated: the long run's earlier points, from run folders on other machines)."""
    from convqa.front.tools import plot_reader_curve as module
    if not any("heldout" in r for r in module.read_log(run)):
        return None
    history = curve.with_suffix(".jsonl")
    return curve if module.main([str(run), "--out", str(curve), "--history", str(history),
                                 "--update-history"]) == 0 else None


@reports_errors("promote_reader")
def main(argv: list[str] | None = None) -> int:
    from convqa.front.families import add_family_argument
    from convqa.models import ASSETS_DIR, SHIPPED_MODELS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="reader training run folder (`convqa train reader --out`), "
                        "or a candidate folder kept by --keep")
    parser.add_argument("--assets", default=str(ASSETS_DIR / SHIPPED_MODELS["convqa-reader"]),
                        help="the shipped reader's folder (default: convqa-reader's)")
    parser.add_argument("--per-source", type=int, default=300,
                        help="held-out questions per source (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rank", type=int, default=64, help="LoRA rank of the export")
    parser.add_argument("--min-gain", type=float, default=0.0,
                        help="F1 points the run must beat the shipped reader by (default 0)")
    parser.add_argument("--curve", default=str(REPO / "docs" / "results" / "reader-curve.png"),
                        help="PNG of the held-out curve ('' for none)")
    parser.add_argument("--check", action="append", metavar="QUESTION=ANSWER",
                        help="a question the default `convqa answer` pipeline must answer with "
                        "exactly ANSWER using the candidate (repeatable; default the README's: "
                        f"{README_CHECK!r})")
    parser.add_argument("--decline", action="append", metavar="QUESTION",
                        help="a question the default `convqa answer` pipeline must answer with "
                        "\"no answer in the collection\" using the candidate (repeatable; "
                        f"default: {DECLINE_CHECK!r})")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the --check and --decline questions")
    add_family_argument(parser)  # the pipeline the --check and --decline questions go through
    parser.add_argument("--baseline", metavar="READER",
                        help="the reader to beat (alias or folder; default: the one in --assets, "
                             "required when --assets holds none yet)")
    parser.add_argument("--alias", default=DEFAULT_ALIAS,
                        help=f"the name the card gives the reader (default {DEFAULT_ALIAS})")
    parser.add_argument("--int8", action="store_true",
                        help="store the export's LoRA factors as int8 (a large reader's adapter "
                             "in about half the bytes of fp16)")
    parser.add_argument("--decoding", metavar="FOLDER",
                        help="an export of the run's same weights (export_lora) whose decoding "
                             "`convqa train reader-decoding --write` calibrated: the candidate "
                             "reads, is checked and ships with it (default: the decoding the run "
                             "carried from its initial reader)")
    parser.add_argument("--dry-run", action="store_true", help="compare only")
    parser.add_argument("--keep", metavar="DIR",
                        help="when the candidate beats the reader to beat but is not installed "
                             "(--dry-run or a failed check), write it to DIR with a card and "
                             "candidate.json, to commit and promote later without the run")
    parser.add_argument("--heldout", metavar="FILE",
                        help="held-out examples to compare on (default: RUN/data/heldout.jsonl, "
                             "or the file a kept candidate's run had)")
    parser.add_argument("--out", help="write the comparison as JSON")
    args = parser.parse_args(argv)
    checks = [] if args.no_check else (
        [parse_check(c) for c in args.check or [README_CHECK]]
        + [parse_decline(q) for q in args.decline or [DECLINE_CHECK]])
    result = promote(Path(args.run), Path(args.assets), args.per_source, args.seed,
                     args.rank, args.min_gain, Path(args.curve) if args.curve else None,
                     args.dry_run, checks=checks, baseline=args.baseline, alias=args.alias,
                     int8=args.int8, decoding=Path(args.decoding) if args.decoding else None,
                     keep=Path(args.keep) if args.keep else None,
                     heldout=Path(args.heldout) if args.heldout else None,
                     family=args.model_family)
    if args.out:
        from convqa.io import write_json

        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
