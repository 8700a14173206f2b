"""The reader's 2-process CPU path (gloo, started by torchrun, run by accelerate): replicas stay
identical and end where one process with the doubled batch ends."""
from __future__ import annotations

import json

import pytest

from conftest import shared_file
from readers.extractive.build_examples import squad_examples
from readers.extractive.data import load_examples, save_examples
from readers.extractive.model import ExtractiveReader
from readers.extractive.train import ReaderTrainConfig, train_reader
from reader_helpers import one_thread, tiny_reader
from training_helpers import two_process_ranks

SCRIPT = r'''
import hashlib, json, sys
from pathlib import Path
from readers.extractive.data import load_examples
from readers.extractive.heldout import scores_by_source
from readers.extractive.train import ReaderTrainConfig, ReaderTrainer, make_accelerator
from reader_helpers import tiny_reader

examples, out = load_examples(sys.argv[1]), Path(sys.argv[2])
acc = make_accelerator(cpu=True)
config = ReaderTrainConfig(batch_size=2, passages_per_question=2, epochs=2, lr=5e-3,
                           warmup_ratio=0.0, progress=False, checkpoint_every=2,
                           window_chunk=int(sys.argv[3]), eval_every=100, eval_per_source=5)
trainer = ReaderTrainer(tiny_reader(seed=0), examples, out, config, acc,
                        heldout=load_examples(sys.argv[4]))
questions = []
result = trainer.train(on_step=lambda step, loss: questions.append(trainer.last_batch.questions))
digest = hashlib.sha256()
for name, tensor in sorted(trainer.reader.state_dict().items()):
    digest.update(name.encode() + tensor.detach().float().numpy().tobytes())
# the curve's last point (scored by both processes, each its share) against one process alone
single = scores_by_source(trainer.reader, trainer.curve_sample) if acc.is_main_process else None
(out / f"rank{acc.process_index}.json").write_text(json.dumps({
    "processes": acc.num_processes, "questions": questions, "steps": result.steps,
    "weights": digest.hexdigest(), "single_process_heldout": single}))
'''


@pytest.mark.slow  # two fresh interpreters importing torch and transformers: 20-40 s on 2 cores
@pytest.mark.parametrize("chunk", [0, 3])  # 3: several forward passes per step under DDP
def test_two_processes_match_one_process_with_the_doubled_batch(tmp_path, chunk):
    built = squad_examples(shared_file("squad/dev-v2.0.json"), negatives=1, max_examples=60,
                           max_heldout=5)
    examples = [e for e in built if e.split == "train"
                and len(e.positives[0].passage.text) < 700][:8]
    assert len(examples) == 8
    data, heldout = tmp_path / "examples.jsonl", tmp_path / "heldout.jsonl"
    save_examples(data, examples)
    save_examples(heldout, [e for e in built if e.split == "heldout"])
    out = tmp_path / "out"
    ranks = two_process_ranks(SCRIPT, tmp_path, out, data, out, chunk, heldout)
    assert [r["processes"] for r in ranks] == [2, 2]
    # 8 examples / (2 per process x 2 processes) = 2 steps per epoch, 2 epochs
    assert [r["steps"] for r in ranks] == [4, 4]
    assert all(q == 2 for r in ranks for q in r["questions"])  # each process its own share
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP kept the replicas identical
    curve = [json.loads(line)["heldout"] for line in (out / "log.jsonl").read_text().splitlines()
             if '"heldout"' in line]
    assert [point["count"] for point in curve] == [5, 5]  # step 0 and the last step
    single = ranks[0]["single_process_heldout"]
    assert {k: v for k, v in curve[-1].items() if k != "seconds"} == \
        {k: v for k, v in single.items() if k != "seconds"}

    with one_thread():
        single = tiny_reader(seed=0)
        train_reader(single, load_examples(data), tmp_path / "single", ReaderTrainConfig(
            batch_size=4, passages_per_question=2, epochs=2, lr=5e-3, warmup_ratio=0.0,
            progress=False, checkpoint_every=0, window_chunk=chunk))
    two = ExtractiveReader.from_pretrained(out / "model").state_dict()
    one = single.state_dict()
    assert one.keys() == two.keys()
    # Softmax and cross-entropy ignore a shift shared by all logits, so the head biases and the
    # last LayerNorm bias (it shifts every token's logits alike) have an exactly zero gradient:
    # Adam turns its float noise into steps of either sign, different in the two runs.
    shift_only = {"span_head.bias", "selection_head.bias",
                  "encoder.encoder.layer.1.output.LayerNorm.bias"}
    worst = max((one[k].float() - two[k].float()).abs().max().item()
                for k in one if k not in shift_only)
    assert worst < 1e-4, worst
    start = tiny_reader(seed=0).state_dict()
    assert max((start[k].float() - one[k].float()).abs().max().item() for k in one) > 1e-3
