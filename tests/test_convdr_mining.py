"""Rank groups mined by the teacher over its own index: positives by id / by text, pseudo-
positives, negatives = teacher top-k minus positives, the teacher's vectors read back
unchanged, reuse, and the checks."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from convqa.errors import ConvQAError, DataError
from convqa.types import Passage
from retrievers.convdr.data import PassageRef
from retrievers.convdr.mining import (EXTRA_FILE, GROUPS_FILE, ConvDRMiningConfig,
                                      TeacherPassageVectors, load_groups, mine_groups,
                                      open_teacher_index)
from retrievers.convdr.targets import encode_teacher_queries
from retrievers.dense.build import load_encoder
from retrievers.dense.encode import VectorShards, encode_passages

from convdr_helpers import PASSAGES, examples, make_index, make_teacher


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("convdr_mining")
    teacher_dir = make_teacher(root / "teacher")
    store, index_dir = make_index(root, teacher_dir)
    teacher = load_encoder(str(teacher_dir))
    return root, teacher, store, index_dir


def _queries(teacher, data):
    return encode_teacher_queries(teacher, [e.rewrite for e in data])[0]


def test_groups_follow_the_teachers_ranking(setup, tmp_path):
    root, teacher, store, index_dir = setup
    data = examples()[:4]
    data[1].positives = [PassageRef(None, "Eiffel's firm built it for the 1889 fair.", "T")]
    data[2].positives = [PassageRef("not-in-store")]
    data[3].positives = [PassageRef(None, PASSAGES[3][1])]  # a store passage, given by text
    queries = _queries(teacher, data)
    meta = mine_groups(teacher, data, queries, index_dir, tmp_path / "m",
                       ConvDRMiningConfig(top_k=6))
    groups, extra = load_groups(tmp_path / "m", data)
    vectors = VectorShards.open(index_dir / "vectors").load()
    for example, query, group in zip(data, queries, groups):
        ranked = list(np.argsort(-(vectors @ query), kind="stable")[:6])  # brute force
        if example is data[2]:
            assert group is None  # its only positive is unusable and pseudo is off
            continue
        if example is data[0]:
            assert group.positives == [store.index("p0")]
        else:  # extra vectors, numbered in order of first use
            assert group.positives == [-1 if example is data[1] else -2]
        excluded = {store.index("p0")} if example is data[0] else set()
        if example is data[3]:
            excluded = {store.index("p3")}  # same text as the positive: never a negative
        assert group.negatives == [int(r) for r in ranked if int(r) not in excluded]
        assert not group.pseudo
    assert meta["counts"]["positives_not_in_index"] == 1
    assert meta["counts"]["groups"] == 3 and meta["counts"]["no_positive"] == 1
    assert meta["extra_passages"] == 2 and extra.shape == (2, teacher.dim)
    expected = encode_passages(teacher, [Passage("x", "Eiffel's firm built it for the 1889 "
                                                 "fair.", "T")])
    assert np.allclose(extra[0], expected[0], atol=1e-6)


def test_pseudo_positive_is_the_teachers_top1_on_the_rewrite(setup, tmp_path):
    _, teacher, store, index_dir = setup
    data = examples(with_positives=False)[:3]
    data[2].rewrite = None  # no rewrite: no pseudo-positive either
    queries = _queries(teacher, data[:2])
    queries = np.concatenate([queries, queries[:1]])
    meta = mine_groups(teacher, data, queries, index_dir, tmp_path / "m",
                       ConvDRMiningConfig(top_k=4, pseudo_positives=True))
    groups, _ = load_groups(tmp_path / "m", data)
    vectors = VectorShards.open(index_dir / "vectors").load()
    for group, query in zip(groups[:2], queries):
        ranked = [int(r) for r in np.argsort(-(vectors @ query), kind="stable")[:4]]
        assert group.pseudo and group.positives == ranked[:1] and group.negatives == ranked[1:]
    assert groups[2] is None
    assert meta["counts"]["pseudo"] == 2 and meta["pseudo_positives"] is True
    off = mine_groups(teacher, data, queries, index_dir, tmp_path / "off",
                      ConvDRMiningConfig(top_k=4))
    assert off["counts"]["groups"] == 0


def test_mining_is_reused_when_nothing_changed(setup, tmp_path):
    _, teacher, _, index_dir = setup
    data = examples()[:2]
    queries = _queries(teacher, data)
    mine_groups(teacher, data, queries, index_dir, tmp_path / "m", ConvDRMiningConfig(top_k=3))
    before = (tmp_path / "m" / GROUPS_FILE).stat().st_mtime_ns
    mine_groups(teacher, data, queries, index_dir, tmp_path / "m", ConvDRMiningConfig(top_k=3))
    assert (tmp_path / "m" / GROUPS_FILE).stat().st_mtime_ns == before
    mine_groups(teacher, data, queries, index_dir, tmp_path / "m", ConvDRMiningConfig(top_k=4))
    assert (tmp_path / "m" / GROUPS_FILE).stat().st_mtime_ns != before


def test_vectors_come_from_the_index_with_or_without_its_shards(setup, tmp_path):
    _, teacher, store, index_dir = setup
    index, _ = open_teacher_index(index_dir, teacher.fingerprint())
    rows = [3, 0, 11, 3]
    expected = VectorShards.open(index_dir / "vectors").load()[rows]
    extra = np.ones((1, teacher.dim), dtype=np.float32)
    vectors = TeacherPassageVectors(index_dir, index, extra)
    assert vectors.shards is not None
    assert np.array_equal(vectors.get(rows + [-1]), np.vstack([expected, extra]))
    bare = tmp_path / "bare"
    shutil.copytree(index_dir, bare, ignore=shutil.ignore_patterns("vectors"))
    fallback = TeacherPassageVectors(bare, index)
    assert fallback.shards is None and np.allclose(fallback.get(rows), expected, atol=1e-6)
    with pytest.raises(ConvQAError, match="extra passage vector"):
        vectors.get([-2])


def test_another_encoders_index_is_refused(setup, tmp_path):
    root, teacher, _, _ = setup
    _, other_index = make_index(root, make_teacher(root / "other", seed=1), "other-index")
    data = examples()[:1]
    with pytest.raises(ConvQAError, match="not by the ConvDR teacher"):
        mine_groups(teacher, data, _queries(teacher, data), other_index, tmp_path / "m")


def test_groups_file_errors(setup, tmp_path):
    _, teacher, _, index_dir = setup
    data = examples()[:2]
    mine_groups(teacher, data, _queries(teacher, data), index_dir, tmp_path / "m",
                ConvDRMiningConfig(top_k=3))
    with pytest.raises(DataError, match="no group line for 6 examples"):
        load_groups(tmp_path / "m", examples())
    path = tmp_path / "m" / GROUPS_FILE
    lines = path.read_text().splitlines()
    record = json.loads(lines[1])
    record["negatives"] = ["p1"]
    path.write_text(lines[0] + "\n" + json.dumps(record) + "\n")
    with pytest.raises(DataError) as err:
        load_groups(tmp_path / "m", data)
    assert err.value.line == 2 and err.value.field == "negatives"
    assert (tmp_path / "m" / EXTRA_FILE).exists()
