"""The 2-process CPU path (gloo, started by torchrun, run by accelerate): gathered in-batch
negatives, weights in sync, and the same result as one process with the doubled batch."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.corpus import PassageStore
from retrievers.training.data import PassageLookup, build_examples
from retrievers.training.trainer import TrainConfig, train_dual_encoder
from training_helpers import make_benchmark, tiny_encoder, torchrun, two_process_ranks

SCRIPT = r'''
import hashlib, json, sys
from pathlib import Path
import torch
from convqa.corpus import PassageStore
from retrievers.training.data import PassageLookup, build_examples
from convqa.training.loop import make_accelerator
from retrievers.training.trainer import TrainConfig, Trainer
from training_helpers import tiny_encoder

bench, out = Path(sys.argv[1]), Path(sys.argv[2])
acc = make_accelerator(cpu=True)
examples = build_examples(bench, positives="article")
lookup = PassageLookup([PassageStore.open(bench / "passages")])
negatives = {e.qid: ["G#0", "H#0", "I#0", "J#0", "A#1"] for e in examples.examples}
config = TrainConfig(batch_size=2, epochs=2, lr=1e-3, hard_negatives=1, progress=False,
                     checkpoint_every=2)
trainer = Trainer(tiny_encoder(seed=0, dropout=0.0), examples, lookup, out, config, negatives, acc)
shapes = []
result = trainer.train(on_step=lambda step, loss: shapes.append(trainer.last_logits_shape))
digest = hashlib.sha256()
for name, tensor in sorted(trainer.model.state_dict().items()):
    digest.update(name.encode() + tensor.detach().float().numpy().tobytes())
(out / f"rank{acc.process_index}.json").write_text(json.dumps({
    "processes": acc.num_processes, "shapes": shapes, "steps": result.steps,
    "weights": digest.hexdigest()}))
'''


@pytest.mark.slow  # two fresh interpreters importing torch: 12-30 s on 2 cores
def test_two_processes_gather_negatives_and_match_one_process(tmp_path):
    bench = make_benchmark(tmp_path / "bench")
    out = tmp_path / "out"
    ranks = two_process_ranks(SCRIPT, tmp_path, out, bench, out)
    assert [r["processes"] for r in ranks] == [2, 2]
    # 8 examples / (2 per process x 2 processes) = 2 steps per epoch, 2 epochs
    assert [r["steps"] for r in ranks] == [4, 4]
    # each process scores its 2 queries against all 2 x 2 examples x (1 positive + 1 hard
    # negative) = 8 passages: the other process's passages were gathered
    assert all(shape == [2, 8] for r in ranks for shape in r["shapes"])
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP kept the replicas identical

    # One process with the doubled batch computes the same gradients (exact gather), so it
    # ends with the same weights up to float summation order.
    examples = build_examples(bench, positives="article")
    lookup = PassageLookup([PassageStore.open(bench / "passages")])
    negatives = {e.qid: ["G#0", "H#0", "I#0", "J#0", "A#1"] for e in examples.examples}
    single = tiny_encoder(seed=0, dropout=0.0)
    train_dual_encoder(single, examples, lookup, tmp_path / "single",
                       TrainConfig(batch_size=4, epochs=2, lr=1e-3, hard_negatives=1,
                                   progress=False, checkpoint_every=0), negatives)
    two = type(single).from_pretrained(out / "model").state_dict()
    one = single.state_dict()
    assert one.keys() == two.keys()
    worst = max((one[k].float() - two[k].float()).abs().max().item() for k in one)
    assert worst < 1e-4, worst
    # and the difference is not trivially zero because nothing trained
    start = tiny_encoder(seed=0, dropout=0.0).state_dict()
    assert max((start[k].float() - one[k].float()).abs().max().item() for k in one) > 1e-3


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed missing")
def test_gloo_backend_available():
    assert torch.distributed.is_gloo_available()


@pytest.mark.slow
def test_cli_loop_under_torchrun_on_two_cpu_processes(tmp_path):
    """`torchrun -m convqa.front.cli.main train dpr`: one process group (not two lone processes),
    mining shared out, one summary printed."""
    bench = make_benchmark(tmp_path / "bench")
    init = tmp_path / "init"
    tiny_encoder(seed=0).save_pretrained(init)
    out = tmp_path / "out"
    command = ["-m", "convqa.front.cli.main", "train", "dpr", "--benchmark", str(bench), "--out",
               str(out), "--init-model", str(init), "--iterations", "2", "--max-steps", "2",
               "--batch-size", "2", "--positives", "article", "--mine-top-k", "4", "--quiet"]
    done = torchrun(*command)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("DPR-IHN in") == 1
    assert done.stdout.count("iter2.mine: running") == 1
    for n in (1, 2):
        record = json.loads((out / f"iter{n}" / "training.json").read_text())
        assert record["processes"] == 2 and record["steps"] == 2
    assert (out / "iter2" / "negatives" / "negatives.jsonl").exists()
