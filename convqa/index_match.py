"""An index answers only for the model and the passages it was built from: searched with
another model's vectors it returns nearest neighbours that mean nothing, and over another
passage store its row numbers name the wrong passages. Both would be silent wrong answers, so
either is refused in one line that says what to do."""
from __future__ import annotations

from typing import Any, Mapping

from convqa.errors import ConvQAError


def check_index_match(kind: str, model_word: str, meta: Mapping[str, Any],
                      index_fingerprint: str, fingerprint: str | None = None,
                      model_name: str | None = None,
                      corpus_checksum: str | None = None) -> None:
    """ConvQAError unless `fingerprint` (of the model about to search, `model_name`) and
    `corpus_checksum` (of the passage store) are those the index recorded (None: not checked).
    `kind` names the index ("dense index"), `model_word` what built it ("encoder", "model"),
    read from `meta[model_word]`."""
    where = f"{kind} (built with {model_word} {meta.get(model_word)!r}, fingerprint " \
            f"{index_fingerprint})"
    if fingerprint is not None and fingerprint != index_fingerprint:
        raise ConvQAError(f"{model_word} mismatch: {where} cannot be searched with {model_word} "
                          f"{model_name!r} (fingerprint {fingerprint}); use the index's "
                          f"{model_word} or rebuild the index with this one")
    if corpus_checksum is not None and corpus_checksum != meta.get("corpus_checksum"):
        raise ConvQAError(f"corpus mismatch: {where} was built over a corpus with checksum "
                          f"{meta.get('corpus_checksum')}, the passage store has "
                          f"{corpus_checksum}; rebuild the index")
