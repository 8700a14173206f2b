"""Shared test fixtures.

Real data lives in ../shared/data next to the checkout (or where CONVQA_SHARED_DATA points);
tests that need it are skipped with a reason when it is absent.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# The suite never downloads: a hub id that is not on disk fails at once instead of after the
# hub client's retries (46 s here without network). Subprocesses inherit it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _share_cores_between_workers() -> None:
    """Under pytest-xdist (scripts/test.sh runs one worker per core), each worker's torch and
    FAISS get the cores divided by the workers, unless OMP_NUM_THREADS says otherwise: two
    workers with two threads each on two cores slow each other down."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers < 2 or os.environ.get("OMP_NUM_THREADS"):
        return
    import torch

    threads = max(1, (os.cpu_count() or 1) // workers)
    torch.set_num_threads(threads)
    try:
        import faiss

        faiss.omp_set_num_threads(threads)
    except ImportError:
        pass


_share_cores_between_workers()

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _shared_data_dir() -> Path:
    override = os.environ.get("CONVQA_SHARED_DATA")
    return Path(override) if override else REPO.parent / "shared" / "data"


SHARED_DATA = _shared_data_dir()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (set CONVQA_SHARED_DATA)")
    return SHARED_DATA


def shared_file(relative: str) -> Path:
    """Path of a file under ../shared/data, skipping the test if it is missing."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"real data file not found: {path}")
    return path


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def minilm_tokenizer():
    from convqa.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(autouse=True)
def _precision_choices_in_tmp(tmp_path, monkeypatch):
    """Remembered precision choices (convqa/precision.py) go to each test's own folder, so no
    test sees another's choice or the developer's."""
    from convqa import precision

    monkeypatch.setattr(precision, "choices_file", lambda: tmp_path / "precision-choices.json")
