"""Tests for convqa.corpus: sentence splitting, passage packing, readers, the passage store.

Expected outputs of the splitter and of the fixtures were worked out by hand from the rules in
convqa/corpus/sentences.py and passages.py, not copied from the code's output.
"""
from __future__ import annotations

import gzip
import hashlib
import inspect
import itertools
import json
import random
import re
from pathlib import Path

import pytest

from convqa.corpus import (Article, PassageStore, article_passages, detect_format,
                           iter_article_passages, read_articles, read_hf_passages,
                           read_jsonl_passages, read_passages, read_tsv_passages, split_passages,
                           split_sentences)
from convqa.errors import ConvQAError, DataError
from convqa.types import Passage

from conftest import shared_file

ARTICLES = "wikipedia/topiocqa_wiki_articles.jsonl.gz"


def words(n: int, prefix: str = "w") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def sentence(n: int, prefix: str) -> str:
    """`n` words, capitalised first word, final period: "A0 a1 a2."."""
    out = words(n, prefix.lower())
    out[0], out[-1] = prefix.upper() + "0", out[-1] + "."
    return " ".join(out)


def write(path: Path, text: str | bytes) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as handle:
            handle.write(text.encode("utf-8") if isinstance(text, str) else text)
    elif isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def jsonl(*records: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


# -- sentence splitter ------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("Dr. Smith moved to the U.S. in 1990. He paid $3.5 million for it.",
     ["Dr. Smith moved to the U.S. in 1990.", "He paid $3.5 million for it."]),
    ("The Hobbit was written by J. R. R. Tolkien. It appeared in 1937.",
     ["The Hobbit was written by J. R. R. Tolkien.", "It appeared in 1937."]),
    ("Some birds, e.g. Penguins, cannot fly, i.e. They walk. Others fly.",
     ["Some birds, e.g. Penguins, cannot fly, i.e. They walk.", "Others fly."]),
    ("Pi is about 3.14. It is irrational.", ["Pi is about 3.14.", "It is irrational."]),
    ('"Is it?" she asked. "Yes!" He nodded.', ['"Is it?" she asked.', '"Yes!"', "He nodded."]),
    ('They called it "the end." and moved on.', ['They called it "the end." and moved on.']),
    ("He waited... Nothing happened! Why? (Nobody knew.) Then St. Louis won.",
     ["He waited...", "Nothing happened!", "Why?", "(Nobody knew.)", "Then St. Louis won."]),
    ("Apple Inc. makes phones. Its founder was Steve Jobs",
     ["Apple Inc. makes phones.", "Its founder was Steve Jobs"]),
    # documented limitation: an acronym before a new sentence does not split
    ("He moved to the U.S. It was cold.", ["He moved to the U.S. It was cold."]),
])
def test_sentence_splitter_rules(text, expected):
    assert list(split_sentences(text)) == expected


def test_every_line_is_a_boundary_and_headings_are_sentences():
    text = "Intro text here\nEarly life.\n\n  He was born in Paris.  \r\nCareer.\n"
    assert list(split_sentences(text)) == [
        "Intro text here", "Early life.", "He was born in Paris.", "Career."]


@pytest.mark.parametrize("text", ["", "   ", "\n\n", " \t\n  \n"])
def test_empty_text_has_no_sentences_and_no_passages(text):
    assert list(split_sentences(text)) == []
    assert split_passages(text) == []


# -- passage packing --------------------------------------------------------------------------

def test_exactly_max_words_is_one_passage():
    sentence = " ".join(words(99)) + " end."
    assert split_passages(sentence, 100) == [sentence]


def test_greedy_packing_respects_the_limit():
    a, b, c = sentence(60, "a"), sentence(40, "b"), sentence(41, "c")
    assert a.startswith("A0 a1 ") and a.endswith(" a59.") and len(a.split()) == 60
    assert split_passages(f"{a} {b}", 100) == [f"{a} {b}"]  # 60 + 40 words
    assert split_passages(f"{a} {c}", 100) == [a, c]  # 60 + 41 words
    assert split_passages("One two three. Four five. Six seven eight nine.", 5) == [
        "One two three. Four five.", "Six seven eight nine."]


def test_long_sentence_is_cut_into_word_chunks():
    first, last = sentence(10, "a"), sentence(10, "c")
    long_words = sentence(250, "L").split()
    text = f"{first} {' '.join(long_words)} {last}"
    assert split_passages(text, 100) == [
        first,
        " ".join(long_words[:100]),
        " ".join(long_words[100:200]),
        " ".join(long_words[200:]) + " " + last,  # 50 + 10 words share a passage
    ]


def test_headings_pack_with_neighbours_and_whitespace_is_normalised():
    text = "Intro one two.\nHistory.\nBorn in  Paris.\tYes."
    assert split_passages(text, 4) == ["Intro one two. History.", "Born in Paris. Yes."]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "100"])
def test_max_words_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_words"):
        split_passages("Some text.", bad)
    with pytest.raises(ValueError, match="max_words"):
        iter_article_passages(Path(__file__), bad)  # checked at call time, not when iterated


def test_article_passage_ids_and_titles():
    text = "One two three. Four five six.\nSeven eight."
    got = list(article_passages("A1", "Numbers", text, max_words=3))
    assert got == [Passage("A1#0", "One two three.", "Numbers"),
                   Passage("A1#1", "Four five six.", "Numbers"),
                   Passage("A1#2", "Seven eight.", "Numbers")]


def test_ids_are_stable_when_the_end_of_an_article_changes():
    base = " ".join(f"Sentence {i} has five words." for i in range(40))
    edited = base.replace("Sentence 39 has five words.", "The last sentence is now longer.")
    before = list(article_passages("X", "T", base, 12))
    after = list(article_passages("X", "T", edited, 12))
    assert before == list(article_passages("X", "T", base, 12))  # deterministic
    assert before[:-1] == after[:-1] and before[-1] != after[-1]


# -- readers ----------------------------------------------------------------------------------

EXPECTED_JSONL = [
    Passage("doc1#0", "Zürich is the largest city in Switzerland.", "Zürich"),
    Passage("doc1#1", "It lies at the north-western tip of Lake Zürich.", "Zürich"),
    Passage("42", "A passage with an integer id and no title.", ""),
    Passage("東京#0", "Tokyo is the capital of Japan.", "東京"),
]
EXPECTED_DPR = [
    Passage("1", 'Aaron ( or ; "Aharon") is a prophet, high priest, and the elder brother of '
                 "Moses.", "Aaron"),
    Passage("2", "The Book of Exodus names him as a spokesman.", "Aaron"),
    Passage("3", 'She said "no" twice; then left.', "Quotes, Inc."),
]


def test_jsonl_reader(fixtures_dir, tmp_path):
    path = fixtures_dir / "corpus" / "passages.jsonl"
    reader = read_passages(path)
    assert inspect.isgenerator(reader)
    assert list(reader) == EXPECTED_JSONL
    gz = write(tmp_path / "p.jsonl.gz", path.read_bytes())
    assert list(read_passages(gz)) == EXPECTED_JSONL
    assert list(read_jsonl_passages(path)) == EXPECTED_JSONL


def test_jsonl_reader_accepts_beir_and_pyserini_field_names(fixtures_dir):
    got = list(read_passages(fixtures_dir / "corpus" / "passages_aliases.jsonl"))
    assert got == [
        Passage("beir-1", "BEIR corpora use _id for the passage id.", "BEIR style"),
        Passage("pyserini-1", "Pyserini JsonCollection puts the text in contents.", ""),
    ]


def test_dpr_tsv_reader_unquotes_and_skips_header(fixtures_dir, tmp_path):
    path = fixtures_dir / "corpus" / "psgs_dpr.tsv"
    reader = read_passages(path)
    assert inspect.isgenerator(reader)
    assert list(reader) == EXPECTED_DPR
    gz = write(tmp_path / "psgs.tsv.gz", path.read_bytes())
    assert list(read_passages(gz)) == EXPECTED_DPR
    headerless = write(tmp_path / "nohead.tsv", path.read_text().split("\n", 1)[1])
    assert list(read_tsv_passages(headerless)) == EXPECTED_DPR


def test_two_column_tsv_reader(fixtures_dir):
    got = list(read_passages(fixtures_dir / "corpus" / "collection.tsv"))
    assert got == [
        Passage("0", "The presence of communication amid scientific minds was important."),
        Passage("1", "The Manhattan Project and its atomic bomb helped end World War II."),
    ]


def test_format_detection(tmp_path, fixtures_dir):
    assert detect_format("a.jsonl") == "jsonl" and detect_format("a.JSONL.gz") == "jsonl"
    assert detect_format("a.tsv") == "tsv" and detect_format("a.tsv.gz") == "tsv"
    with pytest.raises(DataError, match="cannot tell the passage format"):
        detect_format(tmp_path / "a.csv")
    with pytest.raises(DataError, match="not a passage store"):
        detect_format(tmp_path)
    odd = write(tmp_path / "passages.txt", (fixtures_dir / "corpus" / "psgs_dpr.tsv").read_text())
    assert list(read_passages(odd, format="tsv")) == EXPECTED_DPR
    with pytest.raises(DataError, match="unknown passage format 'csv'"):
        read_passages(odd, format="csv")


def test_articles_reader_and_on_the_fly_passages(fixtures_dir):
    path = fixtures_dir / "corpus" / "articles.jsonl"
    articles = list(read_articles(path))
    assert [tuple(a) for a in articles][1] == (
        "12", "Pi", "Pi is about 3.14 and is irrational. It appears in many formulas, e.g. the "
        "area of a circle.")
    assert isinstance(articles[0], Article) and articles[2].text == ""
    reader = iter_article_passages(path, max_words=10)
    assert not isinstance(reader, list)
    ada, pi = "Ada Lovelace", "Pi"
    assert list(reader) == [
        Passage("7#0", "Augusta Ada King was an English mathematician.", ada),
        Passage("7#1", "She worked with Dr. Charles Babbage on the Analytical Engine.", ada),
        Passage("7#2", "Early life. She was born in London in 1815.", ada),
        Passage("12#0", "Pi is about 3.14 and is irrational.", pi),
        Passage("12#1", "It appears in many formulas, e.g. the area of a", pi),
        Passage("12#2", "circle.", pi),
    ]  # the empty article "99" gives no passage


def test_readers_stream_without_reading_the_rest_of_the_file(tmp_path):
    """A broken last line is only reached when the reader gets there: records are lazy."""
    good = jsonl({"id": "a", "text": "First."}, {"id": "b", "text": "Second."})
    path = write(tmp_path / "p.jsonl.gz", good + "{broken\n")
    reader = read_passages(path)
    assert next(reader) == Passage("a", "First.")
    with pytest.raises(DataError, match=r"p\.jsonl\.gz:3: malformed JSON"):
        list(reader)
    tsv = write(tmp_path / "p.tsv", "1\tFirst.\tT\n2\tSecond.\tT\n3\tonly two columns\n")
    assert list(itertools.islice(read_passages(tsv), 2))[1] == Passage("2", "Second.", "T")
    articles = write(tmp_path / "a.jsonl", jsonl({"id": "1", "title": "T", "text": "A. B."})
                     + "\xff\n")
    assert next(iter_article_passages(articles)) == Passage("1#0", "A. B.", "T")


def test_first_real_passage_streams(shared_data):
    path = shared_file(ARTICLES)
    first = next(iter_article_passages(path))
    assert (first.id, first.title) == ("25#0", "Autism")
    assert first.text.startswith("Autism is a neurodevelopmental disorder characterized by")
    assert len(first.text.split()) <= 100


# -- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("lines, location, message", [
    ('{"id": "a", "text": "ok"}\n{"id": "b", "text": "no close"\n', "p.jsonl:2",
     "malformed JSON"),
    ('{"text": "no id"}\n', "p.jsonl:1: field 'id'", "missing"),
    ('{"id": "a"}\n', "p.jsonl:1: field 'text'", "missing"),
    ('{"id": ["a"], "text": "t"}\n', "p.jsonl:1: field 'id'", "expected a string or integer"),
    ('{"id": true, "text": "t"}\n', "p.jsonl:1: field 'id'", "expected a string or integer"),
    ('{"id": " ", "text": "t"}\n', "p.jsonl:1: field 'id'", "empty id"),
    ('{"id": "a", "text": 5}\n', "p.jsonl:1: field 'text'", "expected a string"),
    ('{"id": "a", "text": "  "}\n', "p.jsonl:1: field 'text'", "empty text"),
    ('{"id": "a", "text": "t", "title": 3}\n', "p.jsonl:1: field 'title'", "expected a string"),
    ('["a", "t"]\n', "p.jsonl:1", "expected a JSON object"),
    ('{"id": "a", "text": "t"}\n\n{"id": "a", "text": "u"}\n', "p.jsonl:3: field 'id'",
     "duplicate id 'a' (first on line 1)"),
])
def test_bad_jsonl_passages(tmp_path, lines, location, message):
    path = write(tmp_path / "p.jsonl", lines)
    with pytest.raises(DataError) as info:
        list(read_passages(path))
    assert str(info.value).startswith(str(tmp_path / location))
    assert message in str(info.value)


def test_duplicate_check_can_be_switched_off(tmp_path):
    path = write(tmp_path / "p.jsonl", jsonl({"id": "a", "text": "t"}, {"id": "a", "text": "u"}))
    assert [p.text for p in read_passages(path, unique_ids=False)] == ["t", "u"]


def test_non_utf8_is_reported_with_its_line(tmp_path):
    path = write(tmp_path / "p.jsonl", b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "\xe9"}\n')
    with pytest.raises(DataError, match=r"p\.jsonl:2: not valid UTF-8"):
        list(read_passages(path))
    tsv = write(tmp_path / "p.tsv", b"1\tok\tT\n2\tcaf\xe9\tT\n")
    with pytest.raises(DataError, match=r"p\.tsv:2: not valid UTF-8"):
        list(read_passages(tsv))


@pytest.mark.parametrize("content, location, message", [
    ("1\ta\tb\tc\n", "p.tsv:1", "expected 2 or 3 tab-separated columns"),
    ("id\ttext\ttitle\n1\tok\tT\n2\tno title\n", "p.tsv:3", "expected 3 tab-separated columns"),
    ("1\tok\n2\tok\textra\n", "p.tsv:2", "expected 2 tab-separated columns"),
    ('1\tok\tT\n2\t"never closed\tT\n3\tok\tT\n', "p.tsv:2", "malformed TSV"),
    ("\ttext without id\tT\n", "p.tsv:1: field 'id'", "empty id"),
    ("1\t \tT\n", "p.tsv:1: field 'text'", "empty text"),
    ("1\tok\tT\n1\tagain\tT\n", "p.tsv:2: field 'id'", "duplicate id '1' (first on line 1)"),
])
def test_bad_tsv_passages(tmp_path, content, location, message):
    path = write(tmp_path / "p.tsv", content)
    with pytest.raises(DataError) as info:
        list(read_passages(path))
    assert str(info.value).startswith(str(tmp_path / location))
    assert message in str(info.value)


def test_quoted_multiline_tsv_rows_keep_line_numbers(tmp_path):
    path = write(tmp_path / "p.tsv", '1\t"two\nlines"\tT\n2\tok\tT\n3\tbad\n')
    with pytest.raises(DataError, match=r"p\.tsv:4: expected 3"):
        list(read_passages(path))
    assert list(itertools.islice(read_passages(path), 2)) == [
        Passage("1", "two\nlines", "T"), Passage("2", "ok", "T")]


@pytest.mark.parametrize("record, location, message", [
    ({"id": "1", "text": "t"}, "a.jsonl:2: field 'title'", "missing"),
    ({"id": "1", "title": "T"}, "a.jsonl:2: field 'text'", "missing"),
    ({"id": "1", "title": "T", "text": None}, "a.jsonl:2: field 'text'", "expected str"),
    ({"id": "0", "title": "T", "text": "again"}, "a.jsonl:2: field 'id'", "duplicate id '0'"),
])
def test_bad_articles(tmp_path, record, location, message):
    path = write(tmp_path / "a.jsonl", jsonl({"id": "0", "title": "T", "text": "ok"}, record))
    with pytest.raises(DataError) as info:
        list(iter_article_passages(path))
    assert str(info.value).startswith(str(tmp_path / location))
    assert message in str(info.value)


def test_missing_files_fail_when_the_reader_is_created(tmp_path):
    missing = tmp_path / "missing.jsonl"
    for make in (read_passages, read_jsonl_passages, read_tsv_passages, read_articles,
                 iter_article_passages):
        with pytest.raises(DataError, match="missing.jsonl: file not found"):
            make(missing)  # no next(): the error comes before iteration
    with pytest.raises(DataError, match="is a folder"):
        read_articles(tmp_path)


# -- Hugging Face datasets --------------------------------------------------------------------

def test_hf_reader_from_saved_dataset_and_json_builder(tmp_path, fixtures_dir):
    datasets = pytest.importorskip("datasets")
    rows = {"id": ["p1", "p2", "p3"], "text": ["First text.", "Second text.", "Third text."],
            "title": ["A", "B", None], "other": [1, 2, 3]}
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict(rows).save_to_disk(str(saved))
    expected = [Passage("p1", "First text.", "A"), Passage("p2", "Second text.", "B"),
                Passage("p3", "Third text.", "")]
    reader = read_hf_passages(saved, batch_size=2)
    assert not isinstance(reader, list)
    assert list(reader) == expected
    assert list(read_hf_passages(saved, streaming=True)) == expected

    data_file = write(tmp_path / "rows.jsonl", jsonl(*(
        {"id": i, "text": t, "title": ti} for i, t, ti in zip(rows["id"], rows["text"],
                                                               rows["title"]))))
    assert list(read_hf_passages("json", data_files=str(data_file),
                                 cache_dir=str(tmp_path / "cache"))) == expected

    renamed = tmp_path / "renamed"
    datasets.DatasetDict({"corpus": datasets.Dataset.from_dict(
        {"docid": ["x"], "body": ["Body text."]})}).save_to_disk(str(renamed))
    assert list(read_hf_passages(renamed, split="corpus", id_field="docid",
                                 text_field="body")) == [Passage("x", "Body text.", "")]
    with pytest.raises(DataError, match="no split 'train'; it has corpus"):
        read_hf_passages(renamed)


def test_hf_reader_bad_input(tmp_path, fixtures_dir):
    datasets = pytest.importorskip("datasets")
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"id": ["a", "b", "a"], "text": ["ok", None, "x"]}).save_to_disk(
        str(saved))
    with pytest.raises(DataError, match=r"saved:2: field 'text': expected a string, got NoneType"):
        list(read_hf_passages(saved))
    with pytest.raises(DataError, match=r"field 'body': no such column; the dataset has id, text"):
        read_hf_passages(saved, text_field="body")
    dup = tmp_path / "dup"
    datasets.Dataset.from_dict({"id": ["a", "b", "a"], "text": ["x", "y", "z"]}).save_to_disk(
        str(dup))
    with pytest.raises(DataError, match=r"dup:3: field 'id': duplicate id 'a' \(first on row 1\)"):
        list(read_hf_passages(dup))
    aliases = str(fixtures_dir / "corpus" / "passages_aliases.jsonl")
    with pytest.raises(DataError, match=r"json\(.*passages_aliases\.jsonl\):2: field '_id': "
                                        r"expected a string or integer id, got NoneType"):
        list(read_hf_passages("json", data_files=aliases, id_field="_id",
                              cache_dir=str(tmp_path / "c"), streaming=True))
    with pytest.raises(DataError, match="json: cannot load dataset"):
        read_hf_passages("json", data_files=str(tmp_path / "nothing.jsonl"),
                         cache_dir=str(tmp_path / "c"))
    with pytest.raises(DataError, match="cannot load dataset"):
        read_hf_passages(str(tmp_path / "no-such-dataset"))


# -- passage store ----------------------------------------------------------------------------

def test_store_round_trip(tmp_path, fixtures_dir):
    passages = list(read_passages(fixtures_dir / "corpus" / "passages.jsonl"))
    passages += [Passage("a", "Prefix id."), Passage("a#1", "Longer id.", "A"),
                 Passage("ab", "Sorted after a#1.")]
    store = PassageStore.build(iter(passages), tmp_path / "store", progress=False, max_words=100)
    assert len(store) == len(passages)
    assert list(store) == passages
    assert list(store.ids()) == [p.id for p in passages]
    for index, passage in enumerate(passages):
        assert store.get(passage.id) == passage and store[passage.id] == passage
        assert store.index(passage.id) == index and store.at(index) == passage
    assert "東京#0" in store and "東京" not in store and "" not in store and 42 not in store
    with pytest.raises(KeyError):
        store.get("doc1#2")
    with pytest.raises(IndexError):
        store.at(len(passages))
    data = (tmp_path / "store" / "passages.jsonl").read_bytes()
    assert store.checksum == "sha256:" + hashlib.sha256(data).hexdigest()
    assert [json.loads(line)["id"] for line in data.splitlines()] == [p.id for p in passages]
    meta = json.loads((tmp_path / "store" / "meta.json").read_text())
    assert (meta["count"], meta["max_words"]) == (len(passages), 100)
    store.verify()
    store.close()

    reopened = PassageStore.open(tmp_path / "store")
    assert reopened.get("doc1#1").text == "It lies at the north-western tip of Lake Zürich."
    assert list(read_passages(tmp_path / "store")) == passages  # format "auto" sees a store
    assert not list(tmp_path.glob(".store*"))  # no temporary folders left


def test_store_lookups_match_a_dict_on_random_ids(tmp_path):
    rng = random.Random(7)
    alphabet = "ab#Zé0"
    ids = {"".join(rng.choices(alphabet, k=rng.randint(1, 6))) for _ in range(600)}
    passages = [Passage(pid, f"text of {pid}", f"t{i}") for i, pid in enumerate(sorted(ids))]
    rng.shuffle(passages)
    store = PassageStore.build(passages, tmp_path / "s", progress=False)
    for passage in passages:
        assert store.get(passage.id) == passage
    probes = {"".join(rng.choices(alphabet, k=rng.randint(1, 7))) for _ in range(600)}
    assert all((probe in store) == (probe in ids) for probe in probes)


def test_empty_store(tmp_path):
    store = PassageStore.build([], tmp_path / "empty", progress=False)
    assert len(store) == 0 and list(store) == [] and "x" not in store
    assert store.checksum == "sha256:" + hashlib.sha256(b"").hexdigest()


def failing(passages, after):
    for number, passage in enumerate(passages):
        if number == after:
            raise RuntimeError("disk on fire")
        yield passage


def test_failed_build_leaves_no_store(tmp_path):
    passages = [Passage(str(i), f"text {i}") for i in range(10)]
    with pytest.raises(RuntimeError, match="disk on fire"):
        PassageStore.build(failing(passages, 5), tmp_path / "store", progress=False)
    assert list(tmp_path.iterdir()) == []

    with pytest.raises(DataError, match=r"duplicate passage id '3' \(passages 4 and 11\)"):
        PassageStore.build(passages + [Passage("3", "again")], tmp_path / "store", progress=False)
    assert list(tmp_path.iterdir()) == []

    with pytest.raises(DataError, match="passage 2: expected a Passage, got dict"):
        PassageStore.build([passages[0], {"id": "x", "text": "y"}], tmp_path / "store",
                           progress=False)
    with pytest.raises(DataError, match="field 'text': passage 1: empty"):
        PassageStore.build([Passage("x", " ")], tmp_path / "store", progress=False)
    with pytest.raises(DataError, match=r"passage 1 \('bad\\ud800'\): not encodable as UTF-8"):
        PassageStore.build([Passage("bad\ud800", "text")], tmp_path / "store", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_rebuild_replaces_only_with_overwrite_and_failure_keeps_old_store(tmp_path):
    path = tmp_path / "store"
    PassageStore.build([Passage("old", "Old text.")], path, progress=False)
    with pytest.raises(ConvQAError, match="already exists"):
        PassageStore.build([Passage("new", "New text.")], path, progress=False)
    with pytest.raises(RuntimeError):
        PassageStore.build(failing([Passage("new", "New.")] * 3, 2), path, progress=False,
                           overwrite=True)
    assert list(PassageStore.open(path).ids()) == ["old"]
    PassageStore.build([Passage("new", "New text.")], path, progress=False, overwrite=True)
    assert list(PassageStore.open(path)) == [Passage("new", "New text.")]
    assert [p.name for p in tmp_path.iterdir()] == ["store"]
    (path / "meta.json").write_text("{damaged")  # a damaged store can still be rebuilt
    PassageStore.build([Passage("newer", "Text.")], path, progress=False, overwrite=True)
    assert list(PassageStore.open(path).ids()) == ["newer"]
    other = tmp_path / "not-a-store"
    other.mkdir()
    (other / "keep.txt").write_text("user data")
    with pytest.raises(ConvQAError, match="is not a passage store"):
        PassageStore.build([Passage("x", "y")], other, progress=False, overwrite=True)
    assert (other / "keep.txt").read_text() == "user data"


def test_opening_damaged_stores(tmp_path):
    with pytest.raises(DataError, match="not a passage store"):
        PassageStore.open(tmp_path / "nothing")
    path = tmp_path / "store"
    PassageStore.build([Passage("a", "Alpha."), Passage("b", "Beta.")], path, progress=False)

    data = path / "passages.jsonl"
    original = data.read_bytes()
    data.write_bytes(original.replace(b"Alpha", b"Alpho"))  # same size, other content
    with pytest.raises(DataError, match="checksum differs"):
        PassageStore.open(path).verify()
    data.write_bytes(original[:-3])
    with pytest.raises(DataError, match=r"passages\.jsonl: is \d+ bytes, the index says"):
        PassageStore.open(path)
    data.write_bytes(original)

    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(DataError, match="field 'version': unsupported passage store version 99"):
        PassageStore.open(path)
    (path / "meta.json").write_text(json.dumps({**meta, "count": 3}))
    with pytest.raises(DataError, match=r"offsets\.npy: expected 4 int64 values"):
        PassageStore.open(path)
    (path / "meta.json").write_text("{not json")
    with pytest.raises(DataError, match=r"meta\.json:1: malformed JSON"):
        PassageStore.open(path)


# -- real data ------------------------------------------------------------------------------

SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*$")


def test_real_articles_split_into_valid_passages(shared_data, tmp_path):
    path = shared_file(ARTICLES)
    articles = list(itertools.islice(read_articles(path), 200))
    assert len(articles) == 200
    all_ids: list[str] = []
    for article in articles:
        passages = list(article_passages(article.id, article.title, article.text, 100))
        assert [p.id for p in passages] == [f"{article.id}#{n}" for n in range(len(passages))]
        assert all(p.title == article.title for p in passages)
        lengths = [len(p.text.split()) for p in passages]
        assert all(1 <= n <= 100 for n in lengths), article.id
        joined = [w for p in passages for w in p.text.split()]
        assert joined == article.text.split(), article.id
        # every passage ends a sentence or a line, unless it is a full chunk of a long sentence
        line_ends, count = set(), 0
        for line in article.text.splitlines():
            count += len(line.split())
            line_ends.add(count)
        end = 0
        for passage, n in zip(passages, lengths):
            end += n
            assert (SENTENCE_END.search(passage.text) or end in line_ends or n == 100), passage.id
        all_ids += [p.id for p in passages]
    assert len(all_ids) == len(set(all_ids)) > 2000

    first = articles[:20]
    store = PassageStore.build(
        (p for a in first for p in article_passages(a.id, a.title, a.text)), tmp_path / "s",
        progress=False, max_words=100)
    expected = [p for a in first for p in article_passages(a.id, a.title, a.text)]
    assert len(store) == len(expected)
    for passage in expected[::7]:
        assert store.get(passage.id) == passage
