"""Distilling a reader from a teacher reader (readers/extractive/distill.py, loss.py): the
teacher's character-level targets, their move onto the student's windows, the loss, a resumable
targets file, and a student that learns real SQuAD answers from a teacher's targets alone."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import shared_file
from convqa.errors import ConfigError, ConvQAError, DataError
from convqa.training.schedule import example_rng
from convqa.types import Passage
from readers.extractive.data import ReaderExample
from readers.extractive.distill import (ExampleTargets, PassageTargets, build_teacher_targets,
                                        example_passages, load_teacher_targets,
                                        teacher_passage_targets, window_targets)
from readers.extractive.heldout import evaluate_reader
from readers.extractive.inputs import build_features
from readers.extractive.loss import distillation_loss
from readers.extractive.train import (ReaderTrainConfig, _choose_passages, make_reader_batch,
                                      train_reader)
from reader_helpers import single_thread, squad_train_examples, tiny_reader  # noqa: F401 (autouse)

TEXT = "Stanley Kubrick directed 2001: A Space Odyssey in 1968."


@pytest.fixture(scope="module")
def examples():
    """8 real SQuAD questions with one gold span each, paragraphs under 700 characters."""
    return squad_train_examples(8)


def span_reader(model):
    """The teacher as targets are built with it: the reader component, in fp32."""
    from readers.extractive.reader import SpanReader

    return SpanReader.from_model(model, precision="fp32")


def config(**overrides) -> ReaderTrainConfig:
    base = dict(batch_size=4, passages_per_question=2, epochs=40, lr=5e-3, warmup_ratio=0.0,
                progress=False, checkpoint_every=0)
    return ReaderTrainConfig(**{**base, **overrides})


def test_window_targets_move_character_offsets_onto_the_students_tokens():
    reader = tiny_reader()
    features = build_features(reader.tokenizer, ["who directed it?"], [Passage("p", TEXT)],
                              reader.config)
    kubrick, end = TEXT.index("Kubrick"), TEXT.index("Kubrick") + len("Kubrick")
    token = int(torch.nonzero(features.offsets[0, :, 0] == kubrick).flatten()[0])
    assert features.context[0, token]
    inside = int(features.offsets[0, token, 1]) - 1  # a character inside that word piece
    assert inside > kubrick
    # a start inside the piece (another tokenizer's boundary) joins the token holding it; an
    # offset past the passage is dropped, and nothing is renormalised
    targets = PassageTargets(1.0, ((kubrick, 2.0), (inside, 1.0), (5000, 1.0)),
                             ((end, 3.0),))
    starts, ends = window_targets(features, 0, targets)
    probs = torch.softmax(torch.tensor([2.0, 1.0, 1.0]), 0)
    assert starts[token].item() == pytest.approx(float(probs[0] + probs[1]))
    assert starts.sum().item() == pytest.approx(float(1 - probs[2]))
    last = int(torch.nonzero((features.offsets[0, :, 1] == end) & features.context[0])[0])
    assert ends[last].item() == pytest.approx(1.0) and ends.sum().item() == pytest.approx(1.0)
    assert not bool((starts[~features.context[0]] != 0).any())  # only passage tokens
    # a higher temperature flattens the teacher
    warm, _ = window_targets(features, 0, targets, temperature=4.0)
    assert warm[token].item() < starts[token].item()


def test_teacher_targets_keep_each_offsets_best_window():
    reader = tiny_reader(seed=3, max_length=48, doc_stride=8, max_query_length=8,
                         max_title_length=4).eval()
    long = Passage("long", " ".join(f"word{i} is here." for i in range(40)), "Long")
    short = Passage("short", TEXT, "Short")
    targets = teacher_passage_targets(span_reader(reader), "what is it?", [long, short],
                                      top_k=7)
    features = build_features(reader.tokenizer, ["what is it?"] * 2, [long, short],
                              reader.config)
    with torch.no_grad():
        logits = reader(**features.tensors)
    assert len(features.windows_of(0)) > 2
    for number in range(2):
        windows = features.windows_of(number)
        assert targets[number].selection == pytest.approx(
            max(float(logits.selection[w]) for w in windows), abs=1e-5)
        best: dict[int, float] = {}
        for w in windows:
            for t in torch.nonzero(features.context[w]).flatten().tolist():
                char = int(features.offsets[w, t, 0])
                best[char] = max(best.get(char, -1e9), float(logits.start[w, t]))
        expected = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:7]
        assert [c for c, _ in targets[number].starts] == [c for c, _ in expected]
        assert [v for _, v in targets[number].starts] == pytest.approx(
            [v for _, v in expected], abs=1e-5)


def test_distillation_loss_is_lowest_where_the_student_agrees_with_the_teacher():
    torch.manual_seed(0)
    q, n, length = 2, 3, 6
    mask = torch.ones(q, n, length, dtype=torch.bool)
    mask[..., 0] = False  # the query's token: never a span position
    passages = torch.tensor([[True, True, True], [True, True, False]])
    teacher_selection = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.0, float("-inf")]])
    starts = torch.zeros(q, n, length)
    starts[..., 2], starts[..., 3] = 0.7, 0.2  # 0.9 of the mass inside each window
    ends = starts.roll(1, dims=-1)
    agreeing = torch.full((q, n, length), -5.0)
    agreeing[..., 2], agreeing[..., 3] = 5.0 + torch.log(torch.tensor(0.7 / 0.2)), 5.0
    student = dict(start_logits=agreeing.clone(), end_logits=agreeing.roll(1, dims=-1),
                   selection_logits=teacher_selection.masked_fill(
                       teacher_selection.isinf(), 0.0))
    fixed = dict(span_mask=mask, passage_mask=passages, teacher_selection=teacher_selection,
                 start_targets=starts, end_targets=ends)
    good = distillation_loss(**student, **fixed)
    shuffled = {k: v.flip(-1) for k, v in student.items()}
    bad = distillation_loss(**shuffled, **fixed)
    assert good.total < bad.total and good.selection < bad.selection and good.span < bad.span
    # the gradient points from the shuffled student towards the teacher
    logits = shuffled["selection_logits"].clone().requires_grad_(True)
    distillation_loss(**{**shuffled, "selection_logits": logits}, **fixed).total.backward()
    assert float(logits.grad[0, 0]) < 0 < float(logits.grad[0, 2])
    # no targets anywhere: a zero that keeps the heads in the graph
    none = distillation_loss(**student, span_mask=mask, passage_mask=passages,
                             teacher_selection=torch.full((q, n), float("-inf")),
                             start_targets=torch.zeros_like(starts),
                             end_targets=torch.zeros_like(ends))
    assert none.total.item() == 0.0 and none.selection is None and none.span is None
    with pytest.raises(ValueError, match="temperature"):
        distillation_loss(**student, **fixed, temperature=0)


def test_batches_carry_the_targets_of_the_passages_they_drew(examples):
    student = tiny_reader(seed=1)
    teacher = span_reader(tiny_reader(seed=2).eval())
    query = lambda e: teacher.history.format(e.question, e.history_turns())  # noqa: E731
    items = list(examples[:3])
    targets = {}
    for e in items:
        passages = [p.passage for p in e.positives] + list(e.negatives)
        read = teacher_passage_targets(teacher, query(e), passages, top_k=5)
        targets[e.id] = ExampleTargets(e.id, tuple(read[:1]), tuple(read[1:]))
    plain = make_reader_batch(items, [0, 1, 2], lambda i: items[i].question, student, 2, 7, 1)
    batch = make_reader_batch(items, [0, 1, 2], lambda i: items[i].question, student, 2, 7, 1,
                              targets)
    assert torch.equal(plain.features.tensors["input_ids"], batch.features.tensors["input_ids"])
    assert plain.teacher is None and batch.teacher.selection.shape == (3, 2)
    for q, example in enumerate(items):
        _, chosen, _, numbers = _choose_passages(example, 2, example_rng(7, 1, q))
        assert numbers[0] == 0 and chosen[1] == example.negatives[numbers[1] - 1]
        for slot, number in enumerate(numbers):
            assert float(batch.teacher.selection[q, slot]) == pytest.approx(
                targets[example.id].passage(number).selection)
        assert 0 < float(batch.teacher.starts[q, 0].sum()) <= 1.0 + 1e-6


def _teacher_examples(examples):
    return [ReaderExample(e.id, e.question, e.history, e.positives, e.negatives, e.answers)
            for e in examples]


def test_a_student_learns_the_answers_from_a_teachers_targets_alone(examples, tmp_path):
    """Trained on distillation only (weight 1): from a teacher that learnt the answers, the
    student answers them too; from an untrained teacher it does not."""
    teacher = tiny_reader(seed=0)
    train_reader(teacher, examples, tmp_path / "teacher", config(epochs=40))
    assert evaluate_reader(teacher, examples)["em"] == 100.0
    scores = {}
    for name, model in (("trained", teacher), ("random", tiny_reader(seed=5))):
        path = build_teacher_targets(span_reader(model), examples, tmp_path / f"{name}.jsonl",
                                     top_k=10, progress=False)
        student = tiny_reader(seed=9)
        result = train_reader(student, examples, tmp_path / f"student-{name}",
                              config(epochs=40, distill_weight=1.0, distill_temperature=1.0),
                              teacher=load_teacher_targets(path, examples))
        log = [json.loads(line) for line in
               (result.model_dir.parent / "log.jsonl").read_text().splitlines()]
        assert {"hard_loss", "distill_selection_loss", "distill_span_loss"} <= set(log[0])
        scores[name] = evaluate_reader(student, examples)["em"]
    assert scores["trained"] >= 87.5 and scores["random"] <= 25.0


def test_targets_resume_after_a_kill_and_refuse_other_examples(examples, tmp_path):
    teacher = tiny_reader(seed=4).eval()
    items = _teacher_examples(examples[:4])
    whole = build_teacher_targets(span_reader(teacher), items, tmp_path / "whole.jsonl",
                                  top_k=4, progress=False)
    # a build killed after two examples, the last line half written
    path = tmp_path / "resumed.jsonl"
    build_teacher_targets(span_reader(teacher), items[:2], tmp_path / "scratch.jsonl", top_k=4,
                          progress=False)
    lines = (tmp_path / "scratch.jsonl").read_text().splitlines()
    part = tmp_path / "resumed.jsonl.part-0-of-1"
    part.write_text(lines[0] + "\n" + lines[1][:20])
    meta = json.loads((tmp_path / "whole.jsonl.json").read_text())
    (tmp_path / "resumed.jsonl.part-0-of-1.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="unfinished"):
        load_teacher_targets(path, items)
    build_teacher_targets(span_reader(teacher), items, path, top_k=4, progress=False)
    assert path.read_text() == whole.read_text()
    assert not list(tmp_path.glob("resumed.jsonl.part*"))
    loaded = load_teacher_targets(path, items)
    kept = loaded.examples[items[0].id].positives[0]
    assert kept.starts.dtype.name == "float32" and kept.starts.shape == (4, 2)  # compact
    assert list(loaded.examples) == [e.id for e in items] and loaded.key.startswith(
        teacher.fingerprint())
    # targets of other examples, or of other passages, are refused in one line
    other = ReaderExample("elsewhere", "q?", [], items[0].positives, items[0].negatives)
    with pytest.raises(DataError, match="no teacher targets for example 'elsewhere'"):
        load_teacher_targets(path, items + [other])
    fewer = [ReaderExample(items[0].id, items[0].question, [], items[0].positives,
                           items[0].negatives[:1])]
    with pytest.raises(DataError, match="the example has 1 \\+ 1"):
        load_teacher_targets(path, fewer)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "x", "positives": [{"selection": 1, "starts": [[1]], '
                      '"ends": []}], "negatives": []}\n')
    (tmp_path / "broken.jsonl.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"broken.jsonl:1.*positives\[0\].starts"):
        load_teacher_targets(broken, items)


def test_unanswerable_examples_get_empty_targets_unread_and_train_on_their_label(examples,
                                                                                 tmp_path):
    """The teacher reads only answerable examples; an unanswerable one's passages get empty
    targets, so its distillation term is nothing and the student still learns "no answer"."""
    from readers.extractive.reader import SpanReader

    items = _teacher_examples(examples[:3])
    source = examples[3]
    impossible = ReaderExample("impossible", source.question, [], [],
                               [source.positives[0].passage] + list(source.negatives),
                               unanswerable=True)
    teacher = span_reader(tiny_reader(seed=3).eval())
    read = []

    class Counting(SpanReader):
        def window_logits(self, query, passages):
            read.append(query)
            return super().window_logits(query, passages)

    counting = Counting.from_model(teacher.model, precision="fp32")
    path = build_teacher_targets(counting, items + [impossible], tmp_path / "t.jsonl",
                                 top_k=4, progress=False)
    assert read == [counting.history.format(e.question, e.history_turns()) for e in items]
    loaded = load_teacher_targets(path, items + [impossible])
    empty = loaded.examples["impossible"]
    assert empty.positives == () and len(empty.negatives) == 3
    assert all(t.selection is None and t.starts.shape == (0, 2) and t.ends.shape == (0, 2)
               for t in empty.negatives)
    assert loaded.examples[items[0].id].positives[0].selection is not None
    batch = make_reader_batch([impossible], [0], lambda i: impossible.question,
                              tiny_reader(seed=1), 3, 7, 1, loaded.examples)
    assert torch.isinf(batch.teacher.selection).all()
    assert float(batch.teacher.starts.sum()) == 0.0 == float(batch.teacher.ends.sum())
    student = tiny_reader(seed=9)
    train_reader(student, items + [impossible], tmp_path / "student",
                 config(epochs=2, distill_weight=0.5), teacher=loaded)
    assert student.config.null_option


def test_examples_with_a_passage_over_the_budget_are_left_unread_whole(examples, tmp_path):
    """With `max_chars`, an example with one passage longer than it gets empty targets for all
    of its passages (the teacher's passage choice covers them all), the others are read as
    without it, and the budget is part of the file's meta and its key."""
    items = _teacher_examples(examples[:4])
    longest = max(len(p.text) for p in example_passages(items[0]))
    budget = longest - 1
    short = [e for e in items[1:] if max(len(p.text) for p in example_passages(e)) <= budget]
    assert short, "the fixture needs examples whose passages are all shorter"
    teacher = span_reader(tiny_reader(seed=3).eval())
    full = load_teacher_targets(build_teacher_targets(
        teacher, items, tmp_path / "all.jsonl", top_k=4, progress=False), items)
    capped = load_teacher_targets(build_teacher_targets(
        teacher, items, tmp_path / "capped.jsonl", top_k=4, progress=False, max_chars=budget),
        items)
    unread = capped.examples[items[0].id]
    assert (len(unread.positives), len(unread.negatives)) == (len(items[0].positives),
                                                              len(items[0].negatives))
    assert all(t.selection is None and len(t.starts) == 0 == len(t.ends)
               for t in unread.positives + unread.negatives)
    for example in short:
        assert capped.examples[example.id].to_dict() == full.examples[example.id].to_dict()
    assert capped.key == full.key + f":{budget}"
    assert json.loads((tmp_path / "capped.jsonl.json").read_text())["max_chars"] == budget
    assert "max_chars" not in json.loads((tmp_path / "all.jsonl.json").read_text())
    batch = make_reader_batch(items[:1], [0], lambda i: items[0].question, tiny_reader(seed=1),
                              2, 7, 1, capped.examples)
    assert torch.isinf(batch.teacher.selection).all()
    assert float(batch.teacher.starts.sum()) == 0.0 == float(batch.teacher.ends.sum())
    with pytest.raises(ValueError, match="max_chars"):
        build_teacher_targets(teacher, items, tmp_path / "bad.jsonl", max_chars=0)


def test_distillation_settings_and_schedule_key(examples, tmp_path):
    plain = ReaderTrainConfig().schedule_key()
    assert "distill_weight" not in plain and "distill_temperature" not in plain
    assert ReaderTrainConfig(distill_weight=0.5).schedule_key()["distill_weight"] == 0.5
    for bad in ({"distill_weight": 1.5}, {"distill_weight": -0.1},
                {"distill_temperature": 0.0}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            ReaderTrainConfig(**bad)
    with pytest.raises(ConvQAError, match="needs both"):
        train_reader(tiny_reader(), examples, tmp_path / "a", config(distill_weight=0.5))


def test_reader_teacher_command(examples, tmp_path, capsys):
    """`convqa train reader --data-only`, then `reader-teacher` with a reader folder, then
    training with --teacher-targets; bad inputs are one line."""
    from convqa.front.cli.main import main
    from reader_helpers import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "enc")
    teacher_dir = tmp_path / "teacher"
    tiny_reader(seed=6).save_pretrained(teacher_dir)
    out = tmp_path / "run"
    base = ["train", "reader", "--squad", str(shared_file("squad/dev-v2.0.json")),
            "--out", str(out), "--init-model", str(encoder), "--max-steps", "2",
            "--batch-size", "2", "--passages-per-question", "2", "--negatives", "1",
            "--max-examples", "6", "--max-heldout", "2", "--no-eval", "--max-length", "128",
            "--history-max-tokens", "32", "--quiet"]
    assert main(["train", "reader-teacher", "--teacher", str(teacher_dir), "--run", str(out),
                 "--quiet"]) == 2
    assert "--data-only" in capsys.readouterr().err
    assert main(base + ["--data-only"]) == 0
    assert main(["train", "reader-teacher", "--teacher", str(tmp_path), "--run", str(out),
                 "--quiet"]) == 2
    assert "not a reader folder" in capsys.readouterr().err
    assert main(["train", "reader-teacher", "--teacher", str(teacher_dir), "--run", str(out),
                 "--top-k", "5", "--precision", "fp32", "--max-passage-chars", "100000",
                 "--quiet"]) == 0
    targets = out / "data" / "teacher-targets.jsonl"
    assert json.loads((out / "data" / "teacher-targets.jsonl.json").read_text())[
        "max_chars"] == 100000
    assert f"{targets}: the teacher's targets of 6 examples" in capsys.readouterr().out
    assert main(base + ["--teacher-targets", str(targets), "--distill-weight", "0.3"]) == 0
    record = json.loads((out / "training.json").read_text())
    assert record["config"]["distill_weight"] == 0.3 and record["steps"] == 2
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert all("distill_span_loss" in row for row in log)
    capsys.readouterr()
    assert main(base + ["--teacher-targets", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no teacher outputs (made by `convqa train reader-teacher`)" in err[0]


TWO_PROCESS_SCRIPT = r'''
import sys
from readers.extractive.data import load_examples
from readers.extractive.distill import build_teacher_targets
from readers.extractive.train import make_accelerator
from reader_helpers import tiny_reader

acc = make_accelerator(cpu=True)
from readers.extractive.reader import SpanReader
build_teacher_targets(SpanReader.from_model(tiny_reader(seed=4), precision="fp32"),
                      load_examples(sys.argv[1]), sys.argv[2], top_k=4, progress=False,
                      accelerator=acc)
'''


@pytest.mark.slow  # two fresh interpreters importing torch and transformers
def test_two_processes_write_the_targets_one_process_writes(examples, tmp_path):
    from readers.extractive.data import save_examples
    from training_helpers import torchrun

    items = _teacher_examples(examples[:5])  # 5: the processes read 3 and 2
    data = tmp_path / "examples.jsonl"
    save_examples(data, items)
    two = tmp_path / "two.jsonl"
    script = tmp_path / "teacher2.py"
    script.write_text(TWO_PROCESS_SCRIPT)
    done = torchrun(str(script), str(data), str(two))
    assert done.returncode == 0, done.stderr[-3000:]
    one = build_teacher_targets(span_reader(tiny_reader(seed=4)), items, tmp_path / "one.jsonl",
                                top_k=4, progress=False)
    assert two.read_text() == one.read_text()
    assert not list(tmp_path.glob("two.jsonl.part*"))
