"""Phrase-model training on tiny random models: both stages, exact resume after a kill, the
ablation switches, the frozen phrase matrix, scoring, LoRA export, the CLI, refusals."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.errors import ConfigError, ConvQAError
from phrase_index.data import benchmark_phrase_examples
from phrase_index.model import PhraseModel
from phrase_index.export import export_adapter
from phrase_index.frozen_pool import FrozenPhrases
from phrase_index.in_passage import best_span_in_passage, chance_in_passage, evaluate_in_passage
from phrase_index.train import PhraseTrainConfig, PhraseTrainer, train_phrase_model, train_stage
from phrase_model_helpers import phrase_config, tiny_base, tiny_phrase_model
from reader_helpers import tiny_reader
from training_helpers import Killed, kill_after, make_benchmark
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    bench = make_benchmark(tmp_path_factory.mktemp("phrase-train") / "bench")
    return [e for e in benchmark_phrase_examples(bench) if e.split == "train"]   # 7 turns


def config(**overrides) -> PhraseTrainConfig:
    base = dict(batch_size=2, epochs=2, lr=5e-3, warmup_ratio=0.0, progress=False,
                checkpoint_every=0)
    return PhraseTrainConfig(**{**base, **overrides})


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def log(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def test_phrase_stage_trains_every_loss_and_resumes_exactly(examples, tmp_path):
    teacher = tiny_reader(seed=5)
    # 7 examples / batch 2 = 3 steps per epoch, 2 epochs
    straight = tiny_phrase_model(seed=1)
    done = train_stage(straight, examples, tmp_path / "a", config(), teacher)
    assert done.steps == 6 and (tmp_path / "a" / "model").is_dir()
    records = log(tmp_path / "a")
    assert [r["step"] for r in records] == list(range(1, 7))
    assert {"span", "distill", "filter", "in_batch", "pre_batch", "turn"} <= set(records[0])
    assert records[0]["pre_batch"] == 0.0 and records[1]["pre_batch"] > 0  # queue filled
    assert any(r["turn"] > 0 for r in records)  # c1_2, c1_3, c3_2... have turn t-1
    assert all(r["distill"] > 0 for r in records)
    start = state(tiny_phrase_model(seed=1))
    trained = state(straight)
    assert max((start[k] - trained[k]).abs().max().item() for k in start) > 1e-3

    resumed = tiny_phrase_model(seed=1)
    with pytest.raises(Killed):
        train_stage(resumed, examples, tmp_path / "b", config(checkpoint_every=2), teacher,
                    on_step=kill_after(5))
    assert (tmp_path / "b" / "checkpoint").is_dir()
    again = tiny_phrase_model(seed=1)
    result = train_stage(again, examples, tmp_path / "b", config(checkpoint_every=2), teacher)
    assert result.resumed_from == 4 and result.steps == 6
    assert [r["step"] for r in log(tmp_path / "b")] == list(range(1, 7))
    final = state(again)
    assert max((final[k] - trained[k]).abs().max().item() for k in final) < 1e-5
    # a finished run is returned as it is; other settings in the same folder are refused
    assert train_stage(tiny_phrase_model(seed=1), examples, tmp_path / "b",
                       config(checkpoint_every=2), teacher).steps == 6
    with pytest.raises(ConfigError, match="different settings"):
        train_stage(tiny_phrase_model(seed=1), examples, tmp_path / "b", config(lr=1e-3),
                    teacher)


def test_the_batch_wide_span_loss_is_off_by_default_and_trains_when_weighted(examples,
                                                                            tmp_path):
    assert config().weights["batch_span"] == 0.0
    plain = train_stage(tiny_phrase_model(seed=1), examples, tmp_path / "plain",
                        config(epochs=1, weights={"distill": 0.0}), None)
    assert plain.steps == 3 and "batch_span" not in log(tmp_path / "plain")[0]
    model = tiny_phrase_model(seed=1)
    train_stage(model, examples, tmp_path / "shared", config(epochs=1,
                weights={"batch_span": 1.0, "distill": 0.0}), None)
    records = log(tmp_path / "shared")
    # 2 questions of different passages per batch: the loss is above the own-passage one
    assert all(r["batch_span"] > 0 for r in records)
    assert any(r["batch_span"] > r["span"] for r in records)
    changed = state(model)
    reference = state(tiny_phrase_model(seed=1))
    assert max((changed[k] - reference[k]).abs().max().item() for k in changed) > 1e-3


def test_hard_negative_passages_raise_the_batch_wide_loss_and_train(tmp_path):
    bench = make_benchmark(tmp_path / "bench")
    mined = [e for e in benchmark_phrase_examples(bench, negatives=2) if e.split == "train"]
    weights = {"batch_span": 1.0, "distill": 0.0}
    with pytest.raises(ConfigError, match="batch-wide span loss"):
        config(hard_negatives=1)
    # an unset hard_negatives is not in the schedule key: runs from before it still resume
    assert "hard_negatives" not in config(weights=weights).schedule_key()
    assert config(weights=weights, hard_negatives=2).schedule_key()["hard_negatives"] == 2
    runs = {}
    for name, count in (("without", 0), ("with", 2)):
        model = tiny_phrase_model(seed=1)
        train_stage(model, mined, tmp_path / name,
                    config(epochs=1, weights=weights, hard_negatives=count), None)
        runs[name] = (log(tmp_path / name), state(model))
    without, with_negatives = runs["without"][0], runs["with"][0]
    # the same model, batches and own-passage loss at step 1; more passages in the batch-wide
    # normalization where the batch has negatives, so that loss is higher
    assert with_negatives[0]["span"] == pytest.approx(without[0]["span"], rel=1e-5)
    assert sum(r["batch_span"] > s["batch_span"] + 1e-4
               for r, s in zip(with_negatives, without)) >= 1
    assert all(r["batch_span"] >= s["batch_span"] - 1e-5
               for r, s in zip(with_negatives[:1], without[:1]))
    trained, plain = runs["with"][1], runs["without"][1]
    assert max((trained[k] - plain[k]).abs().max().item() for k in trained) > 1e-4


def test_auto_precision_probe_leaves_the_run_unchanged(examples, tmp_path, monkeypatch):
    """`auto` times the first batch in fp32 and bf16 at every (re)start (timings injected).
    Resumed with a filled pre-batch queue, the probe's loss passes leave no trace: the steps
    after it have the losses of a forced-fp32 run. A faster bf16 is picked and recorded."""
    from convqa import precision as P

    teacher = tiny_reader(seed=5)
    settings = dict(checkpoint_every=2)
    train_stage(tiny_phrase_model(seed=1), examples, tmp_path / "fp32", config(**settings),
                teacher)
    monkeypatch.setattr(P, "time_run", lambda name, run: ({"fp32": 1.0, "bf16": 6.0}[name],
                                                          run()))
    auto = config(**settings, precision="auto")
    with pytest.raises(Killed):
        train_stage(tiny_phrase_model(seed=1), examples, tmp_path / "auto", auto, teacher,
                    on_step=kill_after(3))
    result = train_stage(tiny_phrase_model(seed=1), examples, tmp_path / "auto", auto, teacher)
    assert result.resumed_from == 2 and result.steps == 6
    assert result.info["precision"]["precision"] == "fp32"
    assert set(result.info["precision"]["probe_seconds"]) == {"fp32", "bf16"}
    forced, probed = log(tmp_path / "fp32"), log(tmp_path / "auto")
    assert [r["step"] for r in probed] == list(range(1, 7))
    for a, b in zip(forced, probed):
        assert b["pre_batch"] == pytest.approx(a["pre_batch"], rel=1e-4, abs=1e-6)
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)

    monkeypatch.setattr(P, "time_run", lambda name, run: ({"fp32": 1.0, "bf16": 0.5}[name],
                                                          run()))
    fast = train_stage(tiny_phrase_model(seed=1), examples, tmp_path / "bf16",
                       config(max_steps=1, precision="auto"), teacher)
    assert fast.info["precision"]["precision"] == "bf16"
    with pytest.raises(ConfigError, match="int8 is for inference only"):
        config(precision="int8")


def test_the_teacher_reads_on_the_training_device(examples, tmp_path, monkeypatch):
    """The distillation teacher goes where the student trains (on a GPU it once stayed on the
    CPU, reading every batch there)."""
    teacher = tiny_reader(seed=5)
    moved = []
    to = teacher.to
    monkeypatch.setattr(teacher, "to", lambda *a, **k: moved.append(a[0]) or to(*a, **k))
    trainer = PhraseTrainer(tiny_phrase_model(seed=1), examples, tmp_path, config(), teacher)
    assert [torch.device(d) for d in moved] == [trainer.accelerator.device]
    assert trainer.teacher is teacher and not teacher.training
    no_teacher = PhraseTrainer(tiny_phrase_model(seed=1), examples, tmp_path / "none",
                               config(weights={"distill": 0.0}), teacher)
    assert no_teacher.teacher is None and len(moved) == 1


def test_ablation_switches_and_refusals(examples, tmp_path):
    no_turn = config(max_steps=2, weights={"turn": 0.0, "distill": 0.0, "filter": 0.0})
    model = tiny_phrase_model()
    filter_before = state(model.filter_head)
    train_stage(model, examples, tmp_path / "no-turn", no_turn)
    records = log(tmp_path / "no-turn")
    assert "turn" not in records[0] and "distill" not in records[0]
    # no filter loss: the filter head is frozen, not trained by accident
    assert all(torch.equal(filter_before[k], v) for k, v in model.filter_head.state_dict().items())
    with pytest.raises(ConfigError, match="no teacher"):
        PhraseTrainer(tiny_phrase_model(), examples, tmp_path / "x", config())
    with pytest.raises(ConfigError, match="unknown loss 'spam'"):
        config(weights={"spam": 1.0})
    with pytest.raises(ConfigError, match="not part of the query stage"):
        config(stage="query", weights={"span": 1.0})
    with pytest.raises(ConfigError, match="must be a number >= 0"):
        config(weights={"turn": -1.0})
    with pytest.raises(ConfigError, match="stage must be one of"):
        config(stage="both")
    with pytest.raises(ConvQAError, match="no phrase training examples"):
        PhraseTrainer(tiny_phrase_model(), [], tmp_path / "y", no_turn)
    with pytest.raises(ConfigError, match="too few"):
        train_stage(tiny_phrase_model(), examples[:1], tmp_path / "z", no_turn)


def test_frozen_phrases_search_within_one_window_and_max_tokens(examples):
    model = tiny_phrase_model(max_answer_tokens=3)
    passages = list({e.passage.id: e.passage for e in examples}.values())
    frozen = FrozenPhrases(model, passages)
    assert len(frozen) == sum(
        int(model.tokenize_passages([p.title], [p.text])["phrase_mask"].sum()) for p in passages)
    torch.manual_seed(0)
    queries = torch.randn(3, 32)
    found = frozen.search(queries, queries, starts=8, k=5)
    assert [len(f) for f in found] == [5, 5, 5]
    for q, phrases in zip(queries, found):
        keys = {(int(frozen.owners[a]), frozen.text(a, b)) for a, b in phrases}
        assert len(keys) == len(phrases)  # distinct phrases
        scores = []
        for a, b in phrases:
            assert 0 <= b - a < 3 and frozen.windows[a] == frozen.windows[b]
            scores.append(float(q @ frozen.vectors[a].float() + q @ frozen.vectors[b].float()))
        assert scores == sorted(scores, reverse=True)
        # the best phrase is the best pair among the top starts, checked by brute force
        matrix = frozen.vectors.float()
        best = max((float(q @ matrix[a] + q @ matrix[b]), a, b)
                   for a in (q @ matrix.T).topk(8).indices.tolist()
                   for b in range(a, min(a + 3, len(frozen)))
                   if frozen.windows[b] == frozen.windows[a])
        assert abs(best[0] - scores[0]) < 1e-4


def test_query_stage_freezes_the_phrase_side(examples, tmp_path):
    model = tiny_phrase_model(seed=2)
    fingerprint, full = model.fingerprint(), model.full_fingerprint()
    result = train_stage(model, examples, tmp_path / "q",
                         config(stage="query", max_steps=3, candidates=4, start_candidates=8))
    assert result.steps == 3
    records = log(tmp_path / "q")
    assert all("query_side" in r for r in records)
    assert any(r["query_side"] > 0 for r in records)
    assert model.fingerprint() == fingerprint  # an index built before stays valid
    assert model.full_fingerprint() != full
    saved = json.loads((tmp_path / "q" / "training.json").read_text())
    assert saved["fingerprint"] == fingerprint and saved["pool_phrases"] > 0


def test_both_stages_and_the_no_query_finetune_ablation(examples, tmp_path):
    teacher = tiny_reader(seed=5)
    final = train_phrase_model(tiny_phrase_model(), examples, tmp_path / "run",
                               config(max_steps=2), config(stage="query", max_steps=2),
                               teacher, say=lambda _: None)
    assert final == tmp_path / "run" / "model"
    phrase = PhraseModel.load(tmp_path / "run" / "phrase" / "model")
    both = PhraseModel.load(final)
    assert both.fingerprint() == phrase.fingerprint()
    assert both.full_fingerprint() != phrase.full_fingerprint()
    only = train_phrase_model(tiny_phrase_model(), examples, tmp_path / "only",
                              config(max_steps=2), None, teacher, say=lambda _: None)
    assert not (tmp_path / "only" / "query").exists()
    assert PhraseModel.load(only).full_fingerprint() == phrase.full_fingerprint()


def test_best_span_in_passage_by_hand():
    start = torch.tensor([0.0, 5.0, 1.0, 0.0, 9.0])
    end = torch.tensor([0.0, 0.0, 2.0, 7.0, 0.0])
    mask = torch.tensor([True, True, True, True, False])  # token 4 is not text
    assert best_span_in_passage(start, end, mask, 3) == (1, 3, 12.0)
    assert best_span_in_passage(start, end, mask, 2) == (2, 3, 8.0)   # 1..3 is 3 tokens long


def test_in_passage_scores_and_chance(examples):
    model = tiny_phrase_model(max_answer_tokens=4)
    result = evaluate_in_passage(model, examples, convention="squad")
    assert result["count"] == 7 and set(result["predictions"]) == {e.id for e in examples}
    for example in examples:
        assert result["predictions"][example.id] in example.passage.text
    chance = chance_in_passage(model, examples, convention="squad", samples=50)
    assert 0.0 < chance["f1"] < 60.0 and chance["em"] < chance["f1"]
    # a "model" whose vectors pick the gold span is perfect: check the scorer with the gold
    gold = [e.passage.text[slice(*e.spans[0])] for e in examples]
    from convqa.metrics.answer import score_answer
    assert all(score_answer(g, e.answers, "squad")["em"] == 1.0 for g, e in zip(gold, examples))


def test_lora_export_reproduces_the_tuned_model(tmp_path):
    base_dir = tiny_base(tmp_path / "base")
    cfg = phrase_config(base=str(base_dir))
    tuned = PhraseModel.build(cfg)
    torch.manual_seed(3)
    with torch.no_grad():
        for name, param in tuned.named_parameters():
            if "encoder.layer" in name and name.endswith("weight") and param.dim() == 2:
                param.add_(0.02 * torch.randn_like(param))
        tuned.query_end_head.bias.add_(0.5)
    adapter, report = export_adapter(PhraseModel.build(cfg), tuned, rank=32)
    assert report["phrase"]["rank"] == 32 and "query" in report
    adapter.save(tmp_path / "adapter")
    loaded = PhraseModel.load(tmp_path / "adapter")
    assert loaded.has_adapters
    enc = tuned.tokenize_passages(["Danube"], ["The Danube is 2850 kilometres long."])
    q = tuned.tokenize_queries(["how long is the danube?"])
    tuned.eval()
    loaded.eval()
    with torch.no_grad():
        a = tuned.encode_passages(enc["input_ids"], enc["attention_mask"]).start
        b = loaded.encode_passages(enc["input_ids"], enc["attention_mask"]).start
        qa = tuned.encode_queries(q["input_ids"], q["attention_mask"]).end
        qb = loaded.encode_queries(q["input_ids"], q["attention_mask"]).end
    assert torch.allclose(a, b, atol=1e-3) and torch.allclose(qa, qb, atol=1e-3)
    with pytest.raises(ConvQAError, match="two plain models"):
        export_adapter(loaded, tuned)


def test_cli_trains_both_stages_and_scores_held_out(tmp_path, capsys):
    from convqa.front.cli.main import main

    bench = make_benchmark(tmp_path / "bench")
    base = tiny_base(tmp_path / "base")
    out = tmp_path / "run"
    code = main(["train", "phrase", "--out", str(out), "--benchmark", str(bench),
                 "--init-model", str(base), "--teacher", "none", "--batch-size", "2",
                 "--max-steps", "2", "--query-max-steps", "1", "--max-passage-tokens", "64",
                 "--max-query-tokens", "32", "--turn-weight", "0", "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "held-out topiocqa-wiki:bench" in printed
    scores = json.loads((out / "eval.json").read_text())
    assert scores["sources"]["topiocqa-wiki:bench"]["count"] == 2   # c4_1, c4_2
    model = PhraseModel.load(out / "model")
    assert model.config.max_passage_tokens == 64
    phrase_log = log(out / "phrase")
    assert "turn" not in phrase_log[0] and "distill" not in phrase_log[0]
    assert main(["train", "phrase", "--out", str(tmp_path / "none"), "--benchmark", str(bench),
                 "--init-model", str(base), "--turn-weight", "-1", "--quiet"]) != 0
    assert "turn" in capsys.readouterr().err
    # hard negatives: mined from the benchmark's corpus, scored by the batch-wide span loss
    assert main(["train", "phrase", "--out", str(tmp_path / "hn0"), "--benchmark", str(bench),
                 "--init-model", str(base), "--hard-negatives", "1", "--quiet"]) != 0
    assert "--batch-span-weight" in capsys.readouterr().err
    code = main(["train", "phrase", "--out", str(tmp_path / "hn"), "--benchmark", str(bench),
                 "--init-model", str(base), "--teacher", "none", "--batch-size", "2",
                 "--max-steps", "1", "--no-query-finetune", "--max-passage-tokens", "64",
                 "--hard-negatives", "1", "--batch-span-weight", "1", "--eval-examples", "0",
                 "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "hn" / "phrase" / "training.json").read_text())[
        "config"]["hard_negatives"] == 1


def test_a_run_may_start_from_a_saved_phrase_model(tmp_path):
    """`--init-model` naming a saved phrase model continues from its towers and heads (with
    the run's length limits); other architecture settings are refused; a plain checkpoint
    still builds a new model."""
    from phrase_index.run import initial_phrase_model

    base = tiny_base(tmp_path / "base")
    saved = PhraseModel.build(phrase_config(base=str(base)))
    with torch.no_grad():
        saved.query_end_head.bias.add_(0.5)
    saved.save(tmp_path / "saved")
    start = initial_phrase_model({"base": str(tmp_path / "saved"), "max_answer_tokens": 7,
                                  "shared_query_encoder": False, "encoder_layers": None})
    assert start.config.max_answer_tokens == 7 and start.config.base == str(base)
    expected, got = state(saved), state(start)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert all(p.requires_grad for p in start.parameters())
    with pytest.raises(ConfigError, match="shared_query_encoder=False; this run asks for True"):
        initial_phrase_model({"base": str(tmp_path / "saved"), "shared_query_encoder": True})
    fresh = initial_phrase_model({"base": str(base)})
    assert not torch.equal(fresh.query_end_head.bias, start.query_end_head.bias)


def test_an_answer_longer_than_a_window_is_left_out_of_its_batch(examples, tmp_path):
    """A long answer (COVID-QA has paragraph-long ones) fits no passage window: training goes
    on without it and its final record counts it, where it used to stop the run mid-way."""
    from convqa.types import Passage
    from phrase_index.data import PhraseExample

    text = "Filler words come first here. " * 30
    long_answer = PhraseExample("long", "what is said?", [], Passage("p", text, "T"),
                                [(0, len(text))], answers=[text])
    data = [*examples[:3], long_answer, *examples[3:]]
    result = train_stage(tiny_phrase_model(seed=1), data, tmp_path / "run",
                         config(epochs=1, weights={"distill": 0.0}))
    assert result.steps == 4
    record = json.loads((tmp_path / "run" / "training.json").read_text())
    assert record["skipped_unfit_since_start"] == 1


def test_the_query_pool_adds_a_passage_store_and_searches_it_in_chunks(examples, tmp_path):
    """`pool_store` puts the corpus's passages (not only gold ones) in the frozen matrix, each
    once; the chunked search finds what one matrix product finds."""
    from convqa.corpus import PassageStore
    from phrase_index.frozen_pool import pool_passages

    bench = make_benchmark(tmp_path / "bench")
    gold = pool_passages(examples, 2, seed=0)
    assert len(gold) == 2
    with PassageStore.open(bench / "passages") as store:
        store_ids = list(store.ids())
    pooled = pool_passages(examples, 2, seed=0, store=str(bench / "passages"))
    ids = [p.id for p in pooled]
    assert ids[:2] == [p.id for p in gold] and len(ids) == len(set(ids))
    assert set(ids) == set(store_ids) | {p.id for p in gold}
    sampled = pool_passages(examples, 2, seed=0, store=str(bench / "passages"), store_size=3)
    assert 3 <= len(sampled) <= 5 and sampled == pool_passages(examples, 2, seed=0,
                                                       store=str(bench / "passages"),
                                                       store_size=3)
    model = tiny_phrase_model(max_answer_tokens=3)
    frozen = FrozenPhrases(model, pooled)
    torch.manual_seed(1)
    queries = torch.randn(2, 32)
    whole = frozen.search(queries, queries, starts=8, k=5)
    frozen.SEARCH_CHUNK = 7   # many chunks, some smaller than the 8 starts asked for
    assert frozen.search(queries, queries, starts=8, k=5) == whole


def test_a_query_only_run_keeps_the_start_models_phrase_adapter(tmp_path, capsys):
    """`--query-only`: no phrase stage, and the rank-R export keeps the saved model's phrase
    adapter as it is, so every index built with it serves the result (same fingerprint)."""
    from convqa.front.cli.main import main

    bench = make_benchmark(tmp_path / "bench")
    base = tiny_base(tmp_path / "base")
    source = PhraseModel.build(phrase_config(base=str(base)))
    source.add_lora(r=4, alpha=8)
    torch.manual_seed(4)
    with torch.no_grad():
        for name, param in source.named_parameters():
            if "lora_B" in name:
                param.add_(0.05 * torch.randn_like(param))
    source.save(tmp_path / "source")
    source = PhraseModel.load(tmp_path / "source")
    out = tmp_path / "run"
    code = main(["train", "phrase", "--out", str(out), "--benchmark", str(bench),
                 "--init-model", str(tmp_path / "source"), "--query-only",
                 "--pool-store", str(bench / "passages"), "--pool-passages", "2",
                 "--export-lora", "32", "--batch-size", "2", "--query-max-steps", "3",
                 "--query-lr", "1e-2", "--eval-examples", "0", "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert not (out / "phrase").exists() and (out / "query" / "model").is_dir()
    record = json.loads((out / "query" / "training.json").read_text())
    assert record["pool_phrases"] > 0 and (out / "query" / "frozen_pool.safetensors").exists()
    tuned, adapter = PhraseModel.load(out / "model"), PhraseModel.load(out / "adapter")
    # the saved model's length limits are kept when the command does not name any
    assert tuned.config == source.config and adapter.has_adapters
    assert tuned.fingerprint() == adapter.fingerprint() == source.fingerprint()
    assert adapter.full_fingerprint() != source.full_fingerprint()
    assert json.loads((out / "adapter_export.json").read_text())["phrase"] == \
        "kept from the source adapter"
    queries = tuned.tokenize_queries(["who wrote it?", "when was it built?"])
    vectors = {}
    for label, model in (("tuned", tuned), ("adapter", adapter), ("source", source)):
        model.eval()
        with torch.no_grad():
            vectors[label] = model.encode_queries(queries["input_ids"],
                                                  queries["attention_mask"]).start
    # the export reproduces the trained query tower up to what LoRA leaves out (embeddings)
    moved = (vectors["tuned"] - vectors["source"]).norm()
    assert moved > 0.5
    assert (vectors["adapter"] - vectors["tuned"]).norm() < 0.2 * moved
    assert main(["train", "phrase", "--out", str(tmp_path / "bad"), "--benchmark", str(bench),
                 "--init-model", str(base), "--query-only", "--quiet"]) != 0
    assert "needs a saved phrase model" in capsys.readouterr().err


def test_the_query_pool_is_cached_for_a_resumed_run(examples, tmp_path, monkeypatch):
    """A resumed query stage reads its pool back instead of encoding the corpus again; another
    phrase tower or other passages encode it anew."""
    passages = list({e.passage.id: e.passage for e in examples}.values())
    model = tiny_phrase_model(max_answer_tokens=3)
    path = tmp_path / "pool.safetensors"
    first = FrozenPhrases.cached(model, passages, path)
    assert path.exists()

    def no_encoding(*args, **kwargs):
        raise AssertionError("encoded again")

    with monkeypatch.context() as patch:
        patch.setattr(FrozenPhrases, "__init__", no_encoding)
        again = FrozenPhrases.cached(model, passages, path)
    assert torch.equal(again.vectors, first.vectors) and torch.equal(again.owners, first.owners)
    queries = torch.randn(2, 32)
    assert again.search(queries, queries, 8, 4) == first.search(queries, queries, 8, 4)
    assert again.text(0, 1) == first.text(0, 1)
    other = FrozenPhrases.cached(tiny_phrase_model(seed=9, max_answer_tokens=3), passages, path)
    assert not torch.equal(other.vectors, first.vectors)
    fewer = FrozenPhrases.cached(model, passages[:2], path)
    assert int(fewer.owners.max()) == 1
