"""convqa/front/tools/promote_phrase.py on a real (tiny-model) phrase run over real SQuAD questions: the
export is compared with the shipped model on the same held-out questions and installed only when
better and when it passes the check, with a card that keeps the previous card under History."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import shared_file
from convqa.errors import ConvQAError, DataError
from convqa.front.tools import export_lora, promote_phrase
from phrase_index.data import squad_phrase_examples
from phrase_index.model import PhraseModel
from phrase_index.train import PhraseTrainConfig, train_phrase_model
from phrase_model_helpers import phrase_config, tiny_base
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)

OLD_CARD = "# convqa-phrase: old\n\n## Scores\n\n| source | F1 |\n|---|---|\n| squad | 12.3 |\n"


@pytest.fixture(scope="module")
def squad_file():
    return str(shared_file("squad/dev-v2.0.json"))


@pytest.fixture(scope="module")
def run(tmp_path_factory, squad_file):
    """A phrase stage of 4 steps (no query stage) of a tiny model on real SQuAD questions."""
    root = tmp_path_factory.mktemp("promote-phrase")
    model = PhraseModel.build(phrase_config(base=str(tiny_base(root / "base"))))
    train = [e for e in squad_phrase_examples(squad_file, 0.1, 0, max_examples=16)
             if e.split == "train"]
    config = PhraseTrainConfig(batch_size=4, max_steps=4, lr=5e-3, warmup_ratio=0.0,
                               progress=False, checkpoint_every=2,
                               weights={"distill": 0.0})
    train_phrase_model(model, train, root / "run", config, None, None, say=lambda _: None)
    return root / "run"


def data(squad_file) -> dict:
    return {"squad": [squad_file], "benchmarks": [], "max_examples": 16,
            "heldout_fraction": 0.1, "seed": 0}


def shipped_copy(run: Path, folder: Path) -> Path:
    """An 'assets' folder holding the run's own model as a LoRA export, and an old card."""
    export = export_lora
    export.export_phrase(str(run / "phrase" / "model"), 4, str(folder), None,
                         export.EXACT_MODULES + export.SMALL_EMBEDDINGS)
    (folder / "README.md").write_text(OLD_CARD)
    return folder


def test_an_equal_model_is_not_promoted(run, tmp_path, squad_file):
    assets = shipped_copy(run, tmp_path / "assets")
    before = {p.name: p.read_bytes() for p in assets.iterdir() if p.is_file()}
    said: list[str] = []
    result = promote_phrase.promote(run, assets, data(squad_file), 4, 4, 0.0, say=said.append)
    assert not result["promoted"] and result["stage"] == "phrase" and result["steps"] == 4
    assert said[-1].startswith("not promoted: F1 ") and " is not above " in said[-1]
    assert result["candidate"]["f1"] == result["shipped"]["f1"]   # the same export
    assert list(result["candidate"]["sources"]) == ["squad:dev-v2.0"]
    assert result["candidate"]["count"] == 4
    assert {p.name: p.read_bytes() for p in assets.iterdir() if p.is_file()} == before


def test_a_better_model_is_installed_with_its_card_and_history(run, tmp_path, squad_file):
    assets = shipped_copy(run, tmp_path / "assets")
    result = promote_phrase.promote(run, assets, data(squad_file), 4, 4, -100.0,
                                              check=False, say=lambda _: None)
    assert result["promoted"]
    card = (assets / "README.md").read_text()
    assert card.startswith("# convqa-phrase: PRO-ConvQA phrase model")
    assert "Steps: 4 of the phrase stage; no query-side fine-tuning yet" in card
    assert "questions seen: 16" in card and "squad:dev-v2.0: 16 training questions" in card
    assert "## History" in card and "#### Scores" in card and "| squad | 12.3 |" in card
    report = json.loads((assets / "export_report.json").read_text())
    assert report["rank"] == 4 and set(report["towers"]) == {"phrase", "query"}
    assert PhraseModel.load(assets).has_adapters


def test_a_failed_check_blocks_the_promotion(run, tmp_path, squad_file, monkeypatch):
    promote = promote_phrase
    monkeypatch.setattr(promote, "failed_check", lambda folder, work: "answered 'Everest'")
    assets = shipped_copy(run, tmp_path / "assets")
    said: list[str] = []
    result = promote.promote(run, assets, data(squad_file), 4, 4, -100.0, say=said.append)
    assert not result["promoted"] and result["failed_check"] == "answered 'Everest'"
    assert said[-1] == f"not promoted: check failed: answered 'Everest'; {assets} unchanged"
    assert (assets / "README.md").read_text() == OLD_CARD


def test_the_shipped_model_passes_the_check(tmp_path):
    from convqa.models import shipped_model_path

    assert promote_phrase.failed_check(shipped_model_path("convqa-phrase"),
                                                 tmp_path) is None


def test_refusals(run, tmp_path, squad_file):
    promote = promote_phrase
    assets = shipped_copy(run, tmp_path / "assets")
    with pytest.raises(DataError, match="no held-out examples"):
        promote.promote(run, assets, {**data(squad_file), "squad": []}, 4, 4, 0.0)
    with pytest.raises(DataError, match="not a phrase model folder"):
        promote.promote(run, tmp_path, data(squad_file), 4, 4, 0.0)
    with pytest.raises(DataError, match="no phrase/ or query/ folder"):
        promote.promote(tmp_path, assets, data(squad_file), 4, 4, 0.0)
    assert promote.main([str(tmp_path / "missing"), "--squad", squad_file, "--assets",
                         str(assets)]) == 2


def test_open_domain_gate_refuses_a_model_that_retrieves_worse(run, tmp_path, squad_file,
                                                                monkeypatch):
    """A better gold-passage reader that answers worse from a whole-corpus index is refused."""
    promote = promote_phrase
    scores = {"candidate": 20.0, "shipped": 25.0}

    def fake_open_domain(folder, benchmark, work, index=None):
        which = "shipped" if Path(folder) == assets else "candidate"
        return {"turns": 9, "em": 0.0, "f1": scores[which]}

    monkeypatch.setattr(promote, "open_domain", fake_open_domain)
    assets = shipped_copy(run, tmp_path / "assets")
    said: list[str] = []
    result = promote.promote(run, assets, data(squad_file), 4, 4, -100.0, check=False,
                             benchmark="BENCH", say=said.append)
    assert not result["promoted"] and result["open_domain"]["candidate"]["f1"] == 20.0
    assert said[-1] == ("not promoted: open-domain F1 20.00 is below the shipped model's "
                        f"25.00; {assets} unchanged")
    assert (assets / "README.md").read_text() == OLD_CARD
    scores["candidate"] = 30.0
    assert promote.promote(run, assets, data(squad_file), 4, 4, -100.0, check=False,
                           benchmark="BENCH", say=lambda _: None)["promoted"]


def test_open_domain_answers_the_dev_turns_from_a_corpus_index(tmp_path):
    from phrase_model_helpers import tiny_phrase_model
    from training_helpers import make_benchmark

    bench = make_benchmark(tmp_path / "bench")
    tiny_phrase_model(seed=2).save(tmp_path / "model")
    promote = promote_phrase
    row = promote.open_domain(tmp_path / "model", str(bench), tmp_path / "work")
    assert row["turns"] > 0 and 0.0 <= row["f1"] <= 100.0 and "hits@5" in row
    built = list((tmp_path / "work").iterdir())
    assert len(built) == 1 and (built[0] / "phrase_index.json").exists()
    from phrase_index.sparse import SparsePrior

    assert SparsePrior.exists(built[0] / "sparse")  # answered with BM25, as the shipped index
    assert promote.open_domain(tmp_path / "model", str(bench), tmp_path / "work") == row


def query_stage_inputs(assets: Path, squad_file: str, max_steps: int):
    """(merged model of `assets`, training questions, query-stage config): the start of a
    `--query-only` run of that model, with `max_steps` steps checkpointed at each."""
    model = PhraseModel.load(assets)
    model.merge_adapters()
    train = [e for e in squad_phrase_examples(squad_file, 0.1, 0, max_examples=16)
             if e.split == "train"]
    config = PhraseTrainConfig(stage="query", batch_size=4, max_steps=max_steps, lr=5e-2,
                               warmup_ratio=0.0, progress=False, checkpoint_every=1,
                               pool_passages=8, weights={"query_side": 1.0, "turn": 0.0})
    return model, train, config


@pytest.fixture(scope="module")
def query_run(run, tmp_path_factory, squad_file):
    """A query-only run (2 steps) of a shipped-like rank-4 export of `run`'s model: what
    `convqa train phrase --query-only --init-model convqa-phrase` does."""
    root = tmp_path_factory.mktemp("promote-query")
    assets = shipped_copy(run, root / "assets")
    model, train, config = query_stage_inputs(assets, squad_file, max_steps=2)
    train_phrase_model(model, train, root / "run", None, config, None, None,
                       say=lambda _: None)
    return root / "run", assets


def test_a_query_only_run_is_promoted_with_the_shipped_phrase_side(query_run, tmp_path,
                                                                    squad_file):
    """Its export keeps the shipped phrase adapter byte for byte (indexes stay valid) and only
    the query tower changes; the card says so."""
    import shutil

    run, source = query_run
    assets = shutil.copytree(source, tmp_path / "assets")
    phrase_adapter = (assets / "adapter_model.safetensors").read_bytes()
    before = PhraseModel.load(assets)
    result = promote_phrase.promote(run, assets, data(squad_file), 4, 4, -100.0,
                                              check=False, say=lambda _: None)
    assert result["promoted"] and result["stage"] == "query" and result["steps"] == 2
    after = PhraseModel.load(assets)
    assert after.fingerprint() == before.fingerprint()
    assert after.full_fingerprint() != before.full_fingerprint()
    assert (assets / "adapter_model.safetensors").read_bytes() == phrase_adapter
    card = (assets / "README.md").read_text()
    assert "Steps: 2 of query-side fine-tuning only (`--query-only`)" in card
    assert json.loads((assets / "export_report.json").read_text())["phrase"] == \
        "kept from the source adapter"


def test_a_query_only_checkpoint_is_decided_by_open_domain_f1(query_run, tmp_path, squad_file,
                                                               monkeypatch):
    """While a query-only run trains, its checkpoint is the candidate; with --by open-domain
    the corpus F1 decides, even when the gold-passage mean is lower."""
    import shutil

    from phrase_index.train import train_stage
    from training_helpers import Killed, kill_after

    run, source = query_run
    live = tmp_path / "live"
    model, train, config = query_stage_inputs(source, squad_file, max_steps=3)
    with pytest.raises(Killed):
        train_stage(model, train, live / "query", config, on_step=kill_after(2))
    promote = promote_phrase
    scores = {"candidate": 30.0, "shipped": 30.0}
    seen_indexes = []

    def fake_open_domain(folder, benchmark, work, index=None):
        seen_indexes.append(index)
        return {"turns": 9, "em": 0.0, "f1": scores["shipped" if Path(folder) == assets
                                                    else "candidate"]}

    monkeypatch.setattr(promote, "open_domain", fake_open_domain)
    assets = shutil.copytree(source, tmp_path / "assets")
    kwargs = dict(check=False, benchmark="BENCH", by="open-domain", index=Path("IDX"),
                  say=lambda _: None)
    result = promote.promote(live, assets, data(squad_file), 4, 4, 0.0, **kwargs)
    assert not result["promoted"] and result["stage"] == "query" and not result["finished"]
    assert result["steps"] == 2
    assert result["decided_by"] == "open-domain" and seen_indexes == [Path("IDX")] * 2
    scores["candidate"] = 31.0
    assert promote.promote(live, assets, data(squad_file), 4, 4, 0.0, **kwargs)["promoted"]
    with pytest.raises(ConvQAError, match="needs a benchmark"):
        promote.promote(live, assets, data(squad_file), 4, 4, 0.0, by="open-domain")


def test_a_query_only_run_of_another_model_is_refused(query_run, run, tmp_path, squad_file):
    """The export keeps the shipped phrase side: a run that started elsewhere is refused."""
    other = tmp_path / "other"  # a local base, so it loads and the adapters are compared
    model = PhraseModel.build(phrase_config(base=str(tiny_base(tmp_path / "base", seed=5))))
    model.add_lora(r=4, alpha=8)
    model.save(other)
    with pytest.raises(DataError, match="another phrase model than the shipped one"):
        promote_phrase.promote(query_run[0], other, data(squad_file), 4, 4, -100.0,
                                         check=False, say=lambda _: None)
