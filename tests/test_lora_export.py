"""lora_from_finetuned: a fine-tuned dual encoder as a LoRA adapter over its base model."""
from __future__ import annotations

import json

import pytest
import torch

from convqa.errors import ConvQAError
from retrievers.dense.lora_export import lora_from_finetuned
from retrievers.dense.model import DualEncoder

from test_dense_model import TEXTS, encode_queries, make_tiny_bert


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, minilm_tokenizer):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny") / "bert", minilm_tokenizer)


def tuned_copy(tiny_dir, rank: int, seed: int = 3, embeddings: bool = False) -> DualEncoder:
    """The base with a rank-`rank` change of every linear weight, new biases and LayerNorms."""
    model = DualEncoder.from_pretrained(str(tiny_dir))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.query_encoder.named_parameters():
            if name.endswith(".weight") and param.dim() == 2 and "embeddings" not in name:
                out_dim, in_dim = param.shape
                left = torch.randn(out_dim, rank, generator=generator) * 0.05
                param += left @ torch.randn(rank, in_dim, generator=generator)
            elif name.endswith(".bias") or "LayerNorm" in name:
                param += torch.randn(param.shape, generator=generator) * 0.05
            elif embeddings and "word_embeddings" in name:
                param += torch.randn(param.shape, generator=generator) * 0.05
    return model.eval()


def test_exact_when_the_change_has_the_adapter_rank(tiny_dir, tmp_path):
    tuned = tuned_copy(tiny_dir, rank=2)
    adapted, report = lora_from_finetuned(DualEncoder.from_pretrained(str(tiny_dir)), tuned, r=2)
    assert report.layers == 2 * 6 and report.min_energy_kept > 0.9999
    assert report.left_out == {"embeddings.word_embeddings.weight": 0.0,
                               "embeddings.position_embeddings.weight": 0.0,
                               "embeddings.token_type_embeddings.weight": 0.0}
    expected = encode_queries(tuned, TEXTS)
    assert torch.allclose(encode_queries(adapted.eval(), TEXTS), expected, atol=1e-5)
    base = encode_queries(DualEncoder.from_pretrained(str(tiny_dir)).eval(), TEXTS)
    assert not torch.allclose(base, expected, atol=1e-3)  # the change is real
    # the adapter saves and loads back as the same function
    adapted.save_adapter(tmp_path / "adapter")
    loaded = DualEncoder.from_pretrained(tmp_path / "adapter").eval()
    assert loaded.has_adapters
    assert torch.allclose(encode_queries(loaded, TEXTS), expected, atol=1e-5)
    assert loaded.fingerprint() == adapted.fingerprint()


def test_lower_rank_is_an_approximation_and_reports_it(tiny_dir):
    tuned = tuned_copy(tiny_dir, rank=4, embeddings=True)
    adapted, report = lora_from_finetuned(DualEncoder.from_pretrained(str(tiny_dir)), tuned, r=1)
    assert 0.0 < report.mean_energy_kept < 0.99
    assert report.left_out["embeddings.word_embeddings.weight"] > 0.0
    error = (encode_queries(adapted.eval(), TEXTS) - encode_queries(tuned, TEXTS)).abs().max()
    assert error > 1e-4


def test_refuses_other_architectures_and_adapters(tiny_dir, tmp_path, minilm_tokenizer):
    from transformers import BertConfig, BertModel

    wider = tmp_path / "wider"
    config = BertConfig(vocab_size=minilm_tokenizer.vocab_size, hidden_size=48,
                        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=256)
    BertModel(config, add_pooling_layer=False).save_pretrained(str(wider))
    minilm_tokenizer.save_pretrained(str(wider))
    with pytest.raises(ConvQAError, match="architecture"):
        lora_from_finetuned(DualEncoder.from_pretrained(str(tiny_dir)),
                            DualEncoder.from_pretrained(str(wider)), r=2)
    with_lora = DualEncoder.from_pretrained(str(tiny_dir)).add_lora(r=2)
    with pytest.raises(ConvQAError, match="plain models"):
        lora_from_finetuned(with_lora, tuned_copy(tiny_dir, rank=1), r=2)
    with pytest.raises(ConvQAError, match="rank"):
        lora_from_finetuned(DualEncoder.from_pretrained(str(tiny_dir)),
                            tuned_copy(tiny_dir, rank=1), r=0)


def test_shipped_retriever_adapter_loads_by_alias():
    model = DualEncoder.from_pretrained("convqa-dpr-ihn")
    assert model.has_adapters and model.dim == 384
    assert model.config.pooling == "mean" and model.config.normalize


def test_reader_export_keeps_heads_and_reproduces_logits(tmp_path):
    """convqa/front/tools/export_lora.py on a fine-tuned (here: perturbed) tiny extractive reader."""
    from reader_helpers import reader_config, save_tiny_encoder

    from readers.extractive.model import ExtractiveReader

    base_dir = save_tiny_encoder(tmp_path / "base")
    tuned = ExtractiveReader.build(reader_config(model=str(base_dir)))
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, param in tuned.encoder.named_parameters():
            if name.endswith(".weight") and param.dim() == 2 and "embeddings" not in name:
                param += (torch.randn(param.shape[0], 2, generator=generator) * 0.05) @ \
                    torch.randn(2, param.shape[1], generator=generator)
            elif name.endswith(".bias") or "LayerNorm" in name:
                param += torch.randn(param.shape, generator=generator) * 0.05
    from readers.extractive.decoding import Decoding
    decoding = {"fusion": {"selection": 0.0, "span": 0.1, "retriever": 0.25},
                "after_reranker": {"fusion": {"selection": 0.0, "span": 0.05, "retriever": 2.0}}}
    tuned.decoding = Decoding.from_dict(decoding, tmp_path / "tuned")
    tuned.save_pretrained(tmp_path / "tuned")
    from convqa.front.tools import export_lora as module
    assert module.main(["--tuned", str(tmp_path / "tuned"), "--rank", "2",
                        "--out", str(tmp_path / "adapter")]) == 0
    adapter = ExtractiveReader.from_pretrained(tmp_path / "adapter").eval()
    assert adapter.has_adapters and adapter.has_selection_head
    # the passage choice the tuned reader carries (from its initial reader) goes with it: an
    # export without it reads its top k by selection alone, ~8-16 F1 lower end to end
    assert adapter.decoding.to_dict() == Decoding.from_dict(decoding, tmp_path).to_dict()
    batch = tuned.tokenizer(["who wrote it?"], ["Hamlet was written by Shakespeare."],
                            return_tensors="pt")
    with torch.no_grad():
        want = tuned.eval()(batch["input_ids"], batch["attention_mask"])
        got = adapter(batch["input_ids"], batch["attention_mask"])
    for a, b in zip(want, got):
        assert torch.allclose(a, b, atol=1e-5)
    assert (tmp_path / "adapter" / "export_report.json").exists()
    # a reader that is already an adapter is refused with one line
    assert module.main(["--tuned", str(tmp_path / "adapter"), "--rank", "2",
                        "--out", str(tmp_path / "again")]) == 2


def test_convdr_student_export_reloads_as_adapter_and_keeps_its_queries(tmp_path):
    """convqa/front/tools/export_lora.py on a ConvDR folder: the student becomes a LoRA adapter over the
    teacher's query tower, and the reloaded adapter encodes queries like the full student."""
    import subprocess
    import sys
    from convdr_helpers import make_teacher
    from retrievers.convdr.model import ConvDR

    teacher = make_teacher(tmp_path / "teacher", dropout=0.0)
    model = ConvDR.build(str(teacher))
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():  # a rank-2 change of every linear weight: exact at rank 2
        for name, param in model.query_encoder.named_parameters():
            if name.endswith(".weight") and param.dim() == 2 and "embeddings" not in name:
                out_dim, in_dim = param.shape
                param += (torch.randn(out_dim, 2, generator=generator) * 0.05
                          @ torch.randn(2, in_dim, generator=generator))
    model.save_pretrained(tmp_path / "full")
    done = subprocess.run([sys.executable, "-m", "convqa.front.tools.export_lora",
                           "--tuned", str(tmp_path / "full"),
                           "--rank", "2", "--out", str(tmp_path / "adapter")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    full = ConvDR.from_pretrained(tmp_path / "full").eval()
    adapter = ConvDR.from_pretrained(tmp_path / "adapter").eval()
    assert adapter.has_adapters and not full.has_adapters
    texts = ["who built the eiffel tower?", "what is photosynthesis? [SEP] what does it reflect?"]
    with torch.no_grad():
        a = full.encode_query(full.tokenize_queries(texts))
        b = adapter.encode_query(adapter.tokenize_queries(texts))
        teacher_view = adapter.encode_teacher_query(adapter.tokenize_teacher_queries(texts))
    assert torch.allclose(a, b, atol=1e-4)
    assert not torch.allclose(a, teacher_view, atol=1e-3)  # the student did move
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()


def test_phrase_model_export_reproduces_both_towers_and_heads(tmp_path):
    """convqa/front/tools/export_lora.py on a phrase model: both towers become adapters, the heads are
    kept, and the reloaded adapter gives the tuned model's phrase and query vectors; the
    position-embedding change is kept only with --exact-embeddings."""
    from phrase_model_helpers import phrase_config, tiny_base

    from phrase_index.model import PhraseModel

    base = tiny_base(tmp_path / "base")
    tuned = PhraseModel.build(phrase_config(base=str(base)))
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():  # a rank-2 change of every linear weight, and moved positions
        for tower in (tuned.phrase_encoder, tuned.query_encoder):
            for name, param in tower.named_parameters():
                if name.endswith(".weight") and param.dim() == 2 and "embeddings" not in name:
                    param += (torch.randn(param.shape[0], 2, generator=generator) * 0.05
                              @ torch.randn(2, param.shape[1], generator=generator))
                elif "position_embeddings" in name:
                    param += torch.randn(param.shape, generator=generator) * 0.05
        tuned.filter_head.weight += 0.3
    tuned.save(tmp_path / "tuned")
    from convqa.front.tools import export_lora as module

    def vectors(model):
        model.eval()
        passages = model.tokenize_passages(["Hamlet"], ["Hamlet was written by Shakespeare."])
        queries = model.tokenize_queries(["who wrote hamlet?"])
        with torch.no_grad():
            p = model.encode_passages(passages["input_ids"], passages["attention_mask"])
            q = model.encode_queries(queries["input_ids"], queries["attention_mask"])
        return p.start, p.start_filter, q.start, q.end

    want = vectors(PhraseModel.load(tmp_path / "tuned"))
    for flags, exact in (([], False), (["--exact-embeddings"], True)):
        out = tmp_path / f"adapter{len(flags)}"
        assert module.main(["--tuned", str(tmp_path / "tuned"), "--rank", "2", "--out",
                            str(out)] + flags) == 0
        adapter = PhraseModel.load(out)
        assert adapter.has_adapters and (out / "export_report.json").exists()
        got = vectors(adapter)
        same = all(torch.allclose(a, b, atol=1e-4) for a, b in zip(want, got))
        assert same == exact, flags
    assert module.main(["--tuned", str(out), "--rank", "2", "--out", str(tmp_path / "x")]) == 2


def add_low_rank(encoder, generator: torch.Generator, rank: int = 2) -> None:
    """A rank-`rank` change of every linear weight of `encoder` (embeddings kept): an adapter
    of that rank over the unchanged encoder reproduces it exactly."""
    with torch.no_grad():
        for name, param in encoder.named_parameters():
            if name.endswith(".weight") and param.dim() == 2 and "embeddings" not in name:
                param += (torch.randn(param.shape[0], rank, generator=generator) * 0.05) @ \
                    torch.randn(rank, param.shape[1], generator=generator)


def two_pairs(reranker):
    """One question against a passage that answers it and one that does not."""
    from convqa.types import Passage

    passages = [Passage(id="a", title="Hamlet", text="Hamlet was written by Shakespeare."),
                Passage(id="b", title="Glacier", text="A glacier is a body of dense ice.")]
    return reranker.encode_pairs(["who wrote hamlet?"] * 2, passages)


def exported_reranker(tmp_path, *flags):
    """export_lora on tmp_path/tuned into tmp_path/adapter with `flags`, loaded back."""
    from convqa.front.tools import export_lora
    from retrievers.rerank.model import CrossEncoder

    assert export_lora.main(["--tuned", str(tmp_path / "tuned"), *flags,
                             "--out", str(tmp_path / "adapter")]) == 0
    return CrossEncoder.from_pretrained(tmp_path / "adapter").eval()


def test_reranker_export_keeps_head_weights_and_card_and_reproduces_logits(tmp_path):
    """convqa/front/tools/export_lora.py on a fully fine-tuned cross-encoder: the adapter folder
    scores pairs as the tuned model does and keeps its head, retriever weights and card."""
    from reranker_helpers import model_config, save_tiny_encoder

    from retrievers.rerank.model import CrossEncoder

    base_dir = save_tiny_encoder(tmp_path / "base")
    tuned = CrossEncoder.build(model_config(model=str(base_dir)))
    generator = torch.Generator().manual_seed(7)
    add_low_rank(tuned.encoder, generator)   # exact at rank 2
    with torch.no_grad():
        tuned.head.weight.normal_(0.0, 0.5, generator=generator)
    tuned.retriever_weights = {"bm25": 0.25}
    tuned.cascade_margins = {"bm25 > abc": 1.5}
    tuned.shortlist_weights = {"bm25": {"retriever": 1.5, "words": 0.5, "lead": 2.0}}
    tuned.save_pretrained(tmp_path / "tuned")
    from convqa.front.tools import export_lora as module
    assert module.main(["--tuned", str(tmp_path / "tuned"), "--rank", "2",
                        "--out", str(tmp_path / "adapter")]) == 0
    adapter = CrossEncoder.from_pretrained(tmp_path / "adapter").eval()
    assert adapter.has_adapters and adapter.retriever_weights == {"bm25": 0.25}
    assert adapter.cascade_margins == {"bm25 > abc": 1.5}
    assert adapter.shortlist_weights == {"bm25": {"retriever": 1.5, "words": 0.5, "lead": 2.0}}
    batch = two_pairs(tuned)
    with torch.no_grad():
        want = tuned.eval()(**batch)
        got = adapter(**batch)
    assert torch.allclose(want, got, atol=1e-5) and not torch.allclose(want[0], want[1])
    card = (tmp_path / "adapter" / "README.md").read_text()
    assert "rank-2 LoRA adapter" in card
    # the card names the folder's fingerprint as stored, and the trained model's beside it
    assert (f"- Fingerprint: {adapter.fingerprint()} (the adapter as stored; the trained "
            f"model: {tuned.fingerprint()})." in card)
    assert module.main(["--tuned", str(tmp_path / "adapter"), "--rank", "2",
                        "--out", str(tmp_path / "again")]) == 2
    # --half: fp16 LoRA matrices, half the bytes, and the reloaded model is what was recorded
    assert module.main(["--tuned", str(tmp_path / "tuned"), "--rank", "2", "--half",
                        "--out", str(tmp_path / "half")]) == 0
    half = CrossEncoder.from_pretrained(tmp_path / "half").eval()
    from safetensors import safe_open
    with safe_open(str(tmp_path / "half" / "adapter_model.safetensors"), "pt") as stored:
        tensors = {k: stored.get_tensor(k) for k in stored.keys()}
    dtypes = {k: t.dtype for k, t in tensors.items()}
    lora_numel = sum(t.numel() for k, t in tensors.items() if ".lora_" in k)
    assert {d for k, d in dtypes.items() if ".lora_" in k} == {torch.float16}
    assert {d for k, d in dtypes.items() if ".lora_" not in k} == {torch.float32}
    full_size = (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size
    half_size = (tmp_path / "half" / "adapter_model.safetensors").stat().st_size
    assert full_size - half_size >= 2 * lora_numel - 256  # 2 bytes saved per LoRA value
    import json
    meta = json.loads((tmp_path / "half" / "convqa_reranker.json").read_text())
    assert half.fingerprint() == meta["fingerprint"] != adapter.fingerprint()
    with torch.no_grad():
        assert torch.allclose(half(**batch), want, atol=1e-3)
    assert "rank-2 LoRA adapter in fp16" in (tmp_path / "half" / "README.md").read_text()


def test_reranker_export_over_another_base_loads_over_that_base(tmp_path):
    """A reranker trained from an intermediate checkpoint (as the large reranker from the large
    reader) exported with --base over the installable encoder: the folder names that encoder as
    its base and reloads to the tuned model's scores, not to the adapter over the intermediate."""
    from reranker_helpers import model_config, save_tiny_encoder

    from retrievers.rerank.model import CrossEncoder

    base_dir = save_tiny_encoder(tmp_path / "base")
    middle = CrossEncoder.build(model_config(model=str(base_dir)))
    add_low_rank(middle.encoder, torch.Generator().manual_seed(11))
    middle.encoder.save_pretrained(str(tmp_path / "middle"))
    middle.tokenizer.save_pretrained(str(tmp_path / "middle"))
    tuned = CrossEncoder.build(model_config(model=str(tmp_path / "middle")))
    add_low_rank(tuned.encoder, torch.Generator().manual_seed(12))  # tuned - base: rank 4
    tuned.save_pretrained(tmp_path / "tuned")
    adapter = exported_reranker(tmp_path, "--rank", "4", "--base", str(base_dir))
    assert adapter.config.model == str(base_dir)
    batch = two_pairs(tuned)
    with torch.no_grad():
        want = tuned.eval()(**batch)
        assert torch.allclose(adapter(**batch), want, atol=1e-4)
        # the adapter carries both changes: the base, or the intermediate, with the tuned
        # head alone scores otherwise
        for start in (base_dir, tmp_path / "middle"):
            plain = CrossEncoder.build(model_config(model=str(start)))
            plain.head = tuned.head
            assert not torch.allclose(plain.eval()(**batch), want, atol=1e-3)
    assert str(base_dir) in (tmp_path / "adapter" / "README.md").read_text()


def test_dual_encoder_export_over_another_base(tiny_dir, tmp_path, minilm_tokenizer):
    """--base on a dual encoder: the folder names that base; two towers are refused with one
    line (the passage tower's base could not follow), leaving nothing behind."""
    from convqa.front.tools import export_lora as module
    from retrievers.dense.model import DualEncoderConfig

    tuned = tuned_copy(tiny_dir, rank=2)
    tuned.save_pretrained(tmp_path / "tuned")
    assert module.main(["--tuned", str(tmp_path / "tuned"), "--rank", "2", "--base", str(tiny_dir),
                        "--out", str(tmp_path / "adapter")]) == 0
    loaded = DualEncoder.from_pretrained(tmp_path / "adapter").eval()
    assert loaded.config.model == str(tiny_dir)
    assert torch.allclose(encode_queries(loaded, TEXTS), encode_queries(tuned, TEXTS), atol=1e-5)
    other = make_tiny_bert(tmp_path / "other", minilm_tokenizer, seed=1)
    two = DualEncoder.build(DualEncoderConfig(model=str(tiny_dir), passage_model=str(other)))
    two.save_pretrained(tmp_path / "two")
    assert module.main(["--tuned", str(tmp_path / "two"), "--rank", "2", "--base", str(tiny_dir),
                        "--out", str(tmp_path / "refused")]) == 2
    assert not (tmp_path / "refused").exists()


def test_reranker_export_over_a_transport_copy_names_the_original(tmp_path, capsys):
    """On a GPU machine the base is all-mpnet-base-v2 rebuilt from its int8 transport form:
    --base-name makes the adapter (computed against that copy) name and load over the original,
    and it scores as the tuned model does up to the copy's rounding."""
    from reranker_helpers import model_config, save_tiny_encoder

    from convqa.front.tools import export_lora as module
    from convqa.front.tools.device_pack.__main__ import main as device_pack
    from retrievers.rerank.model import CrossEncoder

    base_dir = save_tiny_encoder(tmp_path / "base")
    assert device_pack(["model-pack", str(base_dir), str(tmp_path / "packed"),
                        "--int8-matrices"]) == 0
    assert device_pack(["model-unpack", str(tmp_path / "packed"), str(tmp_path / "copy")]) == 0
    tuned = CrossEncoder.build(model_config(model=str(tmp_path / "copy")))
    add_low_rank(tuned.encoder, torch.Generator().manual_seed(21))
    tuned.save_pretrained(tmp_path / "tuned")
    capsys.readouterr()
    assert module.main(["--tuned", str(tmp_path / "tuned"), "--base-name", str(base_dir),
                        "--rank", "2", "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--base" in err
    adapter = exported_reranker(tmp_path, "--rank", "2", "--base", str(tmp_path / "copy"),
                                "--base-name", str(base_dir))
    assert adapter.config.model == str(base_dir)
    batch = two_pairs(tuned)
    with torch.no_grad():
        want = tuned.eval()(**batch)
        got = adapter(**batch)
        untuned = CrossEncoder.build(model_config(model=str(base_dir)))
        untuned.head = tuned.head
        away = (untuned.eval()(**batch) - want).abs().max()
    assert (got - want).abs().max() < 0.05 * away
    assert f"over `{base_dir}`" in (tmp_path / "adapter" / "README.md").read_text()


def test_int8_factors_reload_to_the_recorded_model_at_half_the_fp16_bytes(tmp_path, capsys):
    """--int8: the LoRA factors stored as int8 rows with scales in their own file (peft's file
    name is not used, so a plain peft load cannot misread the codes); the folder reloads to the
    exact weights its fingerprint was taken of and scores as the tuned model does."""
    import json

    from reranker_helpers import model_config, save_tiny_encoder
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from convqa.errors import DataError
    from convqa.front.tools import export_lora
    from convqa.lora_storage import INT8_FILE, load_int8_state
    from retrievers.rerank.model import CrossEncoder

    base_dir = save_tiny_encoder(tmp_path / "base")
    tuned = CrossEncoder.build(model_config(model=str(base_dir)))
    add_low_rank(tuned.encoder, torch.Generator().manual_seed(31), rank=8)
    tuned.save_pretrained(tmp_path / "tuned")
    capsys.readouterr()
    assert export_lora.main(["--tuned", str(tmp_path / "tuned"), "--rank", "8", "--half",
                             "--int8", "--out", str(tmp_path / "both")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not both" in err
    adapter = exported_reranker(tmp_path, "--rank", "8", "--int8")
    folder = tmp_path / "adapter"
    assert not (folder / "adapter_model.safetensors").exists()
    with safe_open(str(folder / INT8_FILE), "pt") as stored:
        dtypes = {k: stored.get_tensor(k).dtype for k in stored.keys()}
    factors = [k for k in dtypes if ".lora_" in k and not k.endswith(".int8_scale")]
    assert factors and {dtypes[k] for k in factors} == {torch.int8}
    meta = json.loads((folder / "convqa_reranker.json").read_text())
    assert adapter.has_adapters and adapter.fingerprint() == meta["fingerprint"]
    batch = two_pairs(tuned)
    with torch.no_grad():
        want, got = tuned.eval()(**batch), adapter(**batch)
    assert torch.allclose(got, want, atol=0.02 * float(want.abs().max()) + 1e-3)
    assert "with int8 factors" in (folder / "README.md").read_text()
    assert export_lora.main(["--tuned", str(tmp_path / "tuned"), "--rank", "8", "--half",
                             "--out", str(tmp_path / "half")]) == 0
    half_bytes = (tmp_path / "half" / "adapter_model.safetensors").stat().st_size
    lora_numel = sum(load_file(str(folder / INT8_FILE))[k].numel() for k in factors)
    # a byte saved per value, less each factor's scales and header entry
    assert half_bytes - (folder / INT8_FILE).stat().st_size >= lora_numel - 200 * len(factors)
    # codes without their scales: a one-line error naming the tensor
    state = load_file(str(folder / INT8_FILE))
    del state[factors[0] + ".int8_scale"]
    save_file(state, str(tmp_path / "broken.safetensors"), metadata={"format": "convqa-lora-int8"})
    with pytest.raises(DataError, match="without its row scales"):
        load_int8_state(tmp_path / "broken.safetensors")


def test_store_lora_int8_copies_an_adapter_folder_with_int8_factors(tmp_path, capsys):
    """convqa/front/tools/store_lora_int8.py on an fp16 adapter folder: a copy that loads and
    scores like it up to rounding; a full-weights folder or an existing target is one line."""
    from reranker_helpers import model_config, save_tiny_encoder

    from convqa.front.tools import store_lora_int8
    from retrievers.rerank.model import CrossEncoder

    base_dir = save_tiny_encoder(tmp_path / "base")
    tuned = CrossEncoder.build(model_config(model=str(base_dir)))
    add_low_rank(tuned.encoder, torch.Generator().manual_seed(41), rank=4)
    tuned.save_pretrained(tmp_path / "tuned")
    half = exported_reranker(tmp_path, "--rank", "4", "--half")
    capsys.readouterr()
    assert store_lora_int8.main([str(tmp_path / "adapter"), str(tmp_path / "int8")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["factors"] > 0 and report["fingerprint"] != report["source_fingerprint"]
    assert sorted(p.name for p in (tmp_path / "int8").glob("adapter_model*")) == [
        "adapter_model.int8.safetensors"]
    copy = CrossEncoder.from_pretrained(tmp_path / "int8").eval()
    batch = two_pairs(tuned)
    with torch.no_grad():
        want, got = half(**batch), copy(**batch)
    assert torch.allclose(got, want, atol=0.02 * float(want.abs().max()) + 1e-3)
    capsys.readouterr()
    for args, words in (([str(tmp_path / "tuned"), str(tmp_path / "x")], "full weights"),
                        ([str(tmp_path / "adapter"), str(tmp_path / "int8")], "exists")):
        assert store_lora_int8.main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err
