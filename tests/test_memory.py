"""convqa/memory.py: the resident memory that index builds and benchmarks report."""
import mmap
import sys

import numpy as np
import pytest

from convqa.memory import peak_memory_note, resident_bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux's")
def test_peak_follows_what_the_process_touches():
    first = resident_bytes()
    assert {"now", "peak"} <= set(first) and 0 < first["now"] <= first["peak"]
    block = np.ones(first["peak"] // 8 + 64 * 2**20 // 8)  # more than the peak so far, touched
    after = resident_bytes()
    assert after["peak"] >= first["peak"] + 64 * 2**20
    del block
    # a high-water mark stays (up to the kernel's lazily synced per-CPU counters: ~100 KiB)
    assert resident_bytes()["peak"] >= after["peak"] - 2**20
    note = peak_memory_note()
    assert note.startswith(", peak memory ") and note.endswith(" GiB")
    assert float(note.split()[-2]) == pytest.approx(after["peak"] / 2**30, abs=0.01)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux's")
def test_anonymous_and_file_backed_pages_are_told_apart(tmp_path):
    path = tmp_path / "mapped.npy"
    np.save(path, np.arange(48 * 2**20 // 8, dtype=np.int64))  # a 48 MiB file, like an index
    first = resident_bytes()
    assert first["anon"] + first["file"] == pytest.approx(first["now"], abs=2**20)
    mapped = np.load(path, mmap_mode="r")
    assert int(mapped.sum()) > 0  # every page read through the mapping
    read = resident_bytes()
    assert read["file"] >= first["file"] + 40 * 2**20
    assert read["anon"] < first["anon"] + 16 * 2**20
    # fresh private anonymous pages, touched (np.ones could reuse pages already resident)
    block = mmap.mmap(-1, 48 * 2**20, flags=mmap.MAP_PRIVATE)
    np.frombuffer(block, dtype=np.uint8)[::4096] = 1
    allocated = resident_bytes()
    assert allocated["anon"] >= read["anon"] + 40 * 2**20
    del mapped
