"""Reading and writing files safely.

Readers decode strictly as UTF-8 and report the file and line of any bad record; writers are
atomic (temporary file in the same folder, then rename) so a killed job never leaves half a file.
A `.gz` or `.xz` file is read decompressed; `write_jsonl` compresses a `.xz` name (xz makes a
passage-heavy JSONL several times smaller than gzip's level does at a similar read speed).
"""
from __future__ import annotations

import contextlib
import gzip
import json
import lzma
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import DataError


def _open_binary(path: Path):
    if not path.exists():
        raise DataError("file not found", path)
    if path.is_dir():
        raise DataError("is a folder, expected a file", path)
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    if path.suffix == ".xz":
        return lzma.open(path, "rb")
    return open(path, "rb")


_READ_ERRORS = (OSError, EOFError, gzip.BadGzipFile, lzma.LZMAError)


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text without newline); gz and xz are read transparently."""
    path = Path(path)
    with _open_binary(path) as handle:
        try:
            for number, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(f"not valid UTF-8 (byte {exc.start})", path, number) from None
                yield number, text.rstrip("\r\n")
        except _READ_ERRORS as exc:
            raise DataError(f"cannot read: {exc}", path) from None


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object) for every non-blank line of a JSONL(.gz/.xz) file."""
    for number, text in iter_lines(path):
        if not text.strip():
            continue
        try:
            yield number, json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"malformed JSON ({exc.msg}, column {exc.colno})", path, number) from None


def read_text(path: str | os.PathLike) -> str:
    """Whole file as text; a decoding error names the line it occurs on."""
    path = Path(path)
    with _open_binary(path) as handle:
        try:
            data = handle.read()
        except _READ_ERRORS as exc:
            raise DataError(f"cannot read: {exc}", path) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(f"not valid UTF-8 (byte {exc.start})", path, line) from None


def load_json(path: str | os.PathLike) -> Any:
    """Parse a JSON(.gz) file; syntax errors name the line."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"malformed JSON ({exc.msg}, column {exc.colno})", path, exc.lineno) from None


def load_format_json(path: str | os.PathLike, fmt: str, version: int, what: str) -> dict:
    """A metadata JSON object written by convqa, checked to be of format `fmt` and `version`."""
    meta = load_json(path)
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise DataError(f"not a {what} (format is not {fmt!r})", path)
    if meta.get("version") != version:
        raise DataError(f"unsupported {what} version {meta.get('version')!r} "
                        f"(this convqa reads {version})", path, None, "version")
    return meta


def require(record: Any, field: str, path: str | os.PathLike | None = None,
            line: int | None = None, types: type | tuple[type, ...] | None = None) -> Any:
    """`record[field]`, or a DataError naming the missing/mistyped field and where it is."""
    if not isinstance(record, dict):
        raise DataError(f"expected a JSON object, got {type(record).__name__}", path, line)
    if field not in record:
        raise DataError("missing", path, line, field)
    value = record[field]
    if types is not None and not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
        raise DataError(f"expected {names}, got {type(value).__name__}", path, line, field)
    return value


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8"):
    """Open a temporary sibling of `path` for writing; rename it over `path` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a plain open() would honour the umask
    binary = "b" in mode
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """Atomically write one JSON object per line (xz-compressed for a `.xz` name); returns the
    number of rows."""
    count = 0
    if Path(path).suffix == ".xz":
        with atomic_write(path, "wb") as raw, lzma.open(raw, "wt", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += 1
        return count
    with atomic_write(path) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    with atomic_write(path) as handle:
        json.dump(obj, handle, ensure_ascii=False, indent=indent)
        handle.write("\n")


def folder_bytes(folder: str | os.PathLike, skip: Iterable[str] = ()) -> int:
    """Bytes of every file under `folder` but those under its top-level entries named in
    `skip`: what an index takes on disk."""
    root, skipped = Path(folder), set(skip)
    return sum(p.stat().st_size for p in root.rglob("*")
               if p.is_file() and p.relative_to(root).parts[0] not in skipped)
