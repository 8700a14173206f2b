"""Corpus encoding: shards, manifest, resume after a kill, refusal to mix encoders or corpora,
the fp32 fallback of the fast path, and two processes under accelerate (gloo on CPU)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from convqa.corpus import PassageStore
from convqa.errors import ConfigError, ConvQAError
from convqa.types import Passage
from convqa import precision
from convqa.corpus.shards import passages_checksum
from retrievers.dense.encode import VectorShards, encode_corpus, encode_passages, shard_name
from retrievers.dense.model import DualEncoder, DualEncoderConfig

from test_dense_model import make_tiny_bert

WORDS = ("river mountain city history music science war king language ocean planet film "
         "river bridge empire novel painter island desert forest train church").split()


def corpus(n: int = 50) -> list[Passage]:
    """Passages of varied length (1 to ~60 words), some with titles, deterministic."""
    rng = np.random.default_rng(7)
    return [Passage(f"doc{i}#{i % 3}", " ".join(rng.choice(WORDS, 1 + (i * 7) % 60)),
                    f"Title {i}" if i % 2 else "") for i in range(n)]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, minilm_tokenizer):
    return make_tiny_bert(tmp_path_factory.mktemp("enc") / "bert", minilm_tokenizer)


@pytest.fixture(scope="module")
def model(tiny_dir):
    return DualEncoder.build(DualEncoderConfig(model=str(tiny_dir))).eval()


def reference(model, passages) -> np.ndarray:
    """fp32, one batch in input order (no shards, no sorting): row i is passage i. Padding does
    not change a vector (test_dense_model checks that)."""
    return encode_passages(model, passages, len(passages), sort=False)


def test_shards_manifest_and_row_order(model, tmp_path):
    passages = corpus(50)
    shards = encode_corpus(model, passages, tmp_path / "v", batch_size=8, precision="fp32",
                           shard_size=16, progress=False)
    names = sorted(p.name for p in (tmp_path / "v").iterdir())
    assert names == ["manifest.json"] + [shard_name(s, min(s + 16, 50)) for s in (0, 16, 32, 48)]
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["precision"] == "fp32"
    assert manifest["dtype"] == "float16" and manifest["count"] == 50 and manifest["dim"] == 32
    assert manifest["fingerprint"] == model.fingerprint()
    assert manifest["corpus_checksum"] == passages_checksum(passages)
    vectors = shards.load()
    assert vectors.shape == (50, 32) and vectors.dtype == np.float32
    # row i is passage i, within float16 rounding
    np.testing.assert_allclose(vectors, reference(model, passages), atol=2e-3)
    assert np.allclose(shards.rows([49, 3, 17]), vectors[[49, 3, 17]])


def test_float32_vectors_and_store_input(model, tmp_path):
    passages = corpus(20)
    store = PassageStore.build(passages, tmp_path / "store", progress=False)
    assert passages_checksum(passages) == store.checksum  # the same bytes are hashed
    shards = encode_corpus(model, store, tmp_path / "v", batch_size=4, precision="fp32",
                           shard_size=8, dtype="float32", progress=False)
    assert shards.dtype == "float32"
    np.testing.assert_allclose(shards.load(), reference(model, passages), atol=1e-5)


def test_resume_after_kill_encodes_only_what_is_missing(model, tmp_path, monkeypatch,
                                                        capsys):
    passages = corpus(40)
    clean = encode_corpus(model, passages, tmp_path / "clean", batch_size=4, precision="fp32",
                          shard_size=8, progress=False).load()

    calls = {"n": 0}
    real = model.encode_passage

    def dies_on_batch_7(batch):
        calls["n"] += 1
        if calls["n"] == 7:  # in the middle of the 4th shard (2 batches per shard)
            raise KeyboardInterrupt
        return real(batch)

    monkeypatch.setattr(model, "encode_passage", dies_on_batch_7)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(model, passages, tmp_path / "v", batch_size=4, precision="fp32", shard_size=8,
                      progress=False)
    monkeypatch.setattr(model, "encode_passage", real)
    folder = tmp_path / "v"
    done = sorted(p.name for p in folder.glob("shard-*.npy"))
    assert done == [shard_name(0, 8), shard_name(8, 16), shard_name(16, 24)]
    assert not list(folder.glob(".*.tmp"))  # the interrupted shard left no partial file
    with pytest.raises(ConvQAError, match="not finished"):
        VectorShards.open(folder)

    # damage one finished shard and leave a stray temporary file, as a hard kill could
    (folder / shard_name(8, 16)).write_bytes(b"\x93NUMPY garbage")
    (folder / f".{shard_name(24, 32)}.abc.tmp").write_bytes(b"partial")
    kept = (folder / shard_name(0, 8)).stat().st_mtime_ns
    calls["n"] = 0
    counted = model.encode_passage

    def counting(batch):
        calls["n"] += 1
        return counted(batch)

    monkeypatch.setattr(model, "encode_passage", counting)
    capsys.readouterr()
    resumed = encode_corpus(model, passages, folder, batch_size=4, precision="fp32", shard_size=8,
                            progress=True)
    assert calls["n"] == 2 * 3  # shards 8-16 (damaged), 24-32, 32-40: two batches each
    bar = capsys.readouterr().err.replace("\r", "\n")
    assert "resumed" in bar and "16/40" in bar and "40/40" in bar  # 0-8 and 16-24 were kept
    assert (folder / shard_name(0, 8)).stat().st_mtime_ns == kept
    assert not list(folder.glob(".*.tmp"))
    np.testing.assert_array_equal(resumed.load(), clean)


def test_refuses_to_mix_encoders_corpora_or_settings(model, tiny_dir, tmp_path,
                                                     minilm_tokenizer):
    passages = corpus(12)
    encode_corpus(model, passages, tmp_path / "v", precision="fp32", shard_size=8, progress=False)
    other = DualEncoder.build(DualEncoderConfig(
        model=str(make_tiny_bert(tmp_path / "other", minilm_tokenizer, seed=5))))
    with pytest.raises(ConvQAError) as error:
        encode_corpus(other, passages, tmp_path / "v", precision="fp32", shard_size=8, progress=False)
    assert model.fingerprint() in str(error.value) and other.fingerprint() in str(error.value)
    with pytest.raises(ConvQAError, match="corpus_checksum"):
        encode_corpus(model, passages[:-1] + [Passage("x", "changed")], tmp_path / "v",
                      precision="fp32", shard_size=8, progress=False)
    with pytest.raises(ConvQAError, match="shard_size"):
        encode_corpus(model, passages, tmp_path / "v", precision="fp32", shard_size=4, progress=False)
    with pytest.raises(ConvQAError, match="dtype"):
        encode_corpus(model, passages, tmp_path / "v", precision="fp32", shard_size=8,
                      dtype="float32", progress=False)


def fixed_timer(seconds):
    """A probe timer that reports the given seconds per precision (the CPU's speed injected)."""
    def timer(name, run):
        return seconds[name], run()
    return timer


def test_auto_precision_keeps_the_fastest_agreeing_candidate(model, tmp_path, monkeypatch):
    passages = corpus(10)
    # bf16 measured fastest (a CPU with native bf16): auto picks it, its vectors agree
    monkeypatch.setattr(precision, "time_run", fixed_timer({"fp32": 1.0, "bf16": 0.5,
                                                            "int8": 0.8}))
    shards = encode_corpus(model, passages, tmp_path / "v", shard_size=8, progress=False)
    probe = shards.manifest["precision_probe"]
    assert shards.manifest["precision"] == "bf16" and probe["precision"] == "bf16"
    assert probe["probe_seconds"] == {"fp32": 1.0, "bf16": 0.5, "int8": 0.8}
    assert probe["agreement"]["bf16"] >= 0.99 and probe["agreement"]["fp32"] == 1.0
    np.testing.assert_allclose(shards.load(), reference(model, passages), atol=0.05)
    # bf16 measured 6x slower than fp32 (an AVX2-only CPU): auto keeps fp32
    monkeypatch.setattr(precision, "time_run", fixed_timer({"fp32": 1.0, "bf16": 6.0,
                                                            "int8": 1.5}))
    slow = encode_corpus(model, passages, tmp_path / "w", shard_size=8, progress=False)
    assert slow.manifest["precision"] == "fp32"
    # a run that chose bf16 cannot be resumed in fp32 (the vectors would be mixed); auto resumes
    with pytest.raises(ConvQAError, match="precision bf16; precision fp32 needs another folder"):
        encode_corpus(model, passages, tmp_path / "v", shard_size=8, precision="fp32",
                      progress=False)
    again = encode_corpus(model, passages, tmp_path / "v", shard_size=8, progress=False)
    assert again.manifest["precision"] == "bf16"


def test_forced_int8_vectors_stay_close_to_fp32(model, tmp_path):
    passages = corpus(10)
    shards = encode_corpus(model, passages, tmp_path / "v", shard_size=8, precision="int8",
                           progress=False)
    assert shards.manifest["precision"] == "int8"
    cosine = np.sum(shards.load() * reference(model, passages), axis=1)
    assert cosine.min() > 0.9  # a tiny random model: close, not exact


def test_bad_inputs(model, tmp_path):
    with pytest.raises(ConvQAError, match="empty corpus"):
        encode_corpus(model, [], tmp_path / "a", progress=False)
    with pytest.raises(ConfigError, match="passage 2: expected a Passage"):
        encode_corpus(model, [Passage("a", "x"), "not a passage"], tmp_path / "b", progress=False)
    with pytest.raises(ConfigError, match="expected a PassageStore"):
        encode_corpus(model, (p for p in corpus(3)), tmp_path / "c", progress=False)
    with pytest.raises(ConfigError, match="dtype"):
        encode_corpus(model, corpus(3), tmp_path / "d", dtype="int8", progress=False)
    with pytest.raises(ConfigError, match="shard_size"):
        encode_corpus(model, corpus(3), tmp_path / "e", shard_size=0, progress=False)
    with pytest.raises(ConfigError, match="batch_size"):
        encode_corpus(model, corpus(3), tmp_path / "f", batch_size=0, precision="fp32", progress=False)
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "mine.txt").write_text("x")
    with pytest.raises(ConvQAError, match="not an encoded-vectors folder"):
        encode_corpus(model, corpus(3), tmp_path / "g", progress=False)


ENCODE_SCRIPT = """
import logging
import os
import sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
from retrievers.dense.encode import encode_corpus
from retrievers.dense.model import DualEncoder, DualEncoderConfig
from test_dense_encode import corpus
model = DualEncoder.build(DualEncoderConfig(model=sys.argv[1])).eval()
encode_corpus(model, corpus(45), sys.argv[2], batch_size=4, precision="fp32", shard_size=8,
              progress=False)
# one write call: the two processes share stdout, and print() writes its pieces one by one
sys.stdout.write(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} done" + chr(10))
sys.stdout.flush()
"""


def test_accelerate_launch_two_cpu_processes_equal_one(model, tiny_dir, tmp_path):
    """Two processes under the documented command, `accelerate launch --multi_gpu
    --num_processes 2` (without GPUs it runs torchrun with gloo on CPU; accelerate's `--cpu`
    flag alone would start a single process). `encode_corpus` finds the process group by
    itself, each process writes its own shards, and the merged result equals one process."""
    import subprocess
    import sys
    from pathlib import Path

    import socket

    with socket.socket() as probe:  # a free port: other test runs may hold accelerate's default
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = tmp_path / "encode.py"
    script.write_text(ENCODE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
        "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
         "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
         "--main_process_port", str(port),
         str(script), str(tiny_dir), str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[:3000] + "\n...\n" + result.stderr[-1500:]
    assert "rank 0 of 2 done" in result.stdout and "rank 1 of 2 done" in result.stdout
    # the six shards were split between the processes, not encoded twice
    assert "process 0/2 encoded 3 shards" in result.stdout
    assert "process 1/2 encoded 3 shards" in result.stdout
    single = encode_corpus(model, corpus(45), tmp_path / "one", batch_size=4, precision="fp32",
                           shard_size=8, progress=False).load()
    merged = VectorShards.open(tmp_path / "out")
    assert len(list((tmp_path / "out").glob("shard-*.npy"))) == 6
    np.testing.assert_allclose(merged.load(), single, atol=1e-3)  # float16 storage
    assert merged.manifest["fingerprint"] == model.fingerprint()


def test_launched_processes_must_be_seen_by_the_accelerator(model, tmp_path, monkeypatch):
    """Accelerator() without cpu=True on a GPU-less machine runs every launched process as
    rank 0 of 1: they would all encode everything and race on the files. Refused."""
    class SingleProcess:
        process_index, num_processes, device = 0, 1, "cpu"

        def wait_for_everyone(self) -> None:
            pass

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConvQAError, match="2 processes were launched but the accelerator "
                                          "sees 1.*cpu=True"):
        encode_corpus(model, corpus(5), tmp_path / "v", accelerator=SingleProcess(),
                      progress=False)
    assert not (tmp_path / "v").exists()
