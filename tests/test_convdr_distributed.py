"""The 2-process CPU path (gloo, started by torchrun, run by accelerate): replicas stay in sync
and KD with 2 x 2 examples ends where one process with 4 examples does; the CLI run builds its
inputs once and trains on both processes."""
from __future__ import annotations

import json

import numpy as np
import pytest

from convdr_helpers import examples, make_index, make_teacher, write_examples_jsonl
from training_helpers import torchrun, two_process_ranks

SCRIPT = r'''
import hashlib, json, sys
from pathlib import Path
import numpy as np
from convqa.history import build_history_strategy
from retrievers.convdr.model import ConvDR
from retrievers.convdr.targets import teacher_targets
from retrievers.convdr.train import ConvDRTrainConfig, TrainingSet, ConvDRTrainer, make_accelerator
from convdr_helpers import examples

teacher, out = sys.argv[1], Path(sys.argv[2])
acc = make_accelerator(cpu=True)
model = ConvDR.build(teacher, query_max_length=64)
strategy = build_history_strategy({"name": "questions_only", "max_tokens": 62})
data = examples()
targets = teacher_targets(model.teacher, [e.rewrite for e in data], out / f"t{acc.process_index}")
training = TrainingSet([strategy.format(e.question, e.history) for e in data], targets,
                       np.ones(len(data), dtype=bool))
config = ConvDRTrainConfig(batch_size=2, epochs=2, lr=1e-3, checkpoint_every=2, progress=False)
result = ConvDRTrainer(model, training, out, config, acc).train()
digest = hashlib.sha256()
for name, tensor in sorted(model.query_encoder.state_dict().items()):
    digest.update(name.encode() + tensor.detach().float().numpy().tobytes())
(out / f"rank{acc.process_index}.json").write_text(json.dumps({
    "processes": acc.num_processes, "steps": result.steps, "weights": digest.hexdigest()}))
'''


@pytest.mark.slow  # two fresh interpreters importing torch: ~20-40 s on 2 cores
def test_two_processes_match_one_process_with_the_doubled_batch(tmp_path):
    from convqa.history import build_history_strategy
    from retrievers.convdr.model import ConvDR
    from retrievers.convdr.targets import teacher_targets
    from retrievers.convdr.train import ConvDRTrainConfig, TrainingSet, train_convdr

    teacher = make_teacher(tmp_path / "teacher", dropout=0.0)
    out = tmp_path / "out"
    ranks = two_process_ranks(SCRIPT, tmp_path, out, teacher, out)
    assert [r["processes"] for r in ranks] == [2, 2]
    assert [r["steps"] for r in ranks] == [4, 4]  # 8 examples / (2 x 2) x 2 epochs
    assert ranks[0]["weights"] == ranks[1]["weights"]

    single = ConvDR.build(str(teacher), query_max_length=64)
    strategy = build_history_strategy({"name": "questions_only", "max_tokens": 62})
    data = examples()
    targets = teacher_targets(single.teacher, [e.rewrite for e in data], tmp_path / "t")
    training = TrainingSet([strategy.format(e.question, e.history) for e in data], targets,
                           np.ones(len(data), dtype=bool))
    train_convdr(single, training, tmp_path / "single",
                 ConvDRTrainConfig(batch_size=4, epochs=2, lr=1e-3, checkpoint_every=0,
                                   progress=False))
    two = ConvDR.from_pretrained(out / "model").query_encoder.state_dict()
    one = single.query_encoder.state_dict()
    worst = max((one[k].float() - two[k].float()).abs().max().item() for k in one)
    assert worst < 1e-4, worst
    start = ConvDR.build(str(teacher), query_max_length=64).query_encoder.state_dict()
    assert max((start[k] - one[k]).abs().max().item() for k in one) > 1e-3


@pytest.mark.slow
def test_cli_multitask_under_torchrun(tmp_path):
    teacher = make_teacher(tmp_path / "teacher")
    _, index_dir = make_index(tmp_path, teacher)
    data = write_examples_jsonl(tmp_path / "examples.jsonl")
    out = tmp_path / "run"
    done = torchrun("-m", "convqa.front.cli.main", "train", "convdr", "--mode", "multitask",
                     "--out", str(out), "--teacher", str(teacher), "--data", f"jsonl={data}",
                     "--index", str(index_dir), "--mine-top-k", "5", "--negatives", "2",
                     "--history-max-tokens", "62", "--batch-size", "1", "--max-steps", "2",
                     "--heldout-fraction", "0.25", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("examples: 6 train") == 1 and done.stdout.count("mining:") == 1
    record = json.loads((out / "training.json").read_text())
    assert record["processes"] == 2 and record["steps"] == 2
    assert json.loads((out / "fidelity.json").read_text())["count"] == 2
