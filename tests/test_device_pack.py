"""The transport tools for a lent GPU machine (convqa/front/tools/device_pack): reader examples
packed and unpacked, model folders packed and unpacked, trained folders exported in chunks and
rebuilt, with one-line errors for damaged input; all on tiny inputs made here."""
from __future__ import annotations

import dataclasses
import json
import lzma

import pytest
import torch

from convqa.front.tools.device_pack.__main__ import main
from reader_helpers import single_thread, tiny_reader  # noqa: F401 (autouse fixture)
from reranker_helpers import reader_records, write_lines


def canonical(path):
    from readers.extractive.data import load_examples

    return [e.to_dict() for e in load_examples(path)]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_examples_round_trip_stores_each_passage_once(tmp_path, capsys):
    records = reader_records(8)
    shared = records[0]["negatives"][0]
    records[1]["negatives"].append(dict(shared))  # one passage, two questions
    train = write_lines(tmp_path / "train.jsonl", records)
    other = reader_records(3, split="heldout")
    # the same id with another text (another collection) must not be confused with it
    other[0]["negatives"].append({**shared, "text": "a different passage under a reused id."})
    held = write_lines(tmp_path / "heldout.jsonl", other)
    pack = tmp_path / "carry" / "examples.json.xz"
    assert main(["examples-pack", str(pack), str(train), str(held)]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["examples"] == {"train": 8, "heldout": 3}
    references = [{k: v for k, v in p.items() if k != "answers"}
                  for r in records + other for p in r["positives"] + r["negatives"]]
    distinct = {json.dumps(p, sort_keys=True) for p in references}
    assert counts["passages"] == len(distinct) == len(references) - 1
    assert main(["examples-unpack", str(pack), str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out) == {"train": 8, "heldout": 3}
    assert canonical(tmp_path / "out" / "train.jsonl") == canonical(train)
    assert canonical(tmp_path / "out" / "heldout.jsonl") == canonical(held)


def test_damaged_packs_and_bad_lines_are_one_line_errors(tmp_path, capsys):
    train = write_lines(tmp_path / "train.jsonl", reader_records(4))
    pack = tmp_path / "examples.json.xz"
    assert main(["examples-pack", str(pack), str(train)]) == 0
    capsys.readouterr()
    cut = tmp_path / "cut.json.xz"
    cut.write_bytes(pack.read_bytes()[:-40])
    assert main(["examples-unpack", str(cut), str(tmp_path / "a")]) == 2
    assert str(cut) in one_error_line(capsys)
    assert not (tmp_path / "a" / "train.jsonl").exists()
    # a row that names a passage the pack lacks
    document = json.loads(lzma.decompress(pack.read_bytes()))
    document["files"]["train"][1]["negatives"][0] = "nowhere#9"
    broken = tmp_path / "broken.json.xz"
    broken.write_bytes(lzma.compress(json.dumps(document).encode()))
    assert main(["examples-unpack", str(broken), str(tmp_path / "b")]) == 2
    err = one_error_line(capsys)
    assert "files.train[1].negatives[0]" in err and "nowhere#9" in err
    # a bad input line: file, line and field
    records = reader_records(3)
    records[2]["positives"][0]["answers"][0]["start"] = 0
    bad = write_lines(tmp_path / "bad.jsonl", records)
    assert main(["examples-pack", str(tmp_path / "x.json.xz"), str(bad)]) == 2
    assert f"{bad}:3: field 'positives[0].answers[0].start'" in one_error_line(capsys)
    assert not (tmp_path / "x.json.xz").exists()


def save_reader(folder, seed=0):
    reader = tiny_reader(seed=seed, model="all-MiniLM-L6-v2")
    reader.save_pretrained(folder, adapter_only=False)
    return reader


def state(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize("matrices, xz", [(False, False), (True, True)])
def test_model_pack_round_trip(tmp_path, capsys, matrices, xz):
    from readers.extractive.model import ExtractiveReader

    save_reader(tmp_path / "reader")
    args = ["model-pack", str(tmp_path / "reader"), str(tmp_path / "packed")]
    assert main(args + (["--int8-matrices"] if matrices else []) + (["--xz"] if xz else [])) == 0
    assert (tmp_path / "packed" / "tokenizer.json.xz").exists() == xz
    assert main(["model-unpack", str(tmp_path / "packed"), str(tmp_path / "back")]) == 0
    capsys.readouterr()
    before, after = state(tmp_path / "reader"), state(tmp_path / "back")
    assert before.keys() == after.keys()
    for name, tensor in before.items():
        assert after[name].dtype == tensor.dtype
        error = float((after[name].float() - tensor.float()).abs().max())
        rows = tensor.float().abs().amax(dim=-1, keepdim=True).max() if tensor.dim() == 2 else 0
        if name.endswith("word_embeddings.weight") or (matrices and tensor.dim() == 2):
            assert error <= float(rows) / 254 + 1e-7  # half an int8 step of its row
        elif tensor.is_floating_point():
            assert error <= float(tensor.abs().max()) * 2 ** -11 + 1e-8  # fp16 rounding
    for name in ("reader_heads.safetensors", "tokenizer.json", "convqa_reader.json"):
        assert (tmp_path / "back" / name).read_bytes() == (tmp_path / "reader" / name).read_bytes()
    a = ExtractiveReader.from_pretrained(tmp_path / "reader").eval()
    b = ExtractiveReader.from_pretrained(tmp_path / "back").eval()
    ids = torch.randint(1000, 5000, (2, 24))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        la, lb = a(ids, mask), b(ids, mask)
    assert torch.allclose(la.start, lb.start, atol=0.05)
    assert float((la.start - lb.start).abs().max()) > 0  # packed, not copied


def test_model_pack_refuses_pickles_and_damaged_files(tmp_path, capsys):
    save_reader(tmp_path / "reader")
    capsys.readouterr()
    (tmp_path / "reader" / "pytorch_model.bin").write_bytes(b"pickle")
    assert main(["model-pack", str(tmp_path / "reader"), str(tmp_path / "p")]) == 2
    assert "safetensors only" in one_error_line(capsys)
    (tmp_path / "reader" / "pytorch_model.bin").unlink()
    assert main(["model-pack", str(tmp_path / "reader"), str(tmp_path / "p")]) == 0
    capsys.readouterr()
    packed = tmp_path / "p" / "model.packed.safetensors"
    packed.write_bytes(packed.read_bytes()[:1000])
    assert main(["model-unpack", str(tmp_path / "p"), str(tmp_path / "u")]) == 2
    assert "model.packed.safetensors" in one_error_line(capsys)
    assert not (tmp_path / "u").exists()


def test_export_back_in_chunks_and_import(tmp_path, capsys):
    save_reader(tmp_path / "reader")
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\n')
    out = tmp_path / "out"
    assert main(["export-back", str(tmp_path / "reader"), str(out), str(log),
                 "--chunk-mib", "1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    chunks = sorted(p.name for p in out.iterdir())
    assert summary["chunks"] == len(chunks) > 1
    assert chunks[0] == f"export.tar.000-of-{len(chunks):03d}"
    assert all(p.stat().st_size <= 1 << 20 for p in out.iterdir())
    assert main(["import-back", str(out), str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert (tmp_path / "run" / "log.jsonl").read_text() == log.read_text()
    assert main(["model-pack", str(tmp_path / "reader"), str(tmp_path / "p")]) == 0
    assert main(["model-unpack", str(tmp_path / "p"), str(tmp_path / "u")]) == 0
    capsys.readouterr()
    expected, got = state(tmp_path / "u"), state(tmp_path / "run" / "model")
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    # a missing or damaged chunk: one line, nothing written
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for chunk in out.iterdir():
        (damaged / chunk.name).write_bytes(chunk.read_bytes())
    first = damaged / chunks[0]
    data = bytearray(first.read_bytes())
    data[-100] ^= 0xFF
    first.write_bytes(bytes(data))
    assert main(["import-back", str(damaged), str(tmp_path / "r2")]) == 2
    assert "damaged" in one_error_line(capsys) and not (tmp_path / "r2").exists()
    (damaged / chunks[-1]).unlink()
    assert main(["import-back", str(damaged), str(tmp_path / "r2")]) == 2
    assert f"chunk {len(chunks) - 1:03d} of {len(chunks):03d} is missing" in one_error_line(capsys)


def test_export_back_leaves_out_the_base_tensors(tmp_path, capsys):
    """A model trained from a carried folder that changed only some tensors (a LoRA model
    merged) sends only those; the rest comes from the same base here, checked by sha256."""
    save_reader(tmp_path / "base")
    from safetensors.torch import save_file

    tuned = state(tmp_path / "base")
    changed = "encoder.layer.0.attention.self.query.weight"
    tuned[changed] = tuned[changed] + 0.01
    (tmp_path / "tuned").mkdir()
    for item in (tmp_path / "base").iterdir():
        if item.name != "model.safetensors":
            (tmp_path / "tuned" / item.name).write_bytes(item.read_bytes())
    save_file(tuned, str(tmp_path / "tuned" / "model.safetensors"))
    assert main(["export-back", str(tmp_path / "tuned"), str(tmp_path / "out"),
                 "--base", str(tmp_path / "base")]) == 0
    assert json.loads(capsys.readouterr().out)["tensors_from_base"] == len(tuned) - 1
    assert main(["import-back", str(tmp_path / "out"), str(tmp_path / "run")]) == 2
    assert "--base" in one_error_line(capsys)
    other = tmp_path / "other"
    save_reader(other, seed=1)
    capsys.readouterr()
    assert main(["import-back", str(tmp_path / "out"), str(tmp_path / "run"),
                 "--base", str(other)]) == 2
    assert "not the same base folder" in one_error_line(capsys)
    assert main(["import-back", str(tmp_path / "out"), str(tmp_path / "run"),
                 "--base", str(tmp_path / "base")]) == 0
    got = state(tmp_path / "run" / "model")
    for name, tensor in tuned.items():
        if name == changed:
            assert float((got[name] - tensor).abs().max()) <= float(tensor.abs().max()) * 2 ** -11
        else:
            assert torch.equal(got[name], tensor)


def test_merge_saves_full_weights(tmp_path, capsys):
    from readers.extractive.model import ExtractiveReader

    reader = tiny_reader(model="all-MiniLM-L6-v2")
    reader.save_pretrained(tmp_path / "full", adapter_only=False)
    reader = ExtractiveReader.from_pretrained(tmp_path / "full")
    reader.config = dataclasses.replace(reader.config, model=str(tmp_path / "full"))
    reader.add_lora(r=2, alpha=4)
    for name, parameter in reader.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.1)
    fingerprint = reader.fingerprint()
    reader.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    assert main(["merge", str(tmp_path / "adapter"), str(tmp_path / "merged")]) == 0
    assert json.loads(capsys.readouterr().out)["merged_adapters"] is True
    capsys.readouterr()
    merged = ExtractiveReader.from_pretrained(tmp_path / "merged")
    assert not merged.has_adapters and merged.fingerprint() == fingerprint
    capsys.readouterr()
    assert main(["merge", str(tmp_path), str(tmp_path / "m2")]) == 2
    assert "not a convqa reader or reranker folder" in one_error_line(capsys)


def test_a_folder_split_over_two_calls_joins_back(tmp_path, capsys):
    """The large model's transport form carried in two calls: split into chunks, each call's
    chunk in its own folder, joined from both; a chunk not yet carried is named in one line."""
    save_reader(tmp_path / "reader")
    assert main(["model-pack", str(tmp_path / "reader"), str(tmp_path / "packed"),
                 "--int8-matrices", "--xz"]) == 0
    (tmp_path / "packed" / "sub").mkdir()
    (tmp_path / "packed" / "sub" / "note.txt").write_text("nested files keep their path")
    capsys.readouterr()
    assert main(["split", str(tmp_path / "packed"), str(tmp_path / "chunks"),
                 "--pieces", "3"]) == 0
    summary = json.loads(capsys.readouterr().out)
    chunks = sorted((tmp_path / "chunks").iterdir())
    assert summary["chunks"] == len(chunks) == 3
    sizes = [c.stat().st_size for c in chunks]
    assert sum(sizes) == summary["bytes"] and max(sizes) - min(sizes) <= 2
    first, second = tmp_path / "call1", tmp_path / "call2"
    first.mkdir(), second.mkdir()
    for i, chunk in enumerate(chunks):
        chunk.rename((first if i == 0 else second) / chunk.name)
    assert main(["join", str(tmp_path / "early"), str(second)]) == 2
    assert f"chunk 000 of {len(chunks):03d} is missing" in one_error_line(capsys)
    assert not (tmp_path / "early").exists()
    assert main(["join", str(tmp_path / "joined"), str(second), str(first)]) == 0
    capsys.readouterr()
    for item in (tmp_path / "packed").rglob("*"):
        if item.is_file():
            twin = tmp_path / "joined" / item.relative_to(tmp_path / "packed")
            assert twin.read_bytes() == item.read_bytes()
    assert main(["model-unpack", str(tmp_path / "joined"), str(tmp_path / "model")]) == 0
    assert state(tmp_path / "model").keys() == state(tmp_path / "reader").keys()
    # chunks of an export are not a carried folder
    assert main(["export-back", str(tmp_path / "reader"), str(tmp_path / "export")]) == 0
    capsys.readouterr()
    assert main(["join", str(tmp_path / "wrong"), str(tmp_path / "export")]) == 2
    assert "no carry.tar.NNN-of-TOTAL chunks" in one_error_line(capsys)


def test_an_adapter_folder_comes_back_file_for_file(tmp_path, capsys):
    """The large family comes back as adapters (full mpnet weights would not fit the 64 MiB):
    export-back sends an adapter folder's files unchanged; --base is refused for it."""
    from reranker_helpers import model_config, save_tiny_encoder

    from convqa.front.tools import export_lora
    from retrievers.rerank.model import CrossEncoder

    base = save_tiny_encoder(tmp_path / "base")
    tuned = CrossEncoder.build(model_config(model=str(base)))
    with torch.no_grad():
        for param in tuned.encoder.parameters():
            param.add_(0.01)
    tuned.save_pretrained(tmp_path / "tuned")
    assert export_lora.main(["--tuned", str(tmp_path / "tuned"), "--rank", "2", "--half",
                             "--out", str(tmp_path / "adapter")]) == 0
    capsys.readouterr()
    files = {p.name: p.read_bytes() for p in (tmp_path / "adapter").iterdir()}
    assert "model.safetensors" not in files and "adapter_model.safetensors" in files
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1}\n')
    assert main(["export-back", str(tmp_path / "adapter"), str(tmp_path / "x"),
                 "--base", str(tmp_path / "adapter")]) == 2
    assert "--base applies to full weights only" in one_error_line(capsys)
    assert main(["export-back", str(tmp_path / "adapter"), str(tmp_path / "out"), str(log)]) == 0
    capsys.readouterr()
    assert main(["import-back", str(tmp_path / "out"), str(tmp_path / "run")]) == 0
    capsys.readouterr()
    back = {p.name: p.read_bytes() for p in (tmp_path / "run" / "model").iterdir()}
    assert back == files
    assert (tmp_path / "run" / "log.jsonl").read_text() == log.read_text()
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"x")
    assert main(["export-back", str(tmp_path / "pickled"), str(tmp_path / "y")]) == 2
    assert "safetensors only" in one_error_line(capsys)
