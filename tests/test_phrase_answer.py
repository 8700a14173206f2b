"""Answering with a phrase index end to end: a tiny random phrase model over 30 real Wikipedia
passages, built by `convqa index --phrase` and asked real TopiOCQA questions through
`convqa answer --phrase-index` and `PhrasePipeline`; answers must slice the passage text
exactly. Also: a model or corpus that is not the index's is a one-line error."""
from __future__ import annotations

import itertools
import json

import numpy as np

import pytest
import torch

from conftest import shared_file
from convqa.front.cli.main import main
from convqa.corpus import PassageStore, iter_article_passages
from convqa.errors import ConvQAError
from convqa.types import Passage
from phrase_index.answerer import PhrasePipeline
from phrase_index.index import META_FILE
from phrase_model_helpers import one_thread, tiny_phrase_model
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(root, index folder): a saved tiny model, a store of 30 real passages, the index."""
    articles = shared_file("wikipedia/topiocqa_wiki_articles.jsonl.gz")
    root = tmp_path_factory.mktemp("phrase")
    passages = list(itertools.islice(iter_article_passages(articles), 30))
    PassageStore.build(passages, root / "store", progress=False)
    tiny_phrase_model(seed=0).save(root / "model")
    with one_thread():
        status = main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                       str(root / "store"), "--out", str(root / "index"), "--quiet",
                       "--batch-size", "8"])  # default: every candidate token kept
    assert status == 0
    return root, root / "index"


@pytest.fixture(scope="module")
def conversation():
    from convqa.loaders.topiocqa import load_topiocqa

    return load_topiocqa(shared_file("topiocqa/topiocqa_train.json.gz"))[1]


def check_answer(answer: dict | object, store: PassageStore) -> None:
    data = answer if isinstance(answer, dict) else answer.to_dict()
    passage = store.get(data["passage_id"])
    assert data["evidence"]["text"] == passage.text
    assert 0 <= data["start"] < data["end"] <= len(passage.text)
    assert passage.text[data["start"]:data["end"]] == data["text"]
    assert data["text"] == data["text"].strip() and data["text"]


def test_cli_builds_the_index_and_answers_with_exact_offsets(built, capsys):
    root, index = built
    store = PassageStore.open(root / "store")
    meta = json.loads((index / META_FILE).read_text())
    assert meta["count"] == 30 and meta["factory"] == {"start": "Flat", "end": "Flat"}
    assert meta["model"] == str((root / "model").resolve())
    assert meta["passages"] == str((root / "store").resolve())
    capsys.readouterr()
    assert main(["answer", "--phrase-index", str(index), "who was the first to define it?",
                 "--json", "--top-k", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    check_answer(out["answer"], store)
    ids = [hit["passage_id"] for hit in out["hits"]]
    assert 1 <= len(ids) <= 3 and len(set(ids)) == len(ids)
    assert ids[0] == out["answer"]["passage_id"]
    assert {"history", "encode", "search", "fetch"} <= set(out["timings_ms"])
    # the plain rendering marks the answer inside its passage
    assert main(["answer", "--phrase-index", str(index), "what is force?"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("answer: ") and "[[" in text


def test_pipeline_answers_real_turns_in_a_batch_as_one_by_one(built, conversation):
    _, index = built
    pipe = PhrasePipeline.from_folder(index, top_k=4, precision="fp32")
    turns = conversation.turns[:5]
    histories = [conversation.history(n) for n in range(1, 6)]
    batch = pipe.answer_batch([t.question for t in turns], histories)
    for turn, history, result in zip(turns, histories, batch):
        single = pipe.answer(turn.question, history)
        one, many = single.answer.to_dict(), result.answer.to_dict()
        # a padded batch may move the last float digits of a score, nothing else
        assert one.pop("score") == pytest.approx(many.pop("score"), rel=1e-5)
        assert one == many
        assert [h.passage_id for h in single.hits] == [h.passage_id for h in result.hits]
        # current question first, then the history newest first (PRO-ConvQA's window)
        assert result.query_text.startswith(turn.question.strip())
        check_answer(result.answer, pipe.store)
        assert len(result.hits) == len(result.passages) <= 4
        assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
        assert [p.id for p in result.passages] == [h.passage_id for h in result.hits]
        scores = [h.score for h in result.hits]
        assert scores == sorted(scores, reverse=True) and scores[0] == result.answer.score
    for spans in pipe.searcher.spans(*pipe.encode([batch[0].query_text]), k=20):
        for answer in pipe.searcher.answers(spans):
            check_answer(answer, pipe.store)
            assert len(answer.text.split()) <= pipe.index.max_answer_tokens


def test_another_model_or_corpus_is_a_one_line_error(built, capsys):
    root, index = built
    tiny_phrase_model(seed=1).save(root / "other-model")
    meta_path = index / META_FILE
    meta = json.loads(meta_path.read_text())
    try:
        meta_path.write_text(json.dumps({**meta, "model": str(root / "other-model")}))
        capsys.readouterr()
        assert main(["answer", "--phrase-index", str(index), "what is force?"]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("convqa answer: error: model mismatch: phrase index")
        assert "fingerprint" in err
    finally:
        meta_path.write_text(json.dumps(meta))
    other = PassageStore.build([Passage("x#0", "Some other text.", "X")] * 1,
                               root / "other-store", progress=False)
    with pytest.raises(ConvQAError, match="corpus mismatch") as error:
        PhrasePipeline.from_folder(index, passages=other.path)
    assert "\n" not in str(error.value)


def test_query_side_changes_keep_the_index_valid(built):
    """Query-side fine-tuning changes the query heads only: the phrase fingerprint, and so the
    index, stay valid, and the answers change."""
    root, index = built
    model = tiny_phrase_model(seed=0)
    with torch.no_grad():
        model.query_end_head.weight.mul_(-1.0)
    model.save(root / "query-tuned")
    base = PhrasePipeline.from_folder(index)
    tuned = PhrasePipeline.from_folder(index, model=root / "query-tuned")
    a, b = base.answer("what is force?"), tuned.answer("what is force?")
    assert a.answer.score != b.answer.score


def test_cli_refusals(built, tmp_path, capsys):
    root, index = built
    base = ["index", "--phrase", "--passages", str(root / "store"), "--quiet"]
    cases = [(base + ["--out", str(tmp_path / "a")], "--phrase needs --model"),
             (base + ["--out", str(tmp_path / "a"), "--model", str(root / "model"),
                      "--threshold", "high"], "--threshold must be a number or 'none'"),
             (base + ["--out", str(tmp_path / "a"), "--model", str(root / "model"),
                      "--k1", "0.9"], "BM25 options"),
             (base + ["--out", str(tmp_path / "a"), "--model", str(tmp_path)],
              "not a convqa phrase model"),
             (base + ["--out", str(tmp_path / "a"), "--model", str(root / "model"),
                      "--threshold", "0", "--keep", "0.3"], "do not go together"),
             (base + ["--out", str(tmp_path / "b"), "--model", str(root / "model"),
                      "--keep", "1.5"], "keep_fraction must be in (0, 1]"),
             (["answer", "--phrase-index", str(tmp_path), "hi"], "not a phrase index"),
             (["answer", "--phrase-index", str(index), "--set", "top_k=3", "hi"],
              "--phrase-index does not go with --config, --set, --rerank or --model-family"),
             (["answer", "--phrase-index", str(index), "--model-family", "large", "hi"],
              "--phrase-index does not go with --config, --set, --rerank or --model-family")]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    cases.append((base + ["--out", str(tmp_path / "notes"), "--model", str(root / "model"),
                          "--overwrite"], "exists and is not a phrase index"))
    for argv, message in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert message in err[-1], (argv, err[-1])
    assert (tmp_path / "notes" / "keep.txt").exists()


def test_rerun_resumes_instead_of_redumping(built, capsys):
    root, index = built
    shard = next((index / "dump").glob("shard-*")) / "tokens_vectors.npy"
    before = shard.stat().st_mtime_ns
    with one_thread():  # "--threshold none" is the default (keep all), spelled differently
        assert main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                     str(root / "store"), "--out", str(index), "--quiet", "--threshold",
                     "none"]) == 0
    assert shard.stat().st_mtime_ns == before
    assert "phrase index of 30 passages" in capsys.readouterr().out


def test_int8_and_ivf_pq_flags(built, tmp_path, capsys):
    root, keep_all = built
    out = tmp_path / "int8"
    with one_thread():
        assert main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                     str(root / "store"), "--out", str(out), "--quiet", "--int8",
                     "--factory", "IVF8,PQ4x4", "--keep", "0.5"]) == 0
    meta = json.loads((out / META_FILE).read_text())
    assert meta["dtype"] == "int8" and meta["factory"] == {"start": "IVF8,PQ4x4",
                                                           "end": "IVF8,PQ4x4"}
    # half of the candidate tokens are kept (thresholds from a 30-passage sample, here the
    # whole corpus)
    assert json.loads((out / "dump" / "manifest.json").read_text())["keep_fraction"] == 0.5
    every = json.loads((keep_all / META_FILE).read_text())["vectors"]
    for side in ("start", "end"):
        assert abs(meta["vectors"][side] / every[side] - 0.5) < 0.01
    capsys.readouterr()
    assert main(["answer", "--phrase-index", str(out), "what is force?", "--json"]) == 0
    check_answer(json.loads(capsys.readouterr().out)["answer"], PassageStore.open(root / "store"))


def test_compact_flag_builds_a_compact_index_that_answers(built, tmp_path, capsys):
    """`--compact` over 30 real passages (tiny model; 32 dims, so 8-byte codes): the dump
    keeps every token with its logits, the index keeps half of them, answers slice the text,
    a rerun reports the finished index, `--drop-dump` removes the dump."""
    root, keep_all = built
    out = tmp_path / "compact"
    argv = ["index", "--phrase", "--compact", "--model", str(root / "model"), "--passages",
            str(root / "store"), "--out", str(out), "--quiet", "--keep", "0.5",
            "--code-bytes", "8", "--search-bytes", "4", "--factory", "IVF4,PQ4", "--drop-dump"]
    with one_thread():
        assert main(argv) == 0
    said = capsys.readouterr().out
    assert "compact phrase index of 30 passages" in said and "bytes per passage" in said
    assert ", peak memory " in said
    meta = json.loads((out / META_FILE).read_text())
    assert meta["format"] == "convqa-phrase-compact-index" and meta["code_bytes"] == 8
    every = json.loads((keep_all / META_FILE).read_text())["vectors"]
    for side in ("start", "end"):
        assert abs(meta["vectors"][side] / every[side] - 0.5) < 0.05
    assert not (out / "dump").exists() and not (out / ".build").exists()
    assert main(["answer", "--phrase-index", str(out), "what is force?", "--json"]) == 0
    check_answer(json.loads(capsys.readouterr().out)["answer"], PassageStore.open(root / "store"))
    with one_thread():
        assert main(argv) == 0  # already built: reported, not rebuilt
    capsys.readouterr()
    assert main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                 str(root / "store"), "--out", str(tmp_path / "x"), "--code-bytes", "8"]) == 2
    assert "go with --compact" in capsys.readouterr().err
    assert main(["index", "--phrase", "--model", str(root / "model"), "--passages",
                 str(root / "store"), "--out", str(tmp_path / "x"), "--skip-punctuation"]) == 2
    assert "--skip-punctuation go with --compact" in capsys.readouterr().err


def test_compact_skip_punctuation_leaves_out_tokens_that_are_only_punctuation(built, tmp_path,
                                                                             capsys):
    """`--compact --skip-punctuation` over 30 real passages: no kept token is only ASCII
    punctuation (what answer normalization removes; an en dash stays), the others are all
    still there, and the index answers."""
    import string

    root, _ = built
    argv = ["index", "--phrase", "--compact", "--model", str(root / "model"), "--passages",
            str(root / "store"), "--quiet", "--code-bytes", "8", "--search-bytes", "4",
            "--factory", "IVF4,PQ4"]
    with one_thread():
        assert main([*argv, "--out", str(tmp_path / "all")]) == 0
        assert main([*argv, "--out", str(tmp_path / "lean"), "--skip-punctuation"]) == 0
    capsys.readouterr()
    every = json.loads((tmp_path / "all" / META_FILE).read_text())
    lean = json.loads((tmp_path / "lean" / META_FILE).read_text())
    assert lean["skip_punctuation"] and not every["skip_punctuation"]
    store = PassageStore.open(root / "store")
    counts = {}
    for folder in ("all", "lean"):
        chars, ptr = (np.load(tmp_path / folder / "tokens" / f"{name}.npy")
                      for name in ("chars", "ptr"))
        counts[folder] = [0, 0]   # [words, punctuation only]
        for row in range(len(store)):
            text = store.at(row).text
            for first, last in chars[ptr[row]:ptr[row + 1]].tolist():
                counts[folder][all(ch in string.punctuation for ch in text[first:last])] += 1
    assert counts["lean"] == [counts["all"][0], 0] and counts["all"][1] > 0
    assert sum(counts["all"]) == every["tokens"] and counts["lean"][0] == lean["tokens"]
    assert 0.05 < 1 - lean["tokens"] / every["tokens"] < 0.3
    assert main(["answer", "--phrase-index", str(tmp_path / "lean"), "what is force?",
                 "--json"]) == 0
    check_answer(json.loads(capsys.readouterr().out)["answer"], store)


def test_auto_precision_probes_a_sample_not_the_whole_batch(built, conversation, monkeypatch):
    """`auto` times every candidate several times: on the first PROBE_QUERIES queries of the
    first batch, then the whole batch is encoded once in the chosen precision."""
    import phrase_index.answerer as answerer
    from convqa.precision import PrecisionChoice

    _, index = built
    probed: list[int] = []

    def choose(run, agreement, **options):
        probed.append(run("fp32").shape[0])
        return PrecisionChoice.forced("fp32", options["what"])

    monkeypatch.setattr(answerer, "choose_precision", choose)
    pipe = PhrasePipeline.from_folder(index)
    texts = [pipe.format_query(t.question, conversation.history(n + 1))
             for n, t in enumerate(conversation.turns)] * 8
    assert len(texts) > answerer.PROBE_QUERIES
    q_start, q_end = pipe.encode(texts)
    assert probed == [answerer.PROBE_QUERIES] and pipe.precision == "fp32"
    assert q_start.shape[0] == q_end.shape[0] == len(texts)
    one_start, _ = PhrasePipeline.from_folder(index, precision="fp32").encode(texts[-1:])
    np.testing.assert_allclose(q_start[-1], one_start[0], atol=1e-4)
