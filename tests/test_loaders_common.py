"""The shared reader of top-level JSON lists: elements know their line; broken files say where."""
from __future__ import annotations

import gzip

import pytest

from convqa.errors import DataError
from convqa.loaders._common import iter_json_array, iter_records


def _write(tmp_path, text, name="a.json"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def test_elements_with_their_lines(tmp_path):
    path = _write(tmp_path, '\ufeff\n[\n  {"a": 1},\n\n  {"a": [1,\n 2]}, {"a": 3}\n]\n')
    found = [(src.line, src.item, value) for src, value in iter_json_array(path)]
    assert found == [(3, "element [0]", {"a": 1}), (5, "element [1]", {"a": [1, 2]}),
                     (6, "element [2]", {"a": 3})]


def test_empty_list_and_gzip(tmp_path):
    assert list(iter_json_array(_write(tmp_path, " [ ] "))) == []
    path = _write(tmp_path, gzip.compress(b'[{"a": 1}]'), "a.json.gz")
    assert [value for _, value in iter_records(path)] == [{"a": 1}]


@pytest.mark.parametrize("text, expected", [
    ('[{"a": 1}\n{"a": 2}]', r"a\.json:2: malformed JSON \(expected ',' or ']'"),
    ('[{"a": 1},\n]', r"a\.json:2: malformed JSON \(Expecting value"),
    ('[{"a": 1}', r"a\.json:1: malformed JSON \(expected ',' or ']'"),
    ('[{"a": 1}]\n[]', r"a\.json:2: malformed JSON \(extra data after the list\)"),
    ('\n{"a": 1}', r"a\.json:2: expected a JSON list of records"),
    ("", r"a\.json:1: expected a JSON list of records"),
])
def test_broken_lists(tmp_path, text, expected):
    with pytest.raises(DataError, match=expected):
        list(iter_json_array(_write(tmp_path, text)))


def test_records_tell_jsonl_from_list(tmp_path):
    path = _write(tmp_path, '\n{"a": 1}\n\n{"a": 2}\n', "a.jsonl")
    assert [(src.line, value) for src, value in iter_records(path)] == [(2, {"a": 1}),
                                                                       (4, {"a": 2})]
    with pytest.raises(DataError, match=r"missing\.json: file not found"):
        list(iter_records(tmp_path / "missing.json"))


def test_corrupt_gzip(tmp_path):
    path = _write(tmp_path, b"plain text, not gzip", "a.json.gz")
    with pytest.raises(DataError, match=r"a\.json\.gz: cannot read: Not a gzipped file"):
        list(iter_records(path))
