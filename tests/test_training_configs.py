"""Every trainer's config shares one schedule (convqa/training/schedule.py StepSchedule) and
the reader's and reranker's one student schedule (convqa/training/student.py): the same
settings are checked, and kept out of a checkpoint's key, the same way in each."""
import pytest

from convqa.errors import ConfigError
from convqa.training.schedule import StepSchedule
from convqa.training.student import StudentSchedule
from phrase_index.train import PhraseTrainConfig
from readers.extractive.train import ReaderTrainConfig
from readers.fid.train import FiDTrainConfig
from retrievers.convdr.train import ConvDRTrainConfig
from retrievers.rerank.train import RerankTrainConfig
from retrievers.training.trainer import TrainConfig

CONFIGS = [ReaderTrainConfig, RerankTrainConfig, ConvDRTrainConfig, FiDTrainConfig,
           PhraseTrainConfig, TrainConfig]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("bad, named", [({"batch_size": 0}, "batch_size"),
                                        ({"grad_accum": True}, "grad_accum"),
                                        ({"seed": -1}, "seed"),
                                        ({"lr": 0.0}, "lr"),
                                        ({"warmup_ratio": 1.0}, "warmup_ratio"),
                                        ({"weight_decay": -0.1}, "weight_decay"),
                                        ({"max_steps": 0}, "max_steps")])
def test_every_trainer_refuses_a_bad_schedule_setting_by_name(config, bad, named):
    assert issubclass(config, StepSchedule)
    with pytest.raises(ConfigError, match=named):
        config(**bad)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_a_resumed_run_may_change_what_learns_nothing(config):
    key = config().schedule_key()
    assert {"epochs", "lr", "batch_size", "seed"} <= set(key)
    assert not {"progress", "checkpoint_every", "keep_checkpoint", "bf16"} & set(key)
    assert config(checkpoint_every=7, progress=False).schedule_key() == key
    assert config(lr=1e-3).schedule_key() != key


@pytest.mark.parametrize("config, own", [(ReaderTrainConfig, ("eval_per_source",)),
                                         (RerankTrainConfig, ("eval_examples", "pair_chunk"))],
                         ids=["reader", "reranker"])
def test_a_student_keys_its_teacher_only_when_it_has_one(config, own):
    assert issubclass(config, StudentSchedule)
    alone = config().schedule_key()
    assert not {"eval_every", "distill_weight", "distill_temperature", *own} & set(alone)
    taught = config(distill_weight=0.5, distill_temperature=2.0).schedule_key()
    assert (taught["distill_weight"], taught["distill_temperature"]) == (0.5, 2.0)
    assert config(eval_every=5).schedule_key() == alone
    with pytest.raises(ConfigError, match="distill_weight"):
        config(distill_weight=1.5)
    with pytest.raises(ConfigError, match="start_step"):
        config(start_step=-1)
    assert config(precision="bf16").precision == "bf16"
    assert config(bf16=True).precision == "bf16"   # the older spelling
