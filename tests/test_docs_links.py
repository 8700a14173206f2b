"""The README, docs/, the model cards and the comments of code and config files point only at
files and sections that exist: a renamed or deleted result file, module, script or heading must
take its references along."""
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
# a section named in prose after its page: docs/reranker.md, "Two stages"
SECTION = re.compile(r"([\w./-]+\.md)\)?,\s+\"([^\"]+)\"")
FENCE = re.compile(r"^\s*```")
HEADING = re.compile(r"#{1,6}\s+(.+)")


def headings(page: Path) -> list[str]:
    """The page's headings as written, outside code blocks (whose `# comments` are not headings)."""
    found, in_code = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_code = not in_code
        elif not in_code and (match := HEADING.match(line)):
            found.append(match.group(1).strip())
    return found


def slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading: lower case, punctuation dropped, spaces as
    hyphens (`--loader-workers`'s hyphens stay)."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _page(document: Path, target: str) -> Path | None:
    """The page a reference names, relative to the document or to the repository root."""
    for candidate in (document.parent / target, REPO / target):
        if candidate.is_file():
            return candidate
    return None


def broken_sections(document: Path, text: str) -> list[str]:
    """Anchors (`page.md#slug`, `#slug`) and quoted section names that no heading carries."""
    missing = []
    for target in LINK.findall(text):
        path, _, anchor = target.partition("#")
        if not anchor or re.match(r"[a-z]+:", target) or (path and not path.endswith(".md")):
            continue
        page = _page(document, path) if path else document
        if page is not None and anchor not in {slug(h) for h in headings(page)}:
            missing.append(target)
    for path, section in SECTION.findall(text):
        page = _page(document, path)
        name = " ".join(section.split())
        if page is not None and not any(name in " ".join(h.split()) for h in headings(page)):
            missing.append(f'{path}, "{name}"')
    return missing


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
    return missing + broken_sections(document, text)


# files whose comments and docstrings name pages, sections and paths
SOURCES = ("benchmarks/*.yaml", "examples/*.yaml", "scripts/*.sh", "scripts/*.py", "apps/**/*.py",
           "convqa/**/*.py", "retrievers/**/*.py", "readers/**/*.py", "phrase_index/**/*.py")
COMMENT_START = re.compile(r"\n[ \t]*#[ \t]?")


def broken_in_source(source: Path) -> list[str]:
    """Paths and quoted sections in a code or config file; a reference that wraps onto the next
    comment line is read as one line."""
    text = COMMENT_START.sub("\n", source.read_text(encoding="utf-8"))
    return [p for p in ROOTED.findall(text) if not (REPO / p).exists()] + \
        broken_sections(source, text)


def test_every_link_and_path_in_the_docs_exists():
    problems = {str(doc.relative_to(REPO)): bad for doc in documents() if (bad := broken(doc))}
    assert problems == {}


def test_every_path_and_section_named_in_code_and_configs_exists():
    sources = sorted({path for pattern in SOURCES for path in REPO.glob(pattern)})
    assert len(sources) > 100
    problems = {str(s.relative_to(REPO)): bad for s in sources if (bad := broken_in_source(s))}
    assert problems == {}


def test_the_checker_reads_a_section_name_across_comment_lines(tmp_path):
    (tmp_path / "guide.md").write_text("# Guide\n\n## Which shortlist\n", encoding="utf-8")
    config = tmp_path / "pipeline.yaml"
    config.write_text('# read (guide.md, "Which\n# shortlist") and guide.md, "Two\n# stages"\n',
                      encoding="utf-8")
    assert broken_in_source(config) == ['guide.md, "Two stages"']


def test_the_checker_sees_a_missing_file(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[ok](page.md) [gone](nothing-here.md) see docs/results/no-such-table.md\n",
                    encoding="utf-8")
    assert broken(page) == ["nothing-here.md", "docs/results/no-such-table.md"]


def test_the_checker_sees_a_missing_section(tmp_path):
    (tmp_path / "guide.md").write_text(
        "# Guide\n\n## Batches built ahead: `--loader-workers`\n\n```bash\n# not a heading\n```\n",
        encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](guide.md#batches-built-ahead---loader-workers) [gone](guide.md#not-a-heading)\n"
        "[here](#top) and guide.md, \"Batches built\nahead\" but guide.md, \"Two stages\"\n"
        "\n# Top\n", encoding="utf-8")
    assert broken(page) == ["guide.md#not-a-heading", 'guide.md, "Two stages"']
