"""What a promoted model's card is made of, for the reader's and the phrase model's promotion
(promote_reader.py, promote_phrase.py): the held-out table of the new model against the one it
replaces, and the previous card kept under the new one's "History".

    >>> body, history = previous_card("# old\\nscores\\n## History\\nearlier")
    >>> body, history, demoted("# old")
    ('scores', 'earlier', '### old')
"""
from __future__ import annotations

from typing import Any


def score_table(new: dict[str, Any], old: dict[str, Any], noun: str = "reader",
                chance: bool = False) -> str:
    """The card's held-out table, new vs previous per source (+ chance F1, for phrase models)."""
    extra = " chance F1 |" if chance else ""
    lines = [f"| source | n | this {noun} EM / F1 | previous EM / F1 |{extra}",
             "|---|---:|---:|---:|" + ("---:|" if chance else "")]
    for source, entry in new["sources"].items():
        before = old["sources"].get(source)
        previous = f"{before['em']:.1f} / {before['f1']:.1f}" if before else "-"
        lines.append(f"| {source} | {entry['count']} | {entry['em']:.1f} / {entry['f1']:.1f} | "
                     f"{previous} |" + (f" {entry['chance_f1']:.1f} |" if chance else ""))
    lines.append(f"| **mean over sources** | {new['count']} | **{new['em']:.1f} / "
                 f"{new['f1']:.1f}** | {old['em']:.1f} / {old['f1']:.1f} |"
                 + ("  |" if chance else ""))
    return "\n".join(lines)


def previous_card(text: str) -> tuple[str, str]:
    """(the card's body without its title and History, its History section's content)."""
    body, _, history = text.partition("\n## History\n")
    lines = body.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(lines).strip(), history.strip()


def demoted(markdown: str) -> str:
    """Headings two levels down, so a previous card sits under one History entry."""
    return "\n".join("##" + line if line.startswith("#") else line
                     for line in markdown.splitlines())
