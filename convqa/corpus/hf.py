"""Passages from a Hugging Face `datasets` dataset (hub id, loader script name or saved folder).

`datasets` is an optional dependency (`pip install convqa[hf]`) and is imported only when this
reader is called. Rows are read in batches of `batch_size` through `Dataset.iter`, so neither a
memory-mapped local dataset nor a streamed (`streaming=True`) one is ever copied into a list.
Errors name the dataset and the 1-based row number (in the `line` slot of `DataError`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

from ..errors import ConvQAError, DataError
from ..types import Passage
from .records import SeenIds, id_value, text_value, title_value


def _load(name_or_path: str, split: str, streaming: bool, load_kwargs: dict[str, Any]) -> Any:
    try:
        import datasets
    except ImportError:
        raise ConvQAError("reading Hugging Face datasets needs the `datasets` package: "
                          "pip install 'convqa[hf]'") from None
    folder = Path(name_or_path)
    try:
        if folder.is_dir() and ((folder / "state.json").is_file()
                                or (folder / "dataset_dict.json").is_file()):
            data = datasets.load_from_disk(str(folder))  # written by save_to_disk
            if isinstance(data, datasets.DatasetDict):
                if split not in data:
                    raise DataError(f"no split {split!r}; it has {', '.join(data)}", name_or_path)
                data = data[split]
            return data.to_iterable_dataset() if streaming else data
        return datasets.load_dataset(name_or_path, split=split, streaming=streaming,
                                     **load_kwargs)
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - not found, bad split, no files, unreadable files
        message = str(exc).splitlines()[0] if str(exc) else ""
        raise DataError(f"cannot load dataset ({type(exc).__name__}) {message}".rstrip(),
                        name_or_path) from None


def read_hf_passages(name_or_path: str | os.PathLike, split: str = "train", id_field: str = "id",
                     text_field: str = "text", title_field: str | None = "title",
                     streaming: bool = False, unique_ids: bool = True, batch_size: int = 1000,
                     **load_kwargs: Any) -> Iterator[Passage]:
    """Stream passages from a dataset; `load_kwargs` go to `datasets.load_dataset` (for example
    `data_files=` and `cache_dir=` with the "json" builder). The title column is optional: a
    dataset without `title_field` gives passages with an empty title."""
    name = str(name_or_path)
    data = _load(name, split, streaming, load_kwargs)
    if "data_files" in load_kwargs:  # e.g. "json": name the files in errors
        name = f"{name}({load_kwargs['data_files']})"
    columns = data.column_names  # None for some streamed datasets: then checked row by row
    if columns is not None:
        for field in (id_field, text_field):
            if field not in columns:
                raise DataError(f"no such column; the dataset has {', '.join(columns)}",
                                name, None, field)
        if title_field is not None and title_field not in columns:
            title_field = None
    return _rows(data, name, id_field, text_field, title_field, unique_ids, batch_size)


def _rows(data: Any, name: str, id_field: str, text_field: str, title_field: str | None,
          unique_ids: bool, batch_size: int) -> Iterator[Passage]:
    seen = SeenIds(unique_ids, unit="row")
    path = Path(name)
    row = 0
    for batch in data.iter(batch_size=batch_size):
        for field in (id_field, text_field):
            if field not in batch:
                raise DataError("missing", name, row + 1, field)
        ids, texts = batch[id_field], batch[text_field]
        titles = batch.get(title_field) if title_field is not None else None
        for i in range(len(ids)):
            row += 1
            pid = id_value(ids[i], path, row, id_field)
            text = text_value(texts[i], path, row, text_field)
            title = title_value(titles[i], path, row, title_field) if titles is not None else ""
            seen.add(pid, path, row, id_field)
            yield Passage(id=pid, text=text, title=title)
