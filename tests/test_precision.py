"""convqa/precision.py: `auto` keeps the fastest candidate that agrees with fp32, whatever the
CPU; the timings are injected so both outcomes (native bf16 or not) are covered here."""
from __future__ import annotations

import logging

import pytest
import torch

from convqa import precision as P
from convqa.errors import ConfigError


def timer_of(seconds: dict[str, float]):
    def timer(name, run):
        return seconds[name], run()
    return timer


class TinyAttention(torch.nn.Module):
    """A module with an 'attention' projection (what int8 quantizes) and another linear."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.attention = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.out(torch.relu(self.attention(x)))


@pytest.fixture
def model():
    return TinyAttention().eval()


def run_on(model, inputs):
    return lambda precision: P.prepare(model, precision)(inputs)


def test_native_bf16_cpu_picks_bf16_when_it_agrees(model, caplog):
    inputs = torch.randn(8, 16)
    with caplog.at_level(logging.INFO, logger="convqa.precision"):
        choice = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.99,
                                    what="test", device="cpu",
                                    timer=timer_of({"fp32": 1.0, "bf16": 0.45, "int8": 0.7}))
    assert choice.precision == "bf16"
    assert choice.seconds == {"fp32": 1.0, "bf16": 0.45, "int8": 0.7}
    assert choice.agreement["fp32"] == 1.0 and choice.agreement["bf16"] > 0.99
    assert caplog.text.count("precision for test: bf16") == 1  # logged once, with the times
    assert "fp32 1000.0 ms" in caplog.text and "bf16 450.0 ms" in caplog.text


def test_avx2_cpu_keeps_fp32_when_bf16_is_slower(model):
    inputs = torch.randn(8, 16)
    choice = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.99,
                                what="test", device="cpu",
                                timer=timer_of({"fp32": 1.0, "bf16": 6.0, "int8": 1.2}))
    assert choice.precision == "fp32"


def test_fast_but_disagreeing_candidate_is_refused(model):
    inputs = torch.randn(8, 16)
    # int8 measured fastest, but no output other than fp32's can pass a threshold above 1
    choice = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=1.0 + 1e-6,
                                what="test", device="cpu",
                                timer=timer_of({"fp32": 1.0, "bf16": 0.5, "int8": 0.2}))
    assert choice.precision == "fp32"
    assert "disagrees" in choice.summary()
    # with a lenient threshold the same timings give int8
    choice = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.5,
                                what="test", device="cpu",
                                timer=timer_of({"fp32": 1.0, "bf16": 0.5, "int8": 0.2}))
    assert choice.precision == "int8" and choice.to_dict()["probe_seconds"]["int8"] == 0.2


def test_a_near_tie_keeps_fp32(model):
    inputs = torch.randn(8, 16)
    # int8 agrees (a lenient threshold) but is 0.6% faster, as a reranker probe on an AVX2
    # EPYC measured: probe noise, not worth int8's lossier output
    tie = {"fp32": 0.473, "bf16": 2.68, "int8": 0.470}
    choice = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.5,
                                what="test", device="cpu", timer=timer_of(tie))
    assert choice.precision == "fp32"
    assert "int8 470.0 ms (agreement" in choice.summary()
    assert "not 1.05x fp32's speed" in choice.summary()
    assert choice.to_dict()["min_speedup"] == P.MIN_SPEEDUP
    # over 5% faster is enough
    choice = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.5,
                                what="test", device="cpu", timer=timer_of({**tie, "int8": 0.45}))
    assert choice.precision == "int8"


def test_a_choice_remembered_under_the_old_rule_is_decided_again_without_probing(model,
                                                                                   tmp_path):
    import json

    key = f"{P.machine_key()}|cpu|test|model-a"
    old = {"precision": "int8", "what": "test", "cpu": "AVX2", "threshold": 0.95,
           "probe_seconds": {"fp32": 0.473, "bf16": 2.68, "int8": 0.470},
           "agreement": {"fp32": 1.0, "bf16": 1.0, "int8": 0.964}}
    path = tmp_path / "precision-choices.json"
    path.write_text(json.dumps({key: old}), encoding="utf-8")

    def never(name, run):
        raise AssertionError("the remembered probe decides")

    choice = P.choose_precision(run_on(model, torch.randn(2, 16)), P.min_cosine,
                                threshold=0.95, what="test", device="cpu", timer=never,
                                remember="model-a")
    assert choice.precision == "fp32" and choice.remembered
    stored = json.loads(path.read_text(encoding="utf-8"))[key]
    assert stored["precision"] == "fp32" and stored["min_speedup"] == P.MIN_SPEEDUP


def test_forced_precision_is_not_probed(model):
    def never(name, run):
        raise AssertionError("a forced precision must not be timed")

    choice = P.choose_precision(run_on(model, torch.randn(2, 16)), P.min_cosine,
                                threshold=0.99, what="test", device="cpu", requested="bf16",
                                timer=never)
    assert choice.precision == "bf16" and not choice.measured
    assert "forced" in choice.summary()


def test_a_candidate_that_fails_is_skipped(model):
    def run(precision):
        if precision == "int8":
            raise RuntimeError("no kernel")
        return model(torch.ones(2, 16))

    choice = P.choose_precision(run, P.min_cosine, threshold=0.99, what="test", device="cpu",
                                timer=timer_of({"fp32": 1.0, "bf16": 2.0, "int8": 0.1}))
    assert choice.precision == "fp32" and "int8" not in choice.seconds


def test_gpu_candidates_leave_out_int8():
    assert P.candidates_for("cpu") == ("fp32", "bf16", "int8")
    assert P.candidates_for("cuda") == ("fp32", "bf16")


def test_names_and_aliases():
    assert P.normalize_precision("BF16") == "bf16"
    assert P.normalize_precision("bf16-autocast") == "bf16"  # what older manifests record
    with pytest.raises(ConfigError, match=r"reader precision: unknown precision 'half'"):
        P.normalize_precision("half", "reader precision")
    with pytest.raises(ConfigError, match="must be resolved"):
        P.autocast("auto", "cpu")


def test_int8_copy_quantizes_attention_only_and_follows_weight_updates(model):
    quantized = P.prepare(model, "int8")
    assert quantized is not model and P.prepare(model, "int8") is quantized  # cached
    assert type(quantized.attention).__module__.startswith("torch.ao.nn.quantized")
    assert type(quantized.out) is torch.nn.Linear
    assert type(model.attention) is torch.nn.Linear  # the original is untouched
    x = torch.randn(4, 16)
    assert P.min_cosine(model(x), quantized(x)) > 0.99
    with torch.no_grad():
        model.out.weight.mul_(2.0)  # an in-place update (an optimizer step) ...
    assert P.prepare(model, "int8") is not quantized  # ... makes a new copy
    assert P.prepare(model, "fp32") is model and P.prepare(model, "bf16") is model


def test_int8_needs_an_attention_layer():
    with pytest.raises(ConfigError, match="no attention linear layers"):
        P.prepare(torch.nn.Sequential(torch.nn.Linear(4, 4)), "int8")


def test_a_choice_is_remembered_per_machine_and_model(model, tmp_path):
    inputs = torch.randn(8, 16)
    calls = []

    def timer(name, run):
        calls.append(name)
        return {"fp32": 1.0, "bf16": 0.4, "int8": 2.0}[name], run()

    first = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.99, what="test",
                               device="cpu", timer=timer, remember="model-a")
    again = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.99, what="test",
                               device="cpu", timer=timer, remember="model-a")
    assert first.precision == again.precision == "bf16" and again.remembered
    assert calls == ["fp32", "bf16", "int8"]  # the second call did not probe
    assert again.seconds == first.seconds and "measured earlier" in again.summary()
    other = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.99,
                               what="test", device="cpu", timer=timer, remember="model-b")
    assert not other.remembered and len(calls) == 6  # another model is probed anew
    (tmp_path / "precision-choices.json").write_text("{not json", encoding="utf-8")
    damaged = P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.99,
                                 what="test", device="cpu", timer=timer, remember="model-a")
    assert not damaged.remembered and damaged.precision == "bf16"  # a damaged file: probe again


def test_inputs_too_small_to_probe_run_fp32_undecided(model, tmp_path):
    """`ready=False` (e.g. a reader's single window, whose agreement can only be 0 or 1): fp32
    for that call, nothing probed or remembered, and the first call with enough inputs decides;
    a choice this machine remembers applies at once."""
    inputs = torch.randn(8, 16)
    calls = []

    def timer(name, run):
        calls.append(name)
        return {"fp32": 1.0, "bf16": 0.4, "int8": 2.0}[name], run()

    def choose(ready, remember="model-a"):
        return P.choose_precision(run_on(model, inputs), P.min_cosine, threshold=0.99,
                                  what="test", device="cpu", timer=timer, remember=remember,
                                  ready=ready)

    setting = P.PrecisionOnFirstUse("auto")
    assert setting.resolve(lambda: choose(False)) == "fp32"
    assert setting.value is None and setting.choice is None and calls == []
    assert "for now" in choose(False).summary()
    assert not (tmp_path / "precision-choices.json").exists()
    assert setting.resolve(lambda: choose(True)) == "bf16" and calls == ["fp32", "bf16", "int8"]
    assert setting.resolve(lambda: pytest.fail("decided already")) == "bf16"
    later = P.PrecisionOnFirstUse("auto")
    assert later.resolve(lambda: choose(False)) == "bf16" and later.choice.remembered
    assert len(calls) == 3


def test_the_machine_key_follows_the_thread_count():
    """A process that sets its threads after a first probe gets the key of its new count."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = P.machine_key()
        torch.set_num_threads(2)
        assert P.machine_key() != one and P.machine_key().endswith("|2 threads")
        assert P.cpu_name() in one
    finally:
        torch.set_num_threads(threads)


def training_step(model, inputs):
    """A forward and backward pass (as a trainer's probe runs), returning the loss."""
    def step(precision):
        loss = model(inputs).float().pow(2).mean()
        loss.backward()
        model.zero_grad(set_to_none=True)
        return float(loss.detach())
    return step


def test_training_precision_keeps_the_faster_agreeing_one(model):
    inputs = torch.randn(8, 16)
    fast_bf16 = P.choose_training_precision(training_step(model, inputs), what="training",
                                            device="cpu",
                                            timer=timer_of({"fp32": 1.0, "bf16": 0.7}))
    assert fast_bf16.precision == "bf16" and set(fast_bf16.seconds) == {"fp32", "bf16"}
    assert fast_bf16.agreement["bf16"] >= P.LOSS_AGREEMENT  # the backward ran: no int8 tried
    slow_bf16 = P.choose_training_precision(training_step(model, inputs), what="training",
                                            device="cpu",
                                            timer=timer_of({"fp32": 1.0, "bf16": 6.0}))
    assert slow_bf16.precision == "fp32"
    assert P.choose_training_precision(lambda p: 1.0, what="training", device="cpu",
                                       requested="bf16").precision == "bf16"
    with pytest.raises(ConfigError, match="int8 is for inference only"):
        P.choose_training_precision(lambda p: 1.0, what="training", device="cpu",
                                    requested="int8")


def test_a_loss_far_from_fp32_disagrees():
    assert P.loss_agreement(2.0, 2.01) > P.LOSS_AGREEMENT
    assert P.loss_agreement(2.0, 2.2) < P.LOSS_AGREEMENT
