"""The `cross_encoder` reranker component: built from a dict or YAML like every component,
`rerank` reorders the retriever's top N by the model's scores and keeps the retriever's, and bad
input is a one-line error."""
from __future__ import annotations

import pytest

from convqa.config import apply_overrides, load_yaml
from convqa.corpus import PassageStore
from convqa.errors import ConfigError, DataError
from convqa.registry import RERANKERS
from convqa.types import Hit, Passage, RerankedHit, Turn
from reader_helpers import single_thread  # noqa: F401 (autouse fixture)
from reranker_helpers import scored_passages, tiny_cross_encoder
from retrievers.rerank.reranker import CrossEncoderReranker, order_agreement

PASSAGES = [Passage(f"p{i}", f"passage number {i} " + "about a harbour " * i, f"Title {i}")
            for i in range(6)]
HITS = [Hit(p.id, 20.0 - 2 * i, i + 1) for i, p in enumerate(PASSAGES)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("reranker") / "model"
    tiny_cross_encoder(seed=4).save_pretrained(path)
    return path


def test_built_from_a_dict_and_from_yaml_with_overrides(folder, tmp_path):
    reranker = RERANKERS.build({"name": "cross_encoder", "model": str(folder), "top_n": "3",
                                "precision": "fp32", "device": "cpu"})
    assert isinstance(reranker, CrossEncoderReranker)
    assert reranker.options.top_n == 3 and reranker.precision == "fp32"
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"reranker: {{name: cross_encoder, model: {folder}}}\n", encoding="utf-8")
    spec = apply_overrides(load_yaml(config), ["reranker.top_n=50", "reranker.batch_size=4"])
    built = RERANKERS.build(spec["reranker"])
    assert (built.options.top_n, built.options.batch_size) == (50, 4)
    assert built.history.registered_name == "current_first"  # the reader's format by default
    assert built.fingerprint() != reranker.fingerprint()  # top_n changes what comes out


@pytest.mark.parametrize("spec, message", [
    ({"name": "cross_encoder"}, "option 'model' .* is required"),
    ({"name": "cross_encoder", "model": "m", "top_k": 5}, "unknown option 'top_k'"),
    ({"name": "cross_encoder", "model": "m", "top_n": 0}, "top_n must be a positive integer"),
    ({"name": "cross_encoder", "model": "m", "precision": "fp8"}, "unknown precision 'fp8'"),
    ({"name": "cross", "model": "m"}, r"unknown reranker 'cross' \(known: cross_encoder\)"),
    ({"name": "cross_encoder", "model": "m", "rescore_within": -1}, "rescore_within must be"),
    ({"name": "cross_encoder", "model": "m", "rescore_within": 1, "rescore_at_least": 0},
     "rescore_at_least must be a positive integer"),
    ({"name": "cross_encoder", "model": "m",
      "second_stage": {"model": "m2", "rescore_within": 1}},
     "rescore_within, rescore_word_matches and rescore_pairs belong to the first"),
    ({"name": "cross_encoder", "model": "m", "second_stage": {"model": "m2", "rescore_pairs": 5}},
     "rescore_pairs belong to the first"),
    ({"name": "cross_encoder", "model": "m", "rescore_pairs": 10, "rescore_within": 3},
     "rescore_pairs and rescore_within are two ways"),
    ({"name": "cross_encoder", "model": "m", "rescore_pairs": 0},
     "rescore_pairs must be a positive integer"),
])
def test_bad_specs_are_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        RERANKERS.build(spec)


def test_rerank_orders_the_top_n_by_score_and_keeps_the_retrievers():
    model = tiny_cross_encoder(seed=4).eval()
    reranker = CrossEncoderReranker.from_model(model, top_n=4, precision="fp32")
    query = "where is the harbour?"
    reranked = reranker.rerank(query, HITS, PASSAGES)
    assert len(reranked) == 4 and all(isinstance(h, RerankedHit) for h in reranked)
    expected = reranker.score(query, PASSAGES[:4])
    assert [h.passage_id for h in reranked] == \
        [f"p{i}" for i in sorted(range(4), key=lambda i: -expected[i])]
    assert [h.rank for h in reranked] == [1, 2, 3, 4]
    assert [h.score for h in reranked] == sorted(expected, reverse=True)
    by_id = {h.passage_id: h for h in HITS}
    assert all((h.retriever_score, h.retriever_rank) ==
               (by_id[h.passage_id].score, by_id[h.passage_id].rank) for h in reranked)
    assert RerankedHit.from_dict(reranked[0].to_dict()) == reranked[0]
    # passages by id, or from a store, give the same ranking
    assert reranker.rerank(query, HITS, {p.id: p for p in PASSAGES}) == reranked
    assert reranker.rerank(query, [], []) == []


def test_rescore_within_rescores_only_hits_near_the_retrievers_best():
    model = tiny_cross_encoder(seed=4).eval()
    # p0-p2 close together, p3-p5 far below: z of 20, 19.5, 19, 8, 7, 6
    hits = [Hit(p.id, score, i + 1) for i, (p, score) in
            enumerate(zip(PASSAGES, [20.0, 19.5, 19.0, 8.0, 7.0, 6.0]))]
    query = "where is the harbour?"
    every = CrossEncoderReranker.from_model(model, top_n=6, precision="fp32",
                                            retriever_weight=0.5)
    near = CrossEncoderReranker.from_model(model, top_n=6, precision="fp32",
                                           retriever_weight=0.5, rescore_within=1.0,
                                           rescore_at_least=2)
    calls = scored_passages(near)
    all_hits = every.rerank(query, hits, PASSAGES)
    kept = near.rerank(query, hits, PASSAGES)
    assert calls == [["p0", "p1", "p2"]]  # the far hits cost nothing
    # the kept hits rank and score as among all six (standardised over the six; the scores
    # up to float noise: a batch of 3 is padded differently from one of 6)
    among_all = [h for h in all_hits if h.passage_id in {"p0", "p1", "p2"}]
    assert [h.passage_id for h in kept] == [h.passage_id for h in among_all]
    assert [h.rank for h in kept] == [1, 2, 3]
    assert [h.score for h in kept] == pytest.approx([h.score for h in among_all], abs=1e-6)
    assert [(h.retriever_score, h.retriever_rank) for h in kept] == \
        [(h.retriever_score, h.retriever_rank) for h in among_all]
    assert near.fingerprint() != every.fingerprint()
    # at_least keeps the first hits whatever their scores
    wide = CrossEncoderReranker.from_model(model, top_n=6, precision="fp32",
                                           rescore_within=0.0, rescore_at_least=4)
    assert sorted(h.passage_id for h in wide.rerank(query, hits, PASSAGES)) == \
        ["p0", "p1", "p2", "p3"]


def test_passages_from_a_store_and_the_conversation_formatted(tmp_path):
    store = PassageStore.build(PASSAGES, tmp_path / "store", progress=False)
    reranker = CrossEncoderReranker.from_model(tiny_cross_encoder(seed=4).eval(), top_n=6,
                                               precision="fp32")
    history = [Turn("tell me about ports", "there are many")]
    query = reranker.query_text("which one is largest?", history)
    assert query.startswith("which one is largest?")  # current question first
    assert reranker.rerank_turn("which one is largest?", history, HITS, store) == \
        reranker.rerank(query, HITS, PASSAGES)


def test_ties_keep_the_retrievers_order():
    model = tiny_cross_encoder(seed=4).eval()
    import torch

    with torch.no_grad():  # a head that ignores its input: every pair scores the same
        model.head.weight.zero_()
    reranker = CrossEncoderReranker.from_model(model, precision="fp32")
    assert [h.passage_id for h in reranker.rerank("q", HITS, PASSAGES)] == \
        [h.passage_id for h in HITS]


def test_scores_do_not_depend_on_batch_size_or_order():
    model = tiny_cross_encoder(seed=4).eval()
    one = CrossEncoderReranker.from_model(model, batch_size=1, precision="fp32")
    many = CrossEncoderReranker.from_model(model, batch_size=4, precision="fp32")
    reversed_scores = many.score("where?", PASSAGES[::-1])
    assert one.score("where?", PASSAGES) == pytest.approx(reversed_scores[::-1], abs=1e-5)


def test_auto_precision_is_measured_once_and_recorded():
    reranker = CrossEncoderReranker.from_model(tiny_cross_encoder(seed=4).eval())
    assert reranker.precision is None
    reranker.score("where?", PASSAGES)
    choice = reranker.precision_choice
    assert reranker.precision == choice.precision and choice.precision in ("fp32", "bf16", "int8")
    assert choice.agreement["fp32"] == 1.0 and choice.threshold == 0.95


def test_order_agreement():
    import torch

    reference = torch.tensor([3.0, 1.0, 2.0, 0.0])
    assert order_agreement(reference, reference * 2 + 1) == 1.0
    assert order_agreement(reference, -reference) == 0.0
    assert order_agreement(reference, torch.tensor([3.0, 2.0, 1.0, 0.0])) == pytest.approx(5 / 6)
    assert order_agreement(torch.tensor([1.0]), torch.tensor([-4.0])) == 1.0


def test_bad_input_is_a_one_line_error():
    reranker = CrossEncoderReranker.from_model(tiny_cross_encoder(), precision="fp32")
    with pytest.raises(DataError, match="5 passages for 6 hits"):
        reranker.rerank("q", HITS, PASSAGES[:5])
    with pytest.raises(DataError, match="passage 'p1' given for hit 'p0'"):
        reranker.rerank("q", HITS, PASSAGES[1:] + PASSAGES[:1])
    with pytest.raises(DataError, match="no passage for hit 'p5'"):
        reranker.rerank("q", HITS, {p.id: p for p in PASSAGES[:5]})
    with pytest.raises(DataError, match="expected the query text, got list"):
        reranker.rerank(["q"], HITS, PASSAGES)
    with pytest.raises(DataError, match="expected a Passage for hit 'p0', got str"):
        reranker.rerank("q", HITS[:1], ["p0 text"])


def test_a_second_stage_reorders_the_first_stages_top_n_by_its_own_logit(tmp_path):
    """A cascade: the first stage keeps its top_n, the second reads only its own top_n of those
    and returns them by its logit (ties in the first stage's order); both stages count in the
    fingerprint, and a bad second stage is a one-line error."""
    first_folder, second_folder = tmp_path / "first", tmp_path / "second"
    tiny_cross_encoder(seed=4).save_pretrained(first_folder)
    tiny_cross_encoder(seed=9).save_pretrained(second_folder)
    spec = {"name": "cross_encoder", "model": str(first_folder), "top_n": 5,
            "precision": "fp32", "device": "cpu"}
    alone = RERANKERS.build(spec)
    cascade = RERANKERS.build({**spec, "second_stage": {"model": str(second_folder),
                                                        "top_n": 3, "precision": "fp32"}})
    judge = RERANKERS.build({**spec, "model": str(second_folder), "top_n": 3})
    history = [Turn("what is a port?", "a harbour")]
    question = "where is the harbour?"
    first = alone.rerank_turn(question, history, HITS, PASSAGES)
    out = cascade.rerank_turn(question, history, HITS, PASSAGES)
    kept = [h.passage_id for h in first[:3]]
    assert len(out) == 3 and sorted(h.passage_id for h in out) == sorted(kept)
    by_id = {p.id: p for p in PASSAGES}
    logits = judge.score(judge.query_text(question, history), [by_id[i] for i in kept])
    expected = sorted(range(3), key=lambda i: (-logits[i], i))
    assert [h.passage_id for h in out] == [kept[i] for i in expected]
    assert [h.score for h in out] == pytest.approx([logits[i] for i in expected])
    original = {h.passage_id: (h.score, h.rank) for h in HITS}
    assert all((h.retriever_score, h.retriever_rank) == original[h.passage_id] for h in out)
    assert [h.rank for h in out] == [1, 2, 3]
    assert cascade.fingerprint() != alone.fingerprint()
    # a plain query (no conversation) goes through both stages too
    assert [h.passage_id for h in cascade.rerank(question, HITS, PASSAGES)] and \
        len(cascade.rerank(question, HITS, PASSAGES)) == 3
    # the model's name alone is a spec with the default top_n of 5
    short = RERANKERS.build({**spec, "second_stage": str(second_folder)})
    assert short.second.options.top_n == 5
    for bad, message in [({"model": str(second_folder), "second_stage": "x"},
                          "cannot have a second_stage"),
                         ({"model": str(second_folder), "top_k": 2}, "unknown option 'top_k'"),
                         ([1, 2], "second_stage")]:
        with pytest.raises(ConfigError, match=message):
            RERANKERS.build({**spec, "second_stage": bad})
