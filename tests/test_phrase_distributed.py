"""The phrase trainer's 2-process CPU path (gloo, started by torchrun, run by accelerate):
replicas stay identical, each process trains its own share of every global batch, and with the
per-example loss only (span) two processes end where one process with the doubled
batch ends. (In-batch, pre-batch and turn losses see each process's own batch, by design.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from phrase_index.model import PhraseModel
from phrase_index.train import PhraseTrainConfig, train_stage
from phrase_model_helpers import one_thread, tiny_phrase_model
from training_helpers import make_benchmark, two_process_ranks

SCRIPT = r'''
import hashlib, json, sys
from pathlib import Path
from phrase_index.data import benchmark_phrase_examples
from phrase_index.train import PhraseTrainConfig, PhraseTrainer, make_accelerator
from phrase_model_helpers import tiny_phrase_model

examples = [e for e in benchmark_phrase_examples(sys.argv[1]) if e.split == "train"]
out, weights = Path(sys.argv[2]), json.loads(sys.argv[3])
acc = make_accelerator(cpu=True)
config = PhraseTrainConfig(batch_size=2, epochs=2, lr=5e-3, warmup_ratio=0.0, progress=False,
                           checkpoint_every=2, weights=weights)
trainer = PhraseTrainer(tiny_phrase_model(seed=0), examples, out, config, accelerator=acc)
sizes = []
result = trainer.train(on_step=lambda step, loss: sizes.append(len(trainer.last_batch)))
digest = hashlib.sha256()
for name, tensor in sorted(trainer.model.state_dict().items()):
    digest.update(name.encode() + tensor.detach().float().numpy().tobytes())
(out / f"rank{acc.process_index}.json").write_text(json.dumps({
    "processes": acc.num_processes, "sizes": sizes, "steps": result.steps,
    "indices": trainer.last_batch.indices, "weights": digest.hexdigest()}))
'''

# (the filter loss is a mean over all text tokens of a batch, not over examples: left out)
PER_EXAMPLE = {"span": 1.0, "filter": 0.0, "in_batch": 0.0, "pre_batch": 0.0, "turn": 0.0,
               "distill": 0.0}


def _torchrun(tmp_path: Path, bench: Path, out: Path, weights: dict) -> list[dict]:
    return two_process_ranks(SCRIPT, tmp_path, out, bench, out, json.dumps(weights))


@pytest.mark.slow  # two fresh interpreters importing torch and transformers: 20-40 s on 2 cores
def test_two_processes_match_one_process_with_the_doubled_batch(tmp_path):
    bench = make_benchmark(tmp_path / "bench")
    ranks = _torchrun(tmp_path, bench, tmp_path / "out", PER_EXAMPLE)
    assert [r["processes"] for r in ranks] == [2, 2]
    # 7 examples / (2 per process x 2 processes) = 1 step per epoch, 2 epochs
    assert [r["steps"] for r in ranks] == [2, 2]
    assert all(size == 2 for r in ranks for size in r["sizes"])
    assert not set(ranks[0]["indices"]) & set(ranks[1]["indices"])  # each its own share
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP kept the replicas identical

    from phrase_index.data import benchmark_phrase_examples

    examples = [e for e in benchmark_phrase_examples(bench) if e.split == "train"]
    with one_thread():
        single = tiny_phrase_model(seed=0)
        train_stage(single, examples, tmp_path / "single", PhraseTrainConfig(
            batch_size=4, epochs=2, lr=5e-3, warmup_ratio=0.0, progress=False,
            checkpoint_every=0, weights=PER_EXAMPLE))
    two = PhraseModel.load(tmp_path / "out" / "model").state_dict()
    one = single.state_dict()
    assert one.keys() == two.keys()
    # The span loss ignores a shift shared by all tokens' vectors (q . (h_i + c) shifts every
    # logit alike), so the phrase tower's last LayerNorm bias has an exactly zero gradient:
    # Adam turns its float noise into steps of either sign, different in the two runs.
    shift_only = {"phrase_encoder.encoder.layer.1.output.LayerNorm.bias"}
    worst = max(((one[k].float() - two[k].float()).abs().max().item(), k) for k in one
                if k not in shift_only)
    assert worst[0] < 1e-4, worst
    start = tiny_phrase_model(seed=0).state_dict()
    assert max((start[k].float() - one[k].float()).abs().max().item() for k in one) > 1e-3


@pytest.mark.slow
def test_two_processes_with_every_loss_and_the_query_stage_run(tmp_path):
    bench = make_benchmark(tmp_path / "bench")
    weights = {"span": 1.0, "filter": 0.5, "in_batch": 1.0, "pre_batch": 1.0, "turn": 0.5,
               "distill": 0.0}
    ranks = _torchrun(tmp_path, bench, tmp_path / "out", weights)
    assert ranks[0]["weights"] == ranks[1]["weights"] and ranks[0]["steps"] == 2
