import gzip
import lzma

import pytest

from convqa.errors import DataError
from convqa.io import atomic_write, folder_bytes, iter_jsonl, load_json, require, write_jsonl


def test_jsonl_round_trip_and_gzip(tmp_path):
    rows = [{"a": 1}, {"b": "é"}]
    write_jsonl(tmp_path / "x.jsonl", rows)
    assert [obj for _, obj in iter_jsonl(tmp_path / "x.jsonl")] == rows
    with gzip.open(tmp_path / "x.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write('{"a": 1}\n\n{"b": 2}\n')
    assert list(iter_jsonl(tmp_path / "x.jsonl.gz")) == [(1, {"a": 1}), (3, {"b": 2})]


def test_xz_jsonl_is_written_compressed_and_read_back(tmp_path):
    rows = [{"text": "the same passage " * 50, "n": n} for n in range(20)]
    path = tmp_path / "x.jsonl.xz"
    assert write_jsonl(path, rows) == 20
    raw = path.read_bytes()
    assert raw.startswith(b"\xfd7zXZ")  # the xz magic: really compressed
    assert len(raw) < len(lzma.decompress(raw)) / 10
    assert [obj for _, obj in iter_jsonl(path)] == rows
    (tmp_path / "bad.jsonl.xz").write_bytes(raw[:40])  # cut short
    with pytest.raises(DataError, match=r"bad.jsonl.xz: cannot read"):
        list(iter_jsonl(tmp_path / "bad.jsonl.xz"))


def test_malformed_json_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": \n', encoding="utf-8")
    with pytest.raises(DataError) as err:
        list(iter_jsonl(path))
    assert str(err.value).startswith(f"{path}:2: malformed JSON")


def test_non_utf8_names_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"latin1.jsonl:2: not valid UTF-8"):
        list(iter_jsonl(path))
    whole = tmp_path / "latin1.json"
    whole.write_bytes(b'[\n"ok",\n"caf\xe9"\n]')
    with pytest.raises(DataError, match=r"latin1.json:3: not valid UTF-8"):
        load_json(whole)


def test_missing_file_and_field(tmp_path):
    with pytest.raises(DataError, match="nope.json: file not found"):
        load_json(tmp_path / "nope.json")
    with pytest.raises(DataError, match=r"f.json:4: field 'Question': missing"):
        require({"Answer": "x"}, "Question", "f.json", 4)
    with pytest.raises(DataError, match=r"field 'Turn_no': expected int, got str"):
        require({"Turn_no": "3"}, "Turn_no", "f.json", 1, int)


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError):
        with atomic_write(path) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert path.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_folder_bytes_counts_files_below_and_skips_named_entries(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "sub" / "deep").mkdir(parents=True)
    (tmp_path / "sub" / "deep" / "b").write_bytes(b"y" * 7)
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "c").write_bytes(b"z" * 100)
    assert folder_bytes(tmp_path) == 117
    assert folder_bytes(tmp_path, skip=("dump",)) == 17
    assert folder_bytes(tmp_path, skip=("deep",)) == 117   # only top-level entries are skipped
    assert folder_bytes(tmp_path / "sub") == 7
