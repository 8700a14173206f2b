"""convqa/memory.py: the resident memory that index builds and benchmarks report."""
import sys

import numpy as np
import pytest

from convqa.memory import peak_memory_note, resident_bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux's")
def test_peak_follows_what_the_process_touches():
    first = resident_bytes()
    assert set(first) == {"now", "peak"} and 0 < first["now"] <= first["peak"]
    block = np.ones(first["peak"] // 8 + 64 * 2**20 // 8)  # more than the peak so far, touched
    after = resident_bytes()
    assert after["peak"] >= first["peak"] + 64 * 2**20
    del block
    # a high-water mark stays (up to the kernel's lazily synced per-CPU counters: ~100 KiB)
    assert resident_bytes()["peak"] >= after["peak"] - 2**20
    note = peak_memory_note()
    assert note.startswith(", peak memory ") and note.endswith(" GiB")
    assert float(note.split()[-2]) == pytest.approx(after["peak"] / 2**30, abs=0.01)
