"""Streaming readers for passage collections and article dumps.

Every reader is lazy: it returns a generator that reads one record at a time, so a collection of
millions of passages is never held in memory. The path is checked when the reader is called
(a missing file fails at once); record errors are raised when that record is reached, as a
`DataError` naming the file, the line and the field.

Formats
- JSONL(.gz), one passage a line: `id`, `text`, optional `title`. For compatibility with other
  toolkits `_id` (BEIR) is accepted when `id` is absent and `contents` (Pyserini JsonCollection)
  when `text` is absent; `contents` is taken verbatim as the text (no attempt is made to split
  a title out of it). Integer ids become strings.
- TSV(.gz), DPR style: `id<TAB>text<TAB>title`, or `id<TAB>text` (MS MARCO style). A first row
  `id, text[, title]` is a header and skipped. Fields may be wrapped in double quotes with `""`
  for a quote inside (DPR's psgs_w100.tsv does this), as the `csv` module reads them. Every row
  must have the column count of the first row.
- Articles JSONL(.gz), one article a line: `id`, `title`, `text` (and `url`, ignored), the format
  of the shared Wikipedia dump; `iter_article_passages` splits them into passages on the fly.

Passages with an empty (or whitespace-only) text are rejected: they can only be a mistake.
Duplicate ids are detected by remembering every id seen (about 70 bytes an id); pass
`unique_ids=False` for collections of tens of millions of passages.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Iterator, NamedTuple

from ..errors import DataError
from ..io import iter_jsonl, iter_lines, require
from ..types import Passage
from .passages import article_passages, check_max_words
from .records import SeenIds, id_value, passage_from_record, text_value, title_value

FORMATS = ("auto", "jsonl", "tsv", "store")


class Article(NamedTuple):
    id: str
    title: str
    text: str


def _check_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", path)
    if path.is_dir():
        raise DataError("is a folder, expected a file", path)
    return path


def read_jsonl_passages(path: str | os.PathLike, unique_ids: bool = True) -> Iterator[Passage]:
    """Stream the passages of a JSONL(.gz) file."""
    path = _check_file(path)
    return _jsonl_passages(path, unique_ids)


def _jsonl_passages(path: Path, unique_ids: bool) -> Iterator[Passage]:
    seen = SeenIds(unique_ids)
    for line, record in iter_jsonl(path):
        passage = passage_from_record(record, path, line)
        seen.add(passage.id, path, line, "id" if "id" in record else "_id")
        yield passage


_HEADERS = (["id", "text", "title"], ["id", "text"])


def read_tsv_passages(path: str | os.PathLike, unique_ids: bool = True) -> Iterator[Passage]:
    """Stream the passages of a DPR-style TSV(.gz) file (`id, text[, title]`)."""
    path = _check_file(path)
    return _tsv_passages(path, unique_ids)


def _tsv_passages(path: Path, unique_ids: bool) -> Iterator[Passage]:
    def lines() -> Iterator[str]:
        for _, text in iter_lines(path):  # strict UTF-8, errors name the line
            yield text + "\n"

    seen = SeenIds(unique_ids)
    reader = csv.reader(lines(), delimiter="\t", quotechar='"', doublequote=True, strict=True)
    columns: int | None = None
    row_start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"malformed TSV in the row starting here ({exc})", path,
                            row_start) from None
        line, row_start = row_start, reader.line_num + 1
        if not row or row == [""]:
            continue  # blank line
        if columns is None:
            if len(row) not in (2, 3):
                raise DataError(f"expected 2 or 3 tab-separated columns (id, text[, title]), "
                                f"got {len(row)}", path, line)
            columns = len(row)
            if [c.strip().lower() for c in row] in _HEADERS:
                continue
        if len(row) != columns:
            raise DataError(f"expected {columns} tab-separated columns like the first row, "
                            f"got {len(row)}", path, line)
        pid = id_value(row[0], path, line, "id")
        text = text_value(row[1], path, line, "text")
        seen.add(pid, path, line)
        yield Passage(id=pid, text=text, title=row[2] if columns == 3 else "")


def detect_format(path: str | os.PathLike) -> str:
    """'jsonl', 'tsv' or 'store' from the file name (or a store folder's meta.json)."""
    path = Path(path)
    if path.is_dir():
        if (path / "meta.json").is_file():
            return "store"
        raise DataError("is a folder but not a passage store (no meta.json)", path)
    name = path.name.lower()
    name = name[:-3] if name.endswith(".gz") else name
    if name.endswith(".jsonl"):
        return "jsonl"
    if name.endswith(".tsv"):
        return "tsv"
    raise DataError("cannot tell the passage format from the file name (expected .jsonl, "
                    ".jsonl.gz, .tsv or .tsv.gz); pass format='jsonl' or 'tsv'", path)


def read_passages(path: str | os.PathLike, format: str = "auto",
                  unique_ids: bool = True) -> Iterator[Passage]:
    """Stream the passages of a JSONL, TSV or passage-store collection (see module doc)."""
    if format not in FORMATS:
        raise DataError(f"unknown passage format {format!r}; expected one of {', '.join(FORMATS)}",
                        path)
    if format == "auto":
        if not Path(path).exists():
            raise DataError("file not found", path)
        format = detect_format(path)
    if format == "jsonl":
        return read_jsonl_passages(path, unique_ids)
    if format == "tsv":
        return read_tsv_passages(path, unique_ids)
    from .store import PassageStore  # ids in a store are unique by construction

    return iter(PassageStore.open(path))


def read_articles(path: str | os.PathLike, unique_ids: bool = True) -> Iterator[Article]:
    """Stream `Article(id, title, text)` records from an articles JSONL(.gz) file."""
    path = _check_file(path)
    return _articles(path, unique_ids)


def _articles(path: Path, unique_ids: bool) -> Iterator[Article]:
    seen = SeenIds(unique_ids)
    for line, record in iter_jsonl(path):
        aid = id_value(require(record, "id", path, line), path, line, "id")
        title = title_value(require(record, "title", path, line), path, line, "title")
        text = require(record, "text", path, line, str)
        seen.add(aid, path, line)
        yield Article(aid, title, text)


def iter_article_passages(path: str | os.PathLike, max_words: int = 100,
                          unique_ids: bool = True) -> Iterator[Passage]:
    """Stream the passages of every article in an articles file, split on the fly.

    Passage ids are `"{article id}#{n}"`, unique whenever article ids are (n follows the last
    '#', so an id names exactly one article and passage number).
    """
    check_max_words(max_words)
    articles = read_articles(path, unique_ids)
    return (passage for article in articles
            for passage in article_passages(article.id, article.title, article.text, max_words))
