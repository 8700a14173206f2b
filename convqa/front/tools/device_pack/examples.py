"""Reader example files (`convqa train reader`'s JSONL) packed for the trip to a GPU machine.

With 23 negatives per question most passages recur across questions (an article's passages
are the article negatives of all its turns; a SQuAD article's paragraphs of all its
questions), so the pack stores each distinct passage once and every example by passage
reference, in one xz-compressed JSON document:

    {"format": "convqa-device-examples", "version": 1,
     "passages": {key: {"id", "title", "text"}},
     "files": {name: [{..., "positives": [[key, [[text, start], ...]]], "negatives": [key]}]}}

Every input line is checked as the reader reads it (a bad one is a one-line error naming its
file, line and field). Unpacking writes NAME.jsonl per packed file, each identical to what
`readers.extractive.data.save_examples` writes for those examples.
"""
from __future__ import annotations

import json
import lzma
import os
from pathlib import Path
from typing import Any, Sequence

from convqa.errors import ConvQAError, DataError
from convqa.io import atomic_write, iter_jsonl, write_jsonl

FORMAT, VERSION = "convqa-device-examples", 1


def file_name(path: str | os.PathLike) -> str:
    """The name a file is packed under: its name without .jsonl[.xz|.gz]."""
    name = Path(path).name
    for suffix in (".xz", ".gz", ".jsonl"):
        name = name.removesuffix(suffix)
    return name


def pack_examples(out: str | os.PathLike, inputs: Sequence[str | os.PathLike]) -> dict:
    """Pack the reader example files `inputs` into `out` (atomically); returns counts."""
    from readers.extractive.data import ReaderExample

    if not inputs:
        raise ConvQAError("no example files to pack")
    passages: dict[str, dict[str, Any]] = {}
    files: dict[str, list[dict[str, Any]]] = {}
    for path in inputs:
        name = file_name(path)
        if name in files:
            raise DataError(f"a second input named {name!r}: packed files need distinct names",
                            path)
        rows = []
        for line, record in iter_jsonl(path):
            data = ReaderExample.from_dict(record, path, line).to_dict()
            data["positives"] = [[_key(passages, p), [[s["text"], s["start"]]
                                                      for s in p.pop("answers")]]
                                 for p in data["positives"]]
            data["negatives"] = [_key(passages, p) for p in data["negatives"]]
            rows.append(data)
        files[name] = rows
    document = {"format": FORMAT, "version": VERSION, "passages": passages, "files": files}
    with atomic_write(out, "wb") as raw, \
            lzma.open(raw, "wt", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as handle:
        json.dump(document, handle, ensure_ascii=False, separators=(",", ":"))
    return {"passages": len(passages), "examples": {n: len(r) for n, r in files.items()}}


def _key(passages: dict[str, dict[str, Any]], passage: dict[str, Any]) -> str:
    """The key of `passage` in the shared table: its id, or the id with a counter when
    another passage of that id (another collection) was stored first."""
    body = {"id": passage["id"], "title": passage.get("title", ""), "text": passage["text"]}
    key, n = body["id"], 0
    while key in passages and passages[key] != body:
        n += 1
        key = f"{body['id']}\u0000{n}"
    passages.setdefault(key, body)
    return key


def unpack_examples(pack: str | os.PathLike, outdir: str | os.PathLike) -> dict[str, int]:
    """Write OUTDIR/NAME.jsonl for each packed file (atomically); returns examples per file."""
    document = _read_pack(pack)
    passages = document["passages"]
    outdir = Path(outdir)
    counts = {}
    for name, rows in document["files"].items():
        if not isinstance(rows, list) or not name or "/" in name or name.startswith("."):
            raise DataError(f"damaged pack: file entry {name!r}", pack, field="files")
        records = [_record(row, passages, pack, f"files.{name}[{i}]")
                   for i, row in enumerate(rows)]
        counts[name] = write_jsonl(outdir / f"{name}.jsonl", records)
    return counts


def _read_pack(pack: str | os.PathLike) -> dict[str, Any]:
    try:
        with lzma.open(pack, "rt", encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise DataError("file not found", pack) from None
    except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"not a readable examples pack ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else 'damaged'})", pack) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise DataError(f"not a {FORMAT} pack", pack, field="format")
    if document.get("version") != VERSION:
        raise DataError(f"version {document.get('version')!r}, expected {VERSION}", pack,
                        field="version")
    for field in ("passages", "files"):
        if not isinstance(document.get(field), dict):
            raise DataError("missing or not an object", pack, field=field)
    return document


def _record(row: Any, passages: dict[str, Any], pack: str | os.PathLike, where: str) -> dict:
    """The example record of a packed row, checked as the reader will read it."""
    from readers.extractive.data import ReaderExample

    def passage(key: Any, field: str) -> dict[str, Any]:
        if not isinstance(key, str) or key not in passages:
            raise DataError(f"unknown passage {key!r}", pack, field=f"{where}.{field}")
        return dict(passages[key])

    try:
        record = dict(row)
        record["positives"] = [{**passage(key, f"positives[{i}]"),
                                "answers": [{"text": text, "start": start}
                                            for text, start in spans]}
                               for i, (key, spans) in enumerate(row["positives"])]
        record["negatives"] = [passage(key, f"negatives[{i}]")
                               for i, key in enumerate(row["negatives"])]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"damaged pack: {type(exc).__name__} {exc}", pack, field=where) from None
    try:
        return ReaderExample.from_dict(record, pack).to_dict()
    except DataError as exc:
        raise DataError(f"damaged pack: {exc.message}", pack,
                        field=f"{where}.{exc.field}" if exc.field else where) from None
