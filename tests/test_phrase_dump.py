"""Dumping phrase vectors with a tiny random phrase model: which tokens are kept (word
boundaries, filter thresholds, never the title), their vectors and character offsets, int8
storage, the size estimate, resuming after a kill, and refusals."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from convqa.errors import ConfigError, ConvQAError
from convqa.types import Passage
from phrase_index import dump as dump_module
from phrase_index.dump import PhraseDump, dump_corpus
from phrase_index.vectors import shard_dir_name
from phrase_model_helpers import tiny_phrase_model

TEXTS = [
    ("Danube", "The Danube is 2850 kilometres long and flows into the Black Sea."),
    ("Alpha Centauri", "Alpha Centauri is the closest star system to the Sun."),
    ("Photosynthesis", ("Photosynthesis converts light energy into chemical energy, stored "
                        "in carbohydrates.")),
    ("", "Tokyo became the capital of Japan in 1868."),
    ("Marie Curie", "Curie won Nobel prizes in physics (1903) and chemistry (1911)."),
    ("Everest", "Mount Everest, at 8849 metres, is Earth's highest mountain above sea level."),
    ("Nile", "The Nile flows north through eleven countries."),
]
PASSAGES = [Passage(f"doc{i}#0", text, title) for i, (title, text) in enumerate(TEXTS * 2)]


@pytest.fixture(scope="module")
def model():
    return tiny_phrase_model(seed=0).eval()


def reference(model, passage: Passage):
    """The passage encoded alone (no batching, no padding): tokens, offsets, vectors, logits."""
    enc = model.tokenize_passages([passage.title], [passage.text])
    with torch.no_grad():
        out = model.encode_passages(enc["input_ids"], enc["attention_mask"])
    pieces = model.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    text = enc["phrase_mask"][0].tolist()
    # WordPiece: "##x" continues a word, so it can neither start a phrase nor be followed by
    # a phrase end
    starts = [t for t in range(len(pieces)) if text[t] and not pieces[t].startswith("##")]
    ends = [t for t in range(len(pieces)) if text[t] and not (
        t + 1 < len(pieces) and text[t + 1] and pieces[t + 1].startswith("##"))]
    return {"starts": starts, "ends": ends, "pieces": pieces,
            "offsets": enc["offset_mapping"][0].numpy(), "start": out.start[0].numpy(),
            "end": out.end[0].numpy(), "start_filter": out.start_filter[0].numpy(),
            "end_filter": out.end_filter[0].numpy()}


def side_of(dump: PhraseDump, side: str, row: int):
    return dump.side(side).passage(row)


def test_keeps_word_boundary_text_tokens_with_their_vectors_and_offsets(model, tmp_path):
    dump = dump_corpus(model, PASSAGES, tmp_path / "d", start_threshold=None,
                       end_threshold=None, batch_size=3, shard_size=4, precision="fp32",
                       progress=False)
    assert dump.manifest["complete"] and dump.count == len(PASSAGES)
    assert dump.manifest["fingerprint"] == model.fingerprint()
    for row, passage in enumerate(PASSAGES):
        ref = reference(model, passage)
        for side, tokens in (("start", ref["starts"]), ("end", ref["ends"])):
            pos, vectors = side_of(dump, side, row)
            assert (pos[:, 0] == row).all()
            assert pos[:, 1].tolist() == tokens
            np.testing.assert_array_equal(pos[:, 2:], ref["offsets"][tokens])
            np.testing.assert_allclose(vectors, ref[side][tokens], atol=3e-3)  # float16
            for (_, token, lo, hi) in pos:  # offsets slice the word piece out of the text
                assert passage.text[lo:hi].lower() == ref["pieces"][token].lstrip("#")
    # "carbohydrates" is five word pieces: phrases may start at its first and end at its last
    text = PASSAGES[2].text
    lo, hi = text.index("carbohydrates"), text.index("carbohydrates") + len("carbohydrates")
    assert len(model.tokenizer.tokenize("carbohydrates")) == 5
    starts = [int(a) for _, _, a, _ in side_of(dump, "start", 2)[0] if lo <= a < hi]
    ends = [int(b) for _, _, _, b in side_of(dump, "end", 2)[0] if lo < b <= hi]
    assert starts == [lo] and ends == [hi]


def test_filter_thresholds_keep_tokens_above_them(model, tmp_path):
    refs = [reference(model, p) for p in PASSAGES]
    logits = np.sort(np.concatenate([r["start_filter"][r["starts"]] for r in refs]))
    gaps = np.diff(logits)
    middle = len(logits) // 2
    k = middle + int(np.argmax(gaps[middle:middle + 20]))  # a wide gap near the median
    threshold = float((logits[k] + logits[k + 1]) / 2)
    dump = dump_corpus(model, PASSAGES, tmp_path / "d", start_threshold=threshold,
                       end_threshold=None, batch_size=4, shard_size=5, precision="fp32",
                       progress=False)
    for row, ref in enumerate(refs):
        expected = [t for t in ref["starts"] if ref["start_filter"][t] > threshold]
        assert side_of(dump, "start", row)[0][:, 1].tolist() == expected
        assert side_of(dump, "end", row)[0][:, 1].tolist() == ref["ends"]
    assert 0 < dump.manifest["start_count"] < dump.manifest["end_count"]


def test_keep_fraction_sets_thresholds_from_the_sample(model, tmp_path):
    refs = [reference(model, p) for p in PASSAGES]
    candidates = {"start": np.concatenate([r["start_filter"][r["starts"]] for r in refs]),
                  "end": np.concatenate([r["end_filter"][r["ends"]] for r in refs])}
    dump = dump_corpus(model, PASSAGES, tmp_path / "d", keep_fraction=0.4, shard_size=4,
                       precision="fp32", progress=False)
    for side in ("start", "end"):
        # the sample is the whole corpus (14 passages): the threshold is the 60% quantile of
        # every candidate token's logit, and about 40% of the candidates pass it
        logits = candidates[side]
        threshold = dump.manifest[f"{side}_threshold"]
        assert threshold == pytest.approx(float(np.quantile(logits, 0.6)), abs=1e-4)
        kept = dump.manifest[f"{side}_count"]
        assert kept == int((logits > threshold).sum())
        assert abs(kept / len(logits) - 0.4) <= 1 / len(logits) + 1e-9
    assert dump.manifest["keep_fraction"] == 0.4
    # a rerun with the same fraction resumes (thresholds from the folder); another is refused
    dump_corpus(model, PASSAGES, tmp_path / "d", keep_fraction=0.4, shard_size=4, precision="fp32",
                progress=False)
    with pytest.raises(ConvQAError, match="another keep_fraction"):
        dump_corpus(model, PASSAGES, tmp_path / "d", keep_fraction=0.5, shard_size=4,
                    precision="fp32", progress=False)
    every = dump_corpus(model, PASSAGES, tmp_path / "all", keep_fraction=1.0, precision="fp32",
                        progress=False)
    assert every.manifest["start_threshold"] is None
    assert every.manifest["start_count"] == len(candidates["start"])
    with pytest.raises(ConfigError, match=r"keep_fraction must be in \(0, 1\]"):
        dump_corpus(model, PASSAGES, tmp_path / "x", keep_fraction=0.0, progress=False)


def test_int8_dump_matches_float16_within_the_quantization_step(model, tmp_path):
    fp16 = dump_corpus(model, PASSAGES, tmp_path / "a", start_threshold=None,
                       end_threshold=None, precision="fp32", progress=False)
    int8 = dump_corpus(model, PASSAGES, tmp_path / "b", start_threshold=None,
                       end_threshold=None, dtype="int8", precision="fp32", progress=False)
    for side in ("start", "end"):
        a, b = fp16.side(side), int8.side(side)
        ids = np.arange(a.count)
        np.testing.assert_array_equal(a.positions(ids), b.positions(ids))
        exact, approx = a.vectors(ids), b.vectors(ids)
        step = (exact.max(1) - exact.min(1)) / 255  # int8 step of each vector
        assert np.all(np.abs(approx - exact) <= step[:, None] / 2 + 2e-3)
    # a 32-d vector: 64 bytes as float16, 32 codes + 8 bytes of scale and offset as int8;
    # one vector per token-table row
    assert fp16.nbytes() - int8.nbytes() == fp16.manifest["tokens_count"] * (64 - 40)


def test_a_token_kept_on_both_sides_is_stored_once(model, tmp_path):
    dump = dump_corpus(model, PASSAGES, tmp_path / "d", start_threshold=None,
                       end_threshold=None, shard_size=4, precision="fp32", progress=False)
    start, end = dump.side("start"), dump.side("end")
    keys = {side: {tuple(p) for p in dump.side(side).positions(np.arange(dump.side(side).count))[:, :2]}
            for side in ("start", "end")}
    # most tokens are whole words (both a word start and a word end): stored once
    both = keys["start"] & keys["end"]
    assert len(both) > 0.5 * len(keys["start"])
    assert dump.manifest["tokens_count"] == len(keys["start"] | keys["end"])
    # and the side views read the same vector for such a token
    for row in range(len(PASSAGES)):
        (sp, sv), (ep, ev) = start.passage(row), end.passage(row)
        for i, key in enumerate(map(tuple, sp[:, :2])):
            match = [j for j, other in enumerate(map(tuple, ep[:, :2])) if other == key]
            if match:
                np.testing.assert_array_equal(sv[i], ev[match[0]])
    refs = sum(s.ref.nbytes + s.ptr.nbytes for sh in dump._shards for s in sh.sides.values())
    logits = 2 * (dump.manifest["start_count"] + dump.manifest["end_count"])  # float16 each
    table = dump.manifest["tokens_count"] * (2 * 32 + 16)  # float16 32-d vector + position
    assert dump.nbytes() == table + refs + logits
    # each side vector carries its filter logit, equal to what the filter head gives it
    for sh in dump._shards:
        for s in sh.sides.values():
            assert s.logits is not None and len(s.logits) == len(s.ref)


def test_size_estimate_is_printed_first_and_matches_the_dump(model, tmp_path, capsys):
    dump = dump_corpus(model, PASSAGES, tmp_path / "d", start_threshold=None,
                       end_threshold=0.0, shard_size=4, precision="fp32", progress=True)
    err = capsys.readouterr().err
    assert 0 <= err.index("phrase dump estimate (from 14 passages)") < err.index("phrase dump (")
    estimate = dump.manifest["estimate"]
    pointers = 2 * sum((e - s + 1) * 8 for s, e in dump.ranges())
    # the sample is the whole corpus here, so the estimate is exact (pointers aside)
    assert estimate["total_bytes"] == pytest.approx(dump.nbytes() - pointers)
    assert estimate["start_kept"] == pytest.approx(dump.manifest["start_count"] / len(PASSAGES))
    assert estimate["end_kept"] == pytest.approx(dump.manifest["end_count"] / len(PASSAGES))


def test_a_dump_for_a_compact_index_estimates_that_index_not_a_flat_one(model, tmp_path,
                                                                         capsys):
    dump = dump_corpus(model, PASSAGES, tmp_path / "d", start_threshold=None,
                       end_threshold=None, shard_size=4, precision="fp32", progress=True,
                       compact_bytes_per_token=100)
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("phrase dump estimate"))
    assert "Flat" not in line and "then a compact index of ~" in line
    tokens = max(dump.manifest["start_count"], dump.manifest["end_count"])
    mib = float(line.split("then a compact index of ~")[1].split(" MiB")[0].replace(",", ""))
    assert mib == pytest.approx(tokens * 100 / 2**20, abs=0.6)


def arrays(folder):
    return {p.relative_to(folder).as_posix(): np.load(p) for p in sorted(folder.rglob("*.npy"))}


def test_resume_after_a_kill_gives_the_identical_dump(model, tmp_path, monkeypatch):
    options = dict(start_threshold=-0.01, end_threshold=0.0, batch_size=3, shard_size=4,
                   precision="fp32", progress=False)
    clean = dump_corpus(model, PASSAGES, tmp_path / "clean", **options)
    writes = {"n": 0}
    real_write = dump_module._write

    def killed_after_two_shards(*args):
        writes["n"] += 1
        if writes["n"] == 3:
            raise KeyboardInterrupt  # the job dies while shard 2 is being written
        real_write(*args)

    monkeypatch.setattr(dump_module, "_write", killed_after_two_shards)
    folder = tmp_path / "d"
    with pytest.raises(KeyboardInterrupt):
        dump_corpus(model, PASSAGES, folder, **options)
    assert sorted(p.name for p in folder.glob("shard-*")) == [shard_dir_name(0, 4),
                                                              shard_dir_name(4, 8)]
    with pytest.raises(ConvQAError, match="not finished; rerun it to resume"):
        PhraseDump.open(folder)
    # what a hard kill can leave: a half-written temporary shard, a damaged finished one
    (folder / f".{shard_dir_name(8, 12)}.x.tmp").mkdir()
    (folder / shard_dir_name(4, 8) / "end_ref.npy").write_bytes(b"\x93NUMPY garbage")
    kept = (folder / shard_dir_name(0, 4) / "tokens_vectors.npy").stat().st_mtime_ns
    monkeypatch.setattr(dump_module, "_write", real_write)
    calls = {"n": 0}
    encode = model.encode_passages

    def counted(*args):
        calls["n"] += 1
        return encode(*args)

    monkeypatch.setattr(model, "encode_passages", counted)
    resumed = dump_corpus(model, PASSAGES, folder, **options)
    # shards 4-8 (damaged), 8-12 and 12-14: 2 + 2 + 1 batches of 3; no new size estimate
    assert calls["n"] == 5
    assert (folder / shard_dir_name(0, 4) / "tokens_vectors.npy").stat().st_mtime_ns == kept
    assert not list(folder.glob(".*.tmp"))
    a, b = arrays(tmp_path / "clean"), arrays(folder)
    assert a.keys() == b.keys() and len(a) == 4 * (2 + 2 * 3)  # table; ref, ptr, logits
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    for key in ("start_count", "end_count", "text_tokens"):
        assert resumed.manifest[key] == clean.manifest[key]


def test_refuses_to_mix_models_corpora_or_settings(model, tmp_path):
    folder = tmp_path / "d"
    dump_corpus(model, PASSAGES, folder, precision="fp32", progress=False, shard_size=4)
    checks = [(dict(dtype="int8"), "another dtype"),
              (dict(start_threshold=1.0), "another start_threshold"),
              (dict(shard_size=5), "another shard_size")]
    for options, message in checks:
        with pytest.raises(ConvQAError, match=message) as error:
            dump_corpus(model, PASSAGES, folder, **{"precision": "fp32", "progress": False,
                                                    "shard_size": 4, **options})
        assert "\n" not in str(error.value)
    with pytest.raises(ConvQAError, match="another fingerprint"):
        dump_corpus(tiny_phrase_model(seed=1), PASSAGES, folder, precision="fp32", progress=False,
                    shard_size=4)
    with pytest.raises(ConvQAError, match="another count"):
        dump_corpus(model, PASSAGES[:5], folder, precision="fp32", progress=False, shard_size=4)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ConvQAError, match="exists and is not a phrase dump"):
        dump_corpus(model, PASSAGES, tmp_path / "other", precision="fp32", progress=False)


def test_bad_options(model, tmp_path):
    cases = [(dict(dtype="float32"), ConfigError, "dtype must be one of float16, int8"),
             (dict(shard_size=0), ConfigError, "shard_size must be a positive int"),
             (dict(batch_size=True), ConfigError, "batch_size must be a positive int"),
             (dict(start_threshold=float("nan")), ConfigError, "start_threshold must be a finite"),
             (dict(end_threshold="high"), ConfigError, "end_threshold must be a finite")]
    for options, kind, message in cases:
        with pytest.raises(kind, match=message):
            dump_corpus(model, PASSAGES, tmp_path / "d", progress=False, **options)
    with pytest.raises(ConvQAError, match="cannot dump an empty corpus"):
        dump_corpus(model, [], tmp_path / "d", progress=False)
    with pytest.raises(ConfigError, match="passage 2: expected a Passage"):
        dump_corpus(model, [PASSAGES[0], "text"], tmp_path / "d", progress=False)
    assert not (tmp_path / "d").exists()


def test_long_passages_are_cut_and_counted(model, tmp_path):
    long = Passage("long#0", " ".join(["river"] * 120), "Long")
    dump = dump_corpus(model, [PASSAGES[0], long], tmp_path / "d", start_threshold=None,
                       end_threshold=None, precision="fp32", progress=False)
    assert dump.manifest["truncated"] == 1
    pos, _ = dump.side("start").passage(1)
    # 64-token window: [CLS] long [SEP] ... [SEP] leaves 60 text tokens, "river" 60 times
    assert pos[:, 1].tolist() == list(range(3, 63))
    assert pos[-1, 3] == 60 * 6 - 1 < len(long.text)
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["text_tokens"] == \
        dump.manifest["text_tokens"]


DUMP_SCRIPT = """
import logging
import os
import sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
import torch
torch.set_num_threads(1)
from phrase_index.dump import dump_corpus
from phrase_model_helpers import tiny_phrase_model
from test_phrase_dump import PASSAGES
from reader_helpers import single_thread  # noqa: F401 (autouse fixture: one thread)
dump_corpus(tiny_phrase_model(seed=0).eval(), PASSAGES, sys.argv[1], batch_size=3,
            shard_size=3, precision="fp32", progress=False)
# one write call: the two processes share stdout
sys.stdout.write(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} done" + chr(10))
sys.stdout.flush()
"""


@pytest.mark.slow
def test_accelerate_launch_two_cpu_processes_equal_one(model, tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2` on CPU (gloo): each process dumps its
    share of the shards, and the result equals a single-process dump."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = tmp_path / "dump.py"
    script.write_text(DUMP_SCRIPT)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                          os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
         "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
         "--main_process_port", str(port), str(script), str(tmp_path / "two")],
        capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rank 0 of 2 done" in result.stdout and "rank 1 of 2 done" in result.stdout
    # 14 passages in shards of 3: five shards, three for process 0 and two for process 1
    assert "process 0/2 dumped 3 shards" in result.stdout
    assert "process 1/2 dumped 2 shards" in result.stdout
    dump_corpus(model, PASSAGES, tmp_path / "one", batch_size=3, shard_size=3, precision="fp32",
                progress=False)
    a, b = arrays(tmp_path / "one"), arrays(tmp_path / "two")
    assert a.keys() == b.keys() and len(a) == 5 * (2 + 2 * 3)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert PhraseDump.open(tmp_path / "two").manifest["complete"]
