"""scripts/prepare_gpu_reader_reranker.sh on the tiny benchmark and a tiny reader: the carry
folder holds the reader examples (gold-article negatives included) and the reader in transport
form, and a carry over the size limit is refused with nothing left behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reader_helpers import single_thread, tiny_reader  # noqa: F401 (autouse fixture)
from training_helpers import ARTICLES, make_benchmark

ROOT = Path(__file__).resolve().parent.parent


def prepare(tmp_path, carry, **env):
    return subprocess.run(
        ["bash", "scripts/prepare_gpu_reader_reranker.sh", str(tmp_path / "bench"),
         str(tmp_path / "no-data"), str(tmp_path / "work"), str(carry)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
             "OMP_NUM_THREADS": "1", "MODEL": str(tmp_path / "reader"), **env})


@pytest.mark.slow
def test_prepare_builds_a_carry_within_the_limit(tmp_path):
    from convqa.front.tools.device_pack.examples import unpack_examples
    from convqa.front.tools.device_pack.weights import unpack_model
    from readers.extractive.data import load_examples
    from readers.extractive.model import ExtractiveReader

    make_benchmark(tmp_path / "bench" / "tiny")
    tiny_reader(max_length=128).save_pretrained(tmp_path / "reader", adapter_only=False)
    carry = tmp_path / "carry"
    done = prepare(tmp_path, carry)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "MiB (limit 63)" in done.stdout
    assert sorted(p.name for p in carry.iterdir()) == ["examples.json.xz", "model",
                                                       "prepared.json"]
    assert unpack_examples(carry / "examples.json.xz", tmp_path / "ex") == \
        {"train": 7, "heldout": 2}
    for example in load_examples(tmp_path / "ex" / "train.jsonl"):
        article = example.positives[0].passage.id.split("#")[0]
        siblings = len(ARTICLES[article][1]) - len(example.positives)
        same = [p for p in example.negatives if p.id.split("#")[0] == article]
        assert len(same) == siblings  # every other passage of the gold article
    assert json.loads((carry / "prepared.json").read_text())["train"] == 7
    unpack_model(carry / "model", tmp_path / "init")
    assert ExtractiveReader.from_pretrained(tmp_path / "init").has_selection_head
    # over the limit: refused, the carry folder left as it was
    before = sorted(p.name for p in carry.rglob("*"))
    refused = prepare(tmp_path, carry, LIMIT_MIB="1")
    assert refused.returncode == 1 and "over the limit" in refused.stderr
    assert sorted(p.name for p in carry.rglob("*")) == before
    assert not Path(f"{carry}.tmp").exists()
