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


def large_family(tmp_path, *args, **env):
    return subprocess.run(
        ["bash", "scripts/gpu_large_family.sh", *map(str, args)], cwd=ROOT, capture_output=True,
        text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
             "OMP_NUM_THREADS": "1", "STASH": str(tmp_path / "stash"),
             "WORK_DIR": str(tmp_path / "device"), **env})


def test_large_family_travels_in_two_calls_and_comes_back_as_adapters(tmp_path):
    """scripts/prepare_gpu_large_family.sh and scripts/gpu_large_family.sh on a tiny encoder in
    mpnet's place: the base splits over two carry folders within the limit; the train call
    without the stash call's chunk stops at once; after it, a reader and a reranker come back
    as adapters that name the base and load over it here, the reader scoring as its full
    weights on the machine did (up to the int8 copy); the teachers' targets come back for the
    examples prepared here (a third call, on the train call's models)."""
    import tarfile

    import torch

    from readers.extractive.data import load_examples as load_reader_examples
    from readers.extractive.distill import load_teacher_targets
    from retrievers.rerank.data import load_examples as load_rerank_examples
    from retrievers.rerank.distill import load_teacher_scores

    from convqa.front.tools.device_pack.export import import_back
    from readers.extractive.model import ExtractiveReader
    from reader_helpers import save_tiny_encoder
    from retrievers.rerank.model import CrossEncoder

    make_benchmark(tmp_path / "bench" / "tiny")
    base = save_tiny_encoder(tmp_path / "base")
    carry = tmp_path / "carry"
    done = subprocess.run(
        ["bash", "scripts/prepare_gpu_large_family.sh", str(tmp_path / "bench"),
         str(tmp_path / "no-data"), str(tmp_path / "work"), str(carry)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
             "OMP_NUM_THREADS": "1", "BASE_MODEL": str(base)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("MiB (limit 63)") == 2
    assert sorted(p.name for p in (carry / "1").iterdir()) == ["carry.tar.000-of-002"]
    assert sorted(p.name for p in (carry / "2").iterdir()) == [
        "base_name.txt", "carry.tar.001-of-002", "examples.json.xz", "prepared.json"]
    flags = {"STEPS_CAP": "2", "EVAL_EXAMPLES": "2", "READER_FLAGS": "--batch-size 2 "
             "--passages-per-question 3 --max-length 128",
             "RERANKER_FLAGS": "--batch-size 2 --negatives 2 --max-length 128"}
    early = large_family(tmp_path, "train", carry / "2", 600, tmp_path / "out0", **flags)
    assert early.returncode == 3 and "make the stash call" in early.stdout
    untrained = large_family(tmp_path, "teach", "-", 600, tmp_path / "out0")
    assert untrained.returncode == 3 and "the train call comes first" in untrained.stderr
    assert large_family(tmp_path, "stash", carry / "1").returncode == 0
    ran = large_family(tmp_path, "train", carry / "2", 600, tmp_path / "out", **flags)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    for name in ("reader", "reranker"):
        import_back(tmp_path / "out" / name, tmp_path / "runs" / name)
        assert (tmp_path / "runs" / name / "eval.json").exists()
    reader = ExtractiveReader.from_pretrained(tmp_path / "runs" / "reader" / "model").eval()
    assert reader.has_adapters and reader.config.model == str(base)
    reranker = CrossEncoder.from_pretrained(tmp_path / "runs" / "reranker" / "model")
    assert reranker.has_adapters and reranker.config.model == str(base)
    trained = ExtractiveReader.from_pretrained(tmp_path / "device" / "reader" / "model").eval()
    ids = torch.randint(1000, 5000, (2, 24))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        here, there = reader(ids, mask).start, trained(ids, mask).start
    assert torch.allclose(here, there, atol=0.05 * float(there.abs().max()))
    taught = large_family(tmp_path, "teach", "-", 600, tmp_path / "out-teach")
    assert taught.returncode == 0, taught.stdout[-3000:] + taught.stderr[-2000:]
    with tarfile.open(tmp_path / "out-teach" / "teacher.tar.xz") as tar:
        tar.extractall(tmp_path / "teacher", filter="data")
    built = tmp_path / "work" / "reader-data" / "data" / "train.jsonl"
    targets = load_teacher_targets(tmp_path / "teacher" / "reader-targets.jsonl",
                                   load_reader_examples(built))
    assert targets is not None
    train_examples = [e for e in load_rerank_examples(built)]
    scores = load_teacher_scores(tmp_path / "teacher" / "reranker-scores.jsonl", train_examples)
    assert scores is not None


def test_gpu_assets_untracks_the_shipped_models_for_the_calls_and_restores_them(tmp_path):
    """scripts/gpu_assets.sh in a small repository: `untrack` leaves convqa/assets on disk but
    out of the index and ignored (so it does not travel), `restore` puts both back; with staged
    changes it refuses (a commit in between would delete the shipped models)."""
    repo = tmp_path / "repo"
    (repo / "convqa" / "assets" / "model").mkdir(parents=True)
    (repo / "convqa" / "assets" / "model" / "weights.bin").write_bytes(b"w" * 100)
    (repo / "scripts").mkdir()
    (repo / "scripts" / "gpu_assets.sh").write_text((ROOT / "scripts" / "gpu_assets.sh").read_text())
    (repo / "code.py").write_text("x = 1\n")

    def git(*args):
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                              check=True).stdout

    def assets(mode):
        return subprocess.run(["bash", "scripts/gpu_assets.sh", mode], cwd=repo,
                              capture_output=True, text=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert assets("untrack").returncode == 0
    assert git("ls-files", "convqa/assets") == ""
    assert (repo / "convqa" / "assets" / "model" / "weights.bin").exists()
    assert "?? convqa/assets" not in git("status", "--short", "--untracked-files=all")
    assert assets("restore").returncode == 0
    assert git("ls-files", "convqa/assets") == "convqa/assets/model/weights.bin\n"
    assert git("status", "--short") == ""
    assert "/convqa/assets/" not in (repo / ".git" / "info" / "exclude").read_text()
    (repo / "code.py").write_text("x = 2\n")
    git("add", "code.py")
    refused = assets("untrack")
    assert refused.returncode == 1 and "staged changes" in refused.stderr
    assert git("ls-files", "convqa/assets") == "convqa/assets/model/weights.bin\n"


def test_prepared_examples_take_extra_reader_flags(tmp_path):
    """EXAMPLE_FLAGS reach `convqa train reader --data-only`: with --absent-article the carried
    examples hold unanswerable copies of train turns (the large reader then trains with the
    null option from its first step); without them, none."""
    from readers.extractive.data import load_examples

    make_benchmark(tmp_path / "bench" / "tiny")

    def build(work, **env):
        done = subprocess.run(
            ["bash", "-c", 'source scripts/gpu_prepare_lib.sh && build_examples "$@"', "-",
             str(tmp_path / "bench"), str(tmp_path / "no-data"), str(work)],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
            env={**os.environ, "PY": sys.executable, "PYTHONPATH": str(ROOT),
                 "OMP_NUM_THREADS": "1", "MAX_EXAMPLES": "50", "MAX_HELDOUT": "2", **env})
        assert done.returncode == 0, done.stderr[-2000:]
        return load_examples(work / "reader-data" / "data" / "train.jsonl")

    plain = build(tmp_path / "plain")
    absent = build(tmp_path / "absent", EXAMPLE_FLAGS="--unanswerable --absent-article 0.9")
    assert not any(e.unanswerable for e in plain)
    copies = [e for e in absent if e.id.endswith("/absent-article")]
    assert copies and all(e.unanswerable and not e.positives for e in copies)
    assert {e.id for e in absent} - {e.id for e in copies} == {e.id for e in plain}
