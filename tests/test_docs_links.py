"""The README, docs/ and the model cards point only at files that exist: a renamed or deleted
result file, module or script must take its references along."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a path from the repository root, as prose and commands write it: docs/results/phrase.md
TOP = "docs|convqa|scripts|benchmarks|tests|examples|apps|retrievers|readers|phrase_index"
ROOTED = re.compile(rf"(?<![\w./~$-])((?:{TOP})/[\w./-]*\w\.(?:md|json|jsonl|png|py|yaml|sh))\b")
# a result file named without its folder inside docs/results: answers-full-collection.md
RESULT = re.compile(r"(?<![\w./~$-])((?:answers|phrase|retrieval|precision|bench-answer|reader|convdr)"
                    r"(?:-[\w.]+)*\.(?:md|json|jsonl|png))\b")


def documents() -> list[Path]:
    docs = sorted((REPO / "docs").rglob("*.md"))
    cards = sorted((REPO / "convqa" / "assets").glob("*/README.md"))
    return [REPO / "README.md", *docs, *cards]


def broken(document: Path) -> list[str]:
    text = document.read_text(encoding="utf-8")
    missing = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (document.parent / target.split("#")[0]).exists():
            missing.append(target)
    missing += [path for path in ROOTED.findall(text) if not (REPO / path).exists()]
    if document.parent == REPO / "docs" / "results":
        missing += [name for name in RESULT.findall(text) if not (document.parent / name).exists()]
    return missing


def test_every_link_and_path_in_the_docs_exists():
    problems = {str(doc.relative_to(REPO)): bad for doc in documents() if (bad := broken(doc))}
    assert problems == {}


def test_the_checker_sees_a_missing_file(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[ok](page.md) [gone](nothing-here.md) see docs/results/no-such-table.md\n",
                    encoding="utf-8")
    assert broken(page) == ["nothing-here.md", "docs/results/no-such-table.md"]
