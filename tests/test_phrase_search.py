"""Phrase index and search on synthetic vectors whose best phrase is known by construction:
the start-first and end-first passes, deduplication, the answer-length limit, exact scores,
int8 against float16, Flat against IVF-PQ, save/load and bytes per passage, and refusals."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from convqa.corpus import PassageStore
from convqa.errors import ConfigError, ConvQAError, DataError
from phrase_index.dump import PhraseDump
from phrase_index.index import META_FILE, PhraseIndex, choose_factory
from phrase_index.search import PhraseSearcher, search_phrases
from phrase_index.vectors import dequantize_int8, quantize_int8
from phrase_index_helpers import (noise, planted_queries, synthetic_passages, token_chars, unit,
                                   write_dump)

DIM, TOKENS = 16, 12
Q_START, Q_END = unit(DIM, 0)[None], unit(DIM, 1)[None]


def build(tmp_path, start, end, name="dump", **options) -> PhraseIndex:
    passages = synthetic_passages(len(start), start.shape[1])
    dump = write_dump(tmp_path / name, start, end, passages, **options)
    return PhraseIndex.build(dump, "Flat")


def spans(results) -> list[tuple[int, int, int]]:
    return [(s.row, s.start_token, s.end_token) for s in results]


@pytest.fixture
def two_plants():
    """Phrase A (passage 3, tokens 2..4): strong start (2.5), weak end (0.3). Phrase B (passage
    11, tokens 5..6): weak start (0.8), strong end (2.6), the best phrase overall. Decoy starts
    (1.0) and decoy ends (1.0) elsewhere push B's start and A's end out of a 3-candidate pass.
    Noise is N(0, 0.05) per component: a strong half paired with noise (< 2.75) stays below A."""
    start, end = noise(30, TOKENS, DIM, seed=1), noise(30, TOKENS, DIM, seed=2)
    start[3, 2] += 2.5 * unit(DIM, 0)
    end[3, 4] += 0.3 * unit(DIM, 1)
    start[11, 5] += 0.8 * unit(DIM, 0)
    end[11, 6] += 2.6 * unit(DIM, 1)
    for row in (20, 21, 22):
        start[row, 0] += 1.0 * unit(DIM, 0)
    for row in (24, 25, 26):
        end[row, 5] += 1.0 * unit(DIM, 1)
    return start, end


def test_each_pass_finds_what_only_it_can_and_both_find_both(tmp_path, two_plants):
    index = build(tmp_path, *two_plants)
    start_only = search_phrases(index, Q_START, Q_END, 50, candidates=3, passes=("start",))[0]
    end_only = search_phrases(index, Q_START, Q_END, 50, candidates=3, passes=("end",))[0]
    both = search_phrases(index, Q_START, Q_END, 50, candidates=3)[0]
    assert spans(start_only)[0] == (3, 2, 4) and (11, 5, 6) not in spans(start_only)
    assert spans(end_only)[0] == (11, 5, 6) and (3, 2, 4) not in spans(end_only)
    assert spans(both)[:2] == [(11, 5, 6), (3, 2, 4)]


def test_scores_are_exact_inner_products_of_the_stored_vectors(tmp_path, two_plants):
    start, end = two_plants
    best = search_phrases(build(tmp_path, start, end), Q_START, Q_END, 1)[0][0]
    stored_start = start[11, 5].astype(np.float16).astype(np.float32)
    stored_end = end[11, 6].astype(np.float16).astype(np.float32)
    assert best.start_score == pytest.approx(float(stored_start @ Q_START[0]), abs=1e-6)
    assert best.end_score == pytest.approx(float(stored_end @ Q_END[0]), abs=1e-6)
    assert best.score == pytest.approx(best.start_score + best.end_score, abs=1e-6)
    assert (best.char_start, best.char_end) == (token_chars(5)[0], token_chars(6)[1])


def test_results_are_deduplicated_and_ordered(tmp_path, two_plants):
    index = build(tmp_path, *two_plants)
    # every passage's tokens are candidates of both passes: each phrase is proposed twice
    results = search_phrases(index, Q_START, Q_END, 100_000, candidates=30 * TOKENS)[0]
    keys = spans(results)
    assert len(keys) == len(set(keys))
    assert keys.count((11, 5, 6)) == 1 and keys.count((3, 2, 4)) == 1
    # all phrases of length <= 10 in 30 passages of 12 tokens: sum over widths 1..10 of (13 - w)
    assert len(keys) == 30 * sum(TOKENS + 1 - w for w in range(1, 11))
    scores = [s.score for s in results]
    assert scores == sorted(scores, reverse=True)


def test_answer_length_limit_and_end_never_before_start(tmp_path):
    start, end = noise(20, TOKENS, DIM, seed=3), noise(20, TOKENS, DIM, seed=4)
    start[15, 1] += 3.0 * unit(DIM, 0)   # tokens 1..8: 8 tokens long
    end[15, 8] += 3.0 * unit(DIM, 1)
    start[17, 6] += 2.9 * unit(DIM, 0)   # the end of passage 17 comes *before* its start
    end[17, 2] += 2.9 * unit(DIM, 1)
    index = build(tmp_path, start, end)
    assert spans(search_phrases(index, Q_START, Q_END, 1, max_answer_tokens=8)[0]) == \
        [(15, 1, 8)]
    shorter = search_phrases(index, Q_START, Q_END, 10_000, max_answer_tokens=7,
                             candidates=20 * TOKENS)[0]
    assert (15, 1, 8) not in spans(shorter)
    assert all(0 <= s.end_token - s.start_token < 7 for s in shorter)
    assert not any(s.row == 17 and s.start_token == 6 and s.end_token == 2 for s in shorter)
    # the index's own limit (dump manifest: 10 tokens) applies by default
    assert spans(search_phrases(index, Q_START, Q_END, 1)[0]) == [(15, 1, 8)]


def test_int8_quantization_error_bound():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 384)).astype(np.float32) * rng.uniform(0.01, 10, size=(50, 1))
    x[0] = 0.25  # a constant vector is stored exactly
    codes, scale, offset = quantize_int8(x)
    assert codes.dtype == np.int8 and scale.dtype == offset.dtype == np.float32
    restored = dequantize_int8(codes, scale, offset)
    assert np.all(np.abs(restored - x) <= scale[:, None] / 2 + 1e-5 * np.abs(x).max(1,
                                                                                 keepdims=True))
    np.testing.assert_allclose(restored[0], 0.25, atol=1e-7)
    assert (codes[1:].min(1) == -128).all() and (codes[1:].max(1) == 127).all()  # full range


def test_int8_and_float16_dumps_agree(tmp_path):
    start, end, q_start, q_end, truth = planted_queries(40, TOKENS, 32, 20, 5, 0.3)
    fp16 = build(tmp_path, start, end, "fp16")
    int8 = build(tmp_path, start, end, "int8", dtype="int8")
    a = search_phrases(fp16, q_start, q_end, 5)
    b = search_phrases(int8, q_start, q_end, 5)
    assert [spans(r)[0] for r in a] == truth == [spans(r)[0] for r in b]
    for ra, rb in zip(a, b):
        assert abs(ra[0].score - rb[0].score) < 0.02
        # int8 scores come from the codes (scale * codes.q + offset * sum(q)): the same as the
        # dot products of the dequantized vectors
        best = rb[0]
        q = [spans(r)[0] for r in b].index((best.row, best.start_token, best.end_token))
        for side, token, score, query in (("start", best.start_token, best.start_score, q_start),
                                          ("end", best.end_token, best.end_score, q_end)):
            pos, vectors = int8.dump.side(side).passage(best.row)
            row = list(pos[:, 1]).index(token)
            assert score == pytest.approx(float(vectors[row] @ query[q]), abs=1e-5)
    # start and end vectors differ here, so each side has its own 480 token-table rows of (32
    # codes, or 64 bytes of float16) + 16 bytes of position (+ 8 of scale and offset for
    # int8), a 4-byte reference per side vector, and 5 shards x 9 int64 passage pointers
    assert fp16.dump.nbytes() == 2 * (480 * (64 + 16 + 4) + 5 * 9 * 8)
    assert int8.dump.nbytes() == 2 * (480 * (32 + 8 + 16 + 4) + 5 * 9 * 8)


def test_flat_and_ivf_pq_agree_on_a_small_set(tmp_path):
    start, end, q_start, q_end, truth = planted_queries(300, TOKENS, 32, 20, 9, 0.15)
    passages = synthetic_passages(300, TOKENS)
    dump = write_dump(tmp_path / "dump", start, end, passages)
    flat = PhraseIndex.build(dump, "Flat")
    ivf = PhraseIndex.build(dump, "IVF16,PQ8x4", train_size=1000)
    ivf.set_nprobe(16)
    assert ivf.nprobe == 16
    assert ivf.meta["factory"] == {"start": "IVF16,PQ8x4", "end": "IVF16,PQ8x4"}
    top_flat = [spans(r)[0] for r in search_phrases(flat, q_start, q_end, 1, candidates=16)]
    top_ivf = [spans(r)[0] for r in search_phrases(ivf, q_start, q_end, 1, candidates=16)]
    assert top_flat == truth == top_ivf
    # automatic choice: Flat up to flat_max vectors per side, IVF-PQ above (3600 per side)
    auto = PhraseIndex.build(dump, flat_max=1000, train_size=2500)
    assert auto.meta["factory"]["start"] == "IVF64,PQ4"
    auto.set_nprobe(64)
    assert [spans(r)[0] for r in search_phrases(auto, q_start, q_end, 1, candidates=16)] == truth
    flat.set_nprobe(8)   # no lists to probe: ignored
    assert flat.nprobe is None
    assert PhraseIndex.build(dump).meta["factory"] == {"start": "Flat", "end": "Flat"}


def test_choose_factory():
    assert choose_factory(100, 384) == "Flat"
    # 4 sqrt(2e6) = 5657 -> 4096 lists (2^12); 384 / 8 = 48 sub-quantizers
    assert choose_factory(2_000_000, 384) == "IVF4096,PQ48"
    assert choose_factory(600_000, 384) == "IVF2048,PQ48"  # 4 sqrt(6e5) = 3098
    # 4 sqrt(3600) = 240 -> 128 lists, but 39 * 128 > 3600 training vectors: 64 lists
    assert choose_factory(3600, 32, flat_max=1000) == "IVF64,PQ4"
    assert choose_factory(3600, 30, flat_max=0) == "IVF64,PQ3"  # 3 is the largest divisor <= 3


def test_save_load_round_trip_and_bytes_per_passage(tmp_path, two_plants):
    start, end = two_plants
    passages = synthetic_passages(30, TOKENS)
    folder = tmp_path / "index"
    dump = write_dump(folder / "dump", start, end, passages)
    index = PhraseIndex.build(dump, "Flat", passages="somewhere")
    before = search_phrases(index, Q_START, Q_END, 10)
    index.save(folder)
    loaded = PhraseIndex.load(folder)
    assert spans(search_phrases(loaded, Q_START, Q_END, 10)[0]) == spans(before[0])
    meta = json.loads((folder / META_FILE).read_text())
    assert meta["dump"] == "dump" and meta["passages"] == "somewhere"
    # sizes measured independently: FAISS files on disk, array payloads of the dump
    faiss_bytes = {s: os.path.getsize(folder / s / "index.faiss") for s in ("start", "end")}
    arrays = sum(np.load(f, mmap_mode="r").nbytes for f in (folder / "dump").rglob("*.npy"))
    assert meta["bytes"] == {"dump": arrays, **faiss_bytes,
                             "total": arrays + sum(faiss_bytes.values())}
    assert loaded.bytes_per_passage() == pytest.approx(meta["bytes"]["total"] / 30, abs=0.1)
    # Flat stores 30 * 12 vectors of 16 float32 per side
    assert faiss_bytes["start"] > 30 * TOKENS * DIM * 4
    # an index built in memory reports nearly the same (serialized FAISS sizes)
    assert index.bytes_per_passage() == pytest.approx(loaded.bytes_per_passage(), rel=0.01)


def test_searcher_returns_answers_with_offsets_into_the_passage(tmp_path, two_plants):
    start, end = two_plants
    passages = synthetic_passages(30, TOKENS)
    index = build(tmp_path, start, end)
    store = PassageStore.build(passages, tmp_path / "store", progress=False)
    answers = PhraseSearcher(index, store).search(Q_START, Q_END, 3)[0]
    best = answers[0]
    assert (best.passage_id, best.text) == ("p11", "t005 t006")
    for answer in answers:
        assert answer.evidence.text[answer.start:answer.end] == answer.text
        assert answer.evidence == store.get(answer.passage_id)


def test_refusals(tmp_path, two_plants):
    start, end = two_plants
    index = build(tmp_path, start, end)
    with pytest.raises(ConvQAError, match=r"query vectors must be \[n, 16\]"):
        search_phrases(index, np.zeros((1, 8)), Q_END)
    with pytest.raises(ConvQAError, match="2 start but 1 end"):
        search_phrases(index, np.zeros((2, DIM)), Q_END)
    with pytest.raises(ConfigError, match="k must be a positive int"):
        search_phrases(index, Q_START, Q_END, 0)
    with pytest.raises(ConfigError, match="passes must be"):
        search_phrases(index, Q_START, Q_END, passes=("middle",))
    other = PassageStore.build(synthetic_passages(30, TOKENS + 1), tmp_path / "other",
                               progress=False)
    with pytest.raises(ConvQAError, match="corpus mismatch") as error:
        PhraseSearcher(index, other)
    assert "\n" not in str(error.value)
    with pytest.raises(ConvQAError, match="model mismatch: phrase index .* fingerprint synthetic"):
        index.check(fingerprint="abc", model_name="runs/other")


def test_damaged_or_unfinished_inputs_name_the_file(tmp_path, two_plants):
    start, end = two_plants
    passages = synthetic_passages(30, TOKENS)
    folder = tmp_path / "index"
    dump = write_dump(folder / "dump", start, end, passages)
    PhraseIndex.build(dump, "Flat").save(folder)
    with pytest.raises(DataError, match="not a phrase index"):
        PhraseIndex.load(tmp_path)
    (tmp_path / "half" / "dump").mkdir(parents=True)  # a build stopped while dumping
    with pytest.raises(DataError, match="unfinished .*run the same command again to resume"):
        PhraseIndex.load(tmp_path / "half")
    with pytest.raises(DataError, match="no such index folder"):
        PhraseIndex.load(tmp_path / "nowhere")
    shard = folder / "dump" / "shard-0000000008-0000000016"
    good = (shard / "end_ref.npy").read_bytes()
    ref = np.load(shard / "end_ref.npy")
    ref[3] = 10 ** 6
    np.save(shard / "end_ref.npy", ref)
    with pytest.raises(DataError, match="end_ref.npy: damaged shard: references outside"):
        PhraseIndex.load(folder)
    (shard / "end_ref.npy").write_bytes(good)
    (shard / "tokens_pos.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(DataError, match="tokens_pos.npy: damaged shard"):
        PhraseIndex.load(folder)
    manifest = folder / "dump" / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "complete": False}))
    with pytest.raises(ConvQAError, match="not finished; rerun it to resume"):
        PhraseDump.open(folder / "dump")
    # an index whose FAISS side does not hold the dump's vectors
    other = write_dump(tmp_path / "other" / "dump", start[:16], end[:16], passages[:16])
    PhraseIndex.build(other, "Flat").save(tmp_path / "other")
    (tmp_path / "other" / "start").rename(tmp_path / "other" / "kept")
    os.replace(folder / "start", tmp_path / "other" / "start")
    with pytest.raises(DataError, match="start index .* does not match the dump"):
        PhraseIndex.load(tmp_path / "other")


def test_a_side_without_vectors_is_refused(tmp_path):
    passages = synthetic_passages(4, 3)
    empty = np.zeros((4, 0, DIM), dtype=np.float32)
    dump = write_dump(tmp_path / "dump", empty, empty, passages)
    with pytest.raises(ConvQAError, match="kept no start vectors"):
        PhraseIndex.build(dump)
