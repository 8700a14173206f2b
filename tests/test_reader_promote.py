"""convqa/front/tools/promote_reader.py and convqa/front/tools/plot_reader_curve.py on a real (tiny-model) training
run over real SQuAD questions: the export is compared with the shipped reader on the same
held-out questions and installed only when better, with a model card that keeps the previous
card under History; the curve PNG is drawn from the run's log."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import shared_file
from convqa.front.tools import answer_checks, plot_reader_curve, promote_reader, reader_card
from readers.extractive.model import ExtractiveReader
from readers.extractive.run import ReaderRunConfig, run_reader_training
from readers.extractive.train import ReaderTrainConfig
from reader_helpers import save_tiny_encoder
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

OLD_CARD = "# convqa-reader: old\n\n## Scores\n\n| source | F1 |\n|---|---|\n| squad | 12.3 |\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished run: a tiny encoder trained 6 steps on real SQuAD v2.0 questions, with
    held-out scores every 2 steps."""
    root = tmp_path_factory.mktemp("promote")
    encoder = save_tiny_encoder(root / "encoder")
    config = ReaderRunConfig(
        squad=[str(shared_file("squad/dev-v2.0.json"))], init_model=str(encoder),
        max_length=128, negatives=2, max_examples=24, max_heldout=8, eval_examples=4,
        train=ReaderTrainConfig(batch_size=4, passages_per_question=2, max_steps=6, lr=5e-3,
                                warmup_ratio=0.0, progress=False, checkpoint_every=2,
                                eval_every=2, eval_per_source=8))
    run_reader_training(config, root / "run", say=lambda _: None)
    return root / "run"


def shipped_copy(run: Path, folder: Path) -> Path:
    """An 'assets' folder holding the run's own model as a LoRA export, and an old card."""
    promote_reader.export_candidate(run / "model", folder, rank=4)
    (folder / "README.md").write_text(OLD_CARD)
    return folder


def test_curve_plot(run, tmp_path):
    out = tmp_path / "curve.png"
    assert plot_reader_curve.main([str(run), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()
              if "heldout" in line]
    assert [p["step"] for p in points] == [0, 2, 4, 6]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "log.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    assert plot_reader_curve.main([str(empty), "--out", str(tmp_path / "x.png")]) == 2



def test_curve_history_keeps_points_of_earlier_run_folders(run, tmp_path):
    """A run continued on another machine starts a new folder: the history file keeps the
    earlier points; the run's records win where both have a step."""
    plot = plot_reader_curve
    history = tmp_path / "curve.jsonl"
    earlier = [{"step": 0, "heldout": {"f1": 1.5, "sources": {}, "count": 8}, "from": "old"},
               {"step": 2, "heldout": {"f1": 99.0, "sources": {}, "count": 8}, "from": "old"},
               {"step": 10, "loss": 4.0, "loss_steps": 10}, {"step": 20, "loss": 3.0,
                                                            "loss_steps": 10}]
    history.write_text("".join(json.dumps(r) + "\n" for r in earlier))
    out = tmp_path / "curve.png"
    argv = [str(run), "--out", str(out), "--history", str(history), "--update-history"]
    assert plot.main(argv) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    merged = [json.loads(line) for line in history.read_text().splitlines()]
    log = plot.read_log(run)
    held = {r["step"]: r for r in merged if "heldout" in r}
    assert sorted(held) == [0, 2, 4, 6]
    run_points = {r["step"]: r["heldout"] for r in log if "heldout" in r}
    assert all(held[step]["heldout"] == run_points[step] for step in run_points)  # run wins
    losses = {r["step"]: r for r in merged if "loss" in r}
    run_losses = [r["loss"] for r in log if "loss" in r and "heldout" not in r]
    assert len(run_losses) == 6  # steps 1-6: one bucket (steps 1-10) replaces the history's
    assert losses[10]["loss"] == pytest.approx(sum(run_losses) / 6, abs=1e-6)
    assert losses[10]["loss_steps"] == 6 and losses[20]["loss"] == 3.0
    before = history.read_text()
    assert plot.main(argv) == 0
    assert history.read_text() == before  # merging again changes nothing

def test_an_equal_reader_is_not_promoted(run, tmp_path):
    promote = promote_reader
    assets = shipped_copy(run, tmp_path / "reader-extractive")
    before = {p.name: p.read_bytes() for p in assets.iterdir()}
    result = promote.promote(run, assets, per_source=8, seed=0, rank=4, min_gain=0.0,
                             curve=None, say=lambda _: None)
    assert not result["promoted"]
    assert result["candidate"]["f1"] == result["shipped"]["f1"]
    assert result["candidate"]["sample"] == result["shipped"]["sample"]
    assert {p.name: p.read_bytes() for p in assets.iterdir()} == before


def test_a_better_reader_is_installed_with_its_card_and_history(run, tmp_path):
    promote = promote_reader
    assets = shipped_copy(run, tmp_path / "reader-extractive")
    old_fingerprint = json.loads((assets / "convqa_reader.json").read_text())["fingerprint"]
    curve = tmp_path / "docs" / "reader-curve.png"
    # "better" by the rule's own margin: a negative min_gain makes an equal reader qualify
    result = promote.promote(run, assets, per_source=8, seed=0, rank=4, min_gain=-1.0,
                             curve=curve, say=lambda _: None)
    assert result["promoted"] and result["steps"] == 6 and result["examples_seen"] == 24
    assert curve.exists()
    card = (assets / "README.md").read_text()
    assert card.startswith(reader_card.HEADER.format(alias="convqa-reader"))
    assert "It is the default reader" in card
    assert "Steps: 6" in card and "questions seen: 24" in card
    assert "squad:dev-v2.0" in card and str(curve) in card
    history = card.split("## History", 1)[1]
    assert old_fingerprint in history and "| squad | 12.3 |" in history
    assert "#### Scores" in history  # the old card's headings sit under its History entry
    saved = json.loads((assets / "heldout.json").read_text())
    assert saved["candidate"]["f1"] == result["candidate"]["f1"]
    reader = ExtractiveReader.from_pretrained(assets)
    assert reader.has_adapters
    # a second promotion keeps both earlier cards
    promote.promote(run, assets, per_source=8, seed=0, rank=4, min_gain=-1.0, curve=None,
                    say=lambda _: None)
    history = (assets / "README.md").read_text().split("## History", 1)[1]
    assert history.count("### Until") == 2 and "| squad | 12.3 |" in history
    assert not [p for p in assets.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def test_a_first_reader_of_another_family_creates_its_folder_against_a_baseline(run, tmp_path):
    """A large reader has no folder of its own yet: it is compared with the reader it must
    beat (`baseline`), and only a better one becomes the folder, with int8 factors and a card
    under its own alias and no History."""
    from convqa.lora_storage import INT8_FILE

    promote = promote_reader
    from readers.extractive.decoding import Decoding, Fusion, NoAnswer
    from readers.extractive.model import write_decoding

    baseline = shipped_copy(run, tmp_path / "reader-extractive")
    abstain = NoAnswer({"selection": 1.0}, -1.0, 0.5)
    write_decoding(baseline, Decoding(Fusion(0.0, 0.1, 0.25), no_answer=abstain,
                                      after_reranker=Decoding(Fusion(0.0, 0.05, 2.0),
                                                              no_answer=abstain)))
    large = tmp_path / "reader-extractive-large"
    with pytest.raises(Exception, match="--baseline"):
        promote.promote(run, large, per_source=8, seed=0, rank=4, min_gain=0.0, curve=None,
                        say=lambda _: None)
    result = promote.promote(run, large, per_source=8, seed=0, rank=4, min_gain=0.0,
                             curve=None, say=lambda _: None, baseline=baseline,
                             alias="convqa-reader-large", int8=True)
    assert not result["promoted"] and not large.exists()  # equal is not better
    result = promote.promote(run, large, per_source=8, seed=0, rank=4, min_gain=-1.0,
                             curve=None, say=lambda _: None, baseline=baseline,
                             alias="convqa-reader-large", int8=True)
    assert result["promoted"] and result["baseline"] == str(baseline)
    assert (large / INT8_FILE).exists()
    card = (large / "README.md").read_text()
    assert card.startswith(reader_card.HEADER.format(alias="convqa-reader-large"))
    assert "default reader" not in card and "## History" not in card
    assert str(baseline) in card and "with int8 factors" in card
    reader = ExtractiveReader.from_pretrained(large)
    recorded = json.loads((large / "convqa_reader.json").read_text())["fingerprint"]
    assert reader.fingerprint() == recorded  # the int8 factors reload to what was measured
    saved = json.loads((large / "heldout.json").read_text())
    assert saved["candidate"]["fingerprint"] == recorded
    # it reads with the baseline's passage choice, after a reranker too; no-answer
    # calibrations fit one reader's logits and stay behind
    decoding = Decoding.from_dict(json.loads((large / "convqa_reader.json").read_text())
                                  ["decoding"], large)
    assert decoding.fusion == Fusion(0.0, 0.1, 0.25) and decoding.no_answer is None
    assert decoding.after_reranker == Decoding(Fusion(0.0, 0.05, 2.0))


def test_refusals(run, tmp_path):
    promote = promote_reader
    assert promote.main([str(tmp_path), "--assets", str(tmp_path)]) == 2  # no run there
    not_reader = tmp_path / "assets"
    not_reader.mkdir()
    assert promote.main([str(run), "--assets", str(not_reader), "--curve", ""]) == 2


def test_a_run_in_progress_is_read_from_its_checkpoint(run, tmp_path):
    import shutil

    promote = promote_reader
    live = tmp_path / "live"
    shutil.copytree(run / "data", live / "data")
    shutil.copytree(run / "model", live / "checkpoint" / "model")
    schedule = json.loads((run / "training.json").read_text())["config"]["schedule"]
    (live / "checkpoint" / "state.json").write_text(json.dumps(
        {"step": 4, "schedule": schedule, "processes": 1}))
    weights, facts = promote.snapshot(live, tmp_path / "copy")
    assert weights == live / "checkpoint" / "model" and facts["steps"] == 4
    assert not facts["finished"] and reader_card.examples_seen(facts) == 16
    assert (tmp_path / "copy" / "convqa_reader.json").exists()
    result = promote.promote(live, shipped_copy(run, tmp_path / "assets"), per_source=8,
                             seed=0, rank=4, min_gain=0.0, curve=None, dry_run=True,
                             say=lambda _: None)
    assert result["steps"] == 4 and not result["promoted"]


README_QUESTION = ("Who directed 2001: A Space Odyssey?", "Stanley Kubrick")


@pytest.fixture(scope="module")
def embedded_cache(tmp_path_factory):
    """A cache of the embedded corpus for the checks (`convqa answer`'s default pipeline)."""
    return tmp_path_factory.mktemp("embedded-cache")


def test_checks_run_the_readme_question_through_the_default_pipeline(run, tmp_path,
                                                                      embedded_cache,
                                                                      monkeypatch):
    monkeypatch.setenv("CONVQA_CACHE", str(embedded_cache))
    promote = promote_reader
    assert answer_checks.parse_check(answer_checks.README_CHECK) == README_QUESTION
    with pytest.raises(promote.ConvQAError, match="expected QUESTION=ANSWER"):
        answer_checks.parse_check("no answer given")
    from convqa.models import ASSETS_DIR, SHIPPED_MODELS

    # the shipped reader answers the README's question exactly; a 6-step tiny reader does not
    assert answer_checks.failed_checks(ASSETS_DIR / SHIPPED_MODELS["convqa-reader"],
                                 [README_QUESTION]) == []
    tiny = answer_checks.failed_checks(run / "model", [README_QUESTION])
    assert len(tiny) == 1 and "expected 'Stanley Kubrick'" in tiny[0]


def test_decline_checks_want_no_answer_where_the_collection_has_none(embedded_cache,
                                                                     monkeypatch):
    monkeypatch.setenv("CONVQA_CACHE", str(embedded_cache))
    promote = promote_reader
    from convqa.models import ASSETS_DIR, SHIPPED_MODELS

    decline = answer_checks.parse_decline(answer_checks.DECLINE_CHECK)
    assert decline == ("What is the capital of Australia?", None)
    with pytest.raises(promote.ConvQAError, match="expected a question"):
        answer_checks.parse_decline("  ")
    shipped = ASSETS_DIR / SHIPPED_MODELS["convqa-reader"]
    # the embedded collection names no capital of Australia: the shipped reader declines
    assert answer_checks.failed_checks(shipped, [decline]) == []
    # a question it can answer, expected to be declined, fails and names what was said
    wrong = answer_checks.failed_checks(shipped, [(README_QUESTION[0], None)])
    assert len(wrong) == 1 and "'Stanley Kubrick'" in wrong[0]
    assert wrong[0].endswith("(expected no answer)")
    # and a declined question expected to have an answer says it got none
    missing = answer_checks.failed_checks(shipped, [(decline[0], "Canberra")])
    assert missing == ["'What is the capital of Australia?' -> no answer (expected 'Canberra')"]


def test_checks_can_run_through_a_model_family_pipeline(embedded_cache, monkeypatch):
    """--model-family large asks the questions as `convqa answer --model-family large` does: the
    family's reranker before the candidate reader (a large reader's confidence is calibrated
    for reranked passages only)."""
    monkeypatch.setenv("CONVQA_CACHE", str(embedded_cache))
    import convqa.front.paths as paths
    from convqa.errors import ConfigError
    from convqa.front.families import FAMILIES
    from convqa.models import ASSETS_DIR, SHIPPED_MODELS

    # the family's second stage needs all-mpnet-base-v2, which this cache lacks; the family's
    # first reranker is what this test follows (tests/test_families.py checks the second)
    from dataclasses import replace

    monkeypatch.setitem(FAMILIES, "large", replace(FAMILIES["large"], rerank_second_stage=None))
    built = []
    real_build = paths.build
    monkeypatch.setattr(paths, "build", lambda path, progress=True: (
        built.append(path), real_build(path, progress))[1])
    shipped = ASSETS_DIR / SHIPPED_MODELS["convqa-reader"]
    assert answer_checks.failed_checks(shipped, [README_QUESTION], family="large") == []
    assert built[-1].reader["model"] == str(shipped)
    assert built[-1].reranker.options == {"model": FAMILIES["large"].reranker,
                                          "top_n": FAMILIES["large"].rerank_top_n,
                                          **FAMILIES["large"].rerank_shortlist}
    assert answer_checks.failed_checks(shipped, [README_QUESTION]) == []
    assert built[-1].reranker is None
    with pytest.raises(ConfigError, match="--model-family must be one of"):
        answer_checks.failed_checks(shipped, [README_QUESTION], family="huge")


def test_a_better_reader_that_fails_a_check_is_not_promoted(run, tmp_path, embedded_cache,
                                                            monkeypatch):
    monkeypatch.setenv("CONVQA_CACHE", str(embedded_cache))
    promote = promote_reader
    assets = shipped_copy(run, tmp_path / "reader-extractive")
    before = {p.name: p.read_bytes() for p in assets.iterdir()}
    said = []
    result = promote.promote(run, assets, per_source=8, seed=0, rank=4, min_gain=-1.0,
                             curve=None, say=said.append, checks=[README_QUESTION])
    assert not result["promoted"] and len(result["failed_checks"]) == 1
    assert said[-1].startswith("not promoted: check failed: 'Who directed")
    assert {p.name: p.read_bytes() for p in assets.iterdir()} == before


def test_card_of_a_continued_run_says_where_its_time_starts(run):
    schedule = json.loads((run / "training.json").read_text())["config"]["schedule"]
    scores = {"fingerprint": "f", "count": 1, "em": 1.0, "f1": 2.0,
              "sources": {"squad:dev-v2.0": {"em": 1.0, "f1": 2.0, "count": 1}}}
    for start, expected in ((0, False), (1400, True)):
        facts = {"steps": 1600, "finished": False, "processes": 2,
                 "schedule": {**schedule, "start_step": start}}
        card = reader_card.model_card(run, facts, {"rank": 4}, scores, scores, None, OLD_CARD,
                                  "old", seconds=7200.0)
        assert "training time 2.0 h of optimizer steps" in card
        assert ("since step 1,400 (the run continued an earlier one" in card) == expected
        assert f"questions seen: {1600 * schedule['batch_size'] * 2:,}" in card


def test_a_decoding_calibrated_for_the_same_weights_goes_with_the_candidate(run, tmp_path):
    promote = promote_reader
    from convqa.errors import DataError
    from convqa.io import load_json, write_json
    from readers.extractive.decoding import Decoding
    from readers.extractive.model import write_decoding

    block = {"fusion": {"selection": 0.0, "span": 0.1, "retriever": 0.25},
             "no_answer": {"weights": {"selection": 0.7, "answerable": -0.7}, "bias": -1.0,
                           "threshold": 0.3}}
    calibrated = tmp_path / "calibrated"
    export = promote.export_candidate(run / "model", calibrated, rank=4)
    write_json(calibrated / "export_report.json", export)
    write_decoding(calibrated, Decoding.from_dict(block, calibrated / "convqa_reader.json"))
    candidate = tmp_path / "candidate"
    fingerprint = promote.export_candidate(run / "model", candidate, rank=4)["tuned_fingerprint"]
    assert fingerprint == export["tuned_fingerprint"]

    said = []
    promote.take_decoding(calibrated, candidate, fingerprint, say=said.append)
    taken = Decoding.from_dict(load_json(candidate / "convqa_reader.json")["decoding"],
                               candidate / "convqa_reader.json")
    assert taken.to_dict() == Decoding.from_dict(block, calibrated).to_dict()
    assert said == [f"candidate reads with the decoding calibrated in {calibrated}"]

    with pytest.raises(DataError, match="calibrated for other weights"):
        promote.take_decoding(calibrated, candidate, "0" * 24)
    # a confidence calibrated behind a reranker only (after_reranker) is a calibration too
    reranked = {"fusion": block["fusion"],
                "after_reranker": {"fusion": block["fusion"], "no_answer": block["no_answer"]}}
    write_decoding(calibrated, Decoding.from_dict(reranked, calibrated))
    promote.take_decoding(calibrated, candidate, fingerprint, say=said.append)
    assert (load_json(candidate / "convqa_reader.json")["decoding"]
            == Decoding.from_dict(reranked, calibrated).to_dict())
    write_decoding(calibrated, Decoding.from_dict({"fusion": block["fusion"]}, calibrated))
    with pytest.raises(DataError, match="no calibrated no-answer confidence"):
        promote.take_decoding(calibrated, candidate, fingerprint)
    (calibrated / "export_report.json").unlink()
    with pytest.raises(DataError, match="no export_report.json"):
        promote.take_decoding(calibrated, candidate, fingerprint)


def test_a_better_candidate_not_installed_is_kept_then_promoted_without_its_run(run, tmp_path):
    """--keep: a dry run that finds a better reader writes it with its card and facts; the
    kept folder is a reader, and promoting it later installs it as the run would have been,
    on the same held-out sample, with the run's data and steps on the card."""
    promote = promote_reader
    from convqa.errors import DataError
    from convqa.front.tools import reader_candidate
    from convqa.model_install import sha256_of

    assets = shipped_copy(run, tmp_path / "reader-extractive")
    before = {p.name: p.read_bytes() for p in assets.iterdir()}
    kept = tmp_path / "candidates" / "reader"
    said = []
    equal = promote.promote(run, assets, per_source=8, seed=0, rank=4, min_gain=0.0,
                            curve=None, dry_run=True, say=lambda _: None, keep=kept)
    assert "kept" not in equal and not kept.exists()  # not better: nothing kept
    result = promote.promote(run, assets, per_source=8, seed=0, rank=4, min_gain=-1.0,
                             curve=None, dry_run=True, say=said.append, keep=kept)
    assert not result["promoted"] and result["kept"] == str(kept)
    assert {p.name: p.read_bytes() for p in assets.iterdir()} == before
    record = json.loads((kept / reader_candidate.CANDIDATE_FILE).read_text())
    assert record["facts"]["steps"] == 6 and record["not_installed"] == "dry run"
    assert record["heldout"]["sha256"] == sha256_of(run / "data" / "heldout.jsonl")
    card = (kept / "README.md").read_text()
    assert card.startswith("# Candidate for convqa-reader")
    assert "was not installed: dry run" in card and "squad:dev-v2.0" in card
    assert "better than `convqa-reader`" in card  # the shipped reader by its alias
    assert ExtractiveReader.from_pretrained(kept).has_adapters

    # a candidate that reads no better than the one kept, on the same held-out file, leaves it
    kept_bytes = (kept / reader_candidate.CANDIDATE_FILE).read_bytes()
    said.clear()
    same = promote.promote(run, assets, per_source=8, seed=0, rank=4, min_gain=-1.0,
                           curve=None, dry_run=True, say=said.append, keep=kept)
    assert "kept" not in same and any(line.startswith("not kept:") for line in said)
    assert (kept / reader_candidate.CANDIDATE_FILE).read_bytes() == kept_bytes
    # one that reads better than the kept one replaces it
    lower = json.loads(kept_bytes)
    lower["scores"]["candidate"] = result["candidate"]["f1"] - 1.0
    (kept / reader_candidate.CANDIDATE_FILE).write_text(json.dumps(lower))
    assert promote.promote(run, assets, per_source=8, seed=0, rank=4, min_gain=-1.0,
                           curve=None, dry_run=True, say=lambda _: None,
                           keep=kept)["kept"] == str(kept)
    assert json.loads((kept / reader_candidate.CANDIDATE_FILE).read_text())["scores"] == \
        record["scores"]

    # promoted later from the kept folder alone (the run's held-out file named)
    moved = tmp_path / "elsewhere" / "reader"
    moved.parent.mkdir()
    kept.rename(moved)
    stale = json.loads((moved / reader_candidate.CANDIDATE_FILE).read_text())
    stale["heldout"]["path"] = str(tmp_path / "gone" / "heldout.jsonl")
    (moved / reader_candidate.CANDIDATE_FILE).write_text(json.dumps(stale))
    with pytest.raises(DataError, match="held-out examples of this candidate's run are gone"):
        promote.promote(moved, assets, per_source=8, seed=0, rank=4, min_gain=-1.0,
                        curve=None, say=lambda _: None)
    again = promote.promote(moved, assets, per_source=8, seed=0, rank=4, min_gain=-1.0,
                            curve=None, say=lambda _: None,
                            heldout=run / "data" / "heldout.jsonl")
    assert again["promoted"] and again["candidate"]["f1"] == result["candidate"]["f1"]
    assert again["candidate"]["sample"] == result["candidate"]["sample"]
    installed = (assets / "README.md").read_text()
    assert installed.startswith(reader_card.HEADER.format(alias="convqa-reader"))
    assert "Steps: 6" in installed and "squad:dev-v2.0" in installed
    assert not (assets / reader_candidate.CANDIDATE_FILE).exists()
    assert ExtractiveReader.from_pretrained(assets).fingerprint() == \
        ExtractiveReader.from_pretrained(moved).fingerprint()


def test_the_shipped_reader_passes_the_readme_questions_on_answer_odds(embedded_cache,
                                                                     monkeypatch):
    """On the embedded collection the capital of Australia draws passages of four state
    capitals, each as likely to answer: `answer_odds` is low for the shipped reader's best
    answer ("Melbourne") and high for "Stanley Kubrick"; its calibration weighs it and declines
    the first, answers the second."""
    from convqa.front.paths import default_pipeline
    from readers.extractive.decode import choose_span
    from readers.extractive.decoding import confidence_features

    shipped = Path(__file__).resolve().parents[1] / "convqa" / "assets" / "reader-extractive"
    monkeypatch.setenv("CONVQA_CACHE", str(embedded_cache))
    decline = answer_checks.parse_decline(answer_checks.DECLINE_CHECK)
    assert answer_checks.failed_checks(shipped, [decline, README_QUESTION]) == []

    pipeline = default_pipeline(embedded_cache, progress=False,
                                reader={"name": "extractive", "model": str(shipped)})
    reader = pipeline.reader
    assert reader.no_answer.weights.get("answer_odds", 0.0) > 0
    odds = {}
    for question in (decline[0], README_QUESTION[0]):
        result = pipeline.answer(question)
        spans = reader.passage_spans(reader.history.format(question, []), result.passages)
        choice = choose_span(spans, reader.strategy, reader.fusion,
                             [hit.score for hit in result.hits])
        odds[question] = confidence_features(choice, spans, result.passages,
                                             reader.config.null_option)["answer_odds"]
    assert odds[decline[0]] < 0 < 2 < odds[README_QUESTION[0]]


def test_the_card_module_example_runs():
    import doctest

    from convqa.front.tools import promotion_cards

    result = doctest.testmod(promotion_cards)
    assert result.attempted >= 2 and result.failed == 0
