"""This process's resident memory, for the reports of index builds and benchmarks ("peak RAM").

Linux's /proc/self/status gives the resident set now (VmRSS) and its high-water mark (VmHWM),
pages of memory-mapped files included; both start afresh in a process started by exec.
Elsewhere the peak comes from `getrusage` (ru_maxrss: KiB on Linux, bytes on macOS), which a
spawned child inherits from its parent's peak, and the current size is unknown.
"""
from __future__ import annotations

import sys


def resident_bytes() -> dict[str, int]:
    """{"now": bytes resident now, "peak": the most resident so far}; a key is missing where
    the platform does not tell."""
    values: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values["now" if key == "VmRSS" else "peak"] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        values = {}
    if "peak" not in values:
        try:
            import resource
        except ImportError:  # Windows
            return values
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        values["peak"] = peak if sys.platform == "darwin" else peak * 1024
    return values


def peak_memory_note() -> str:
    """', peak memory X GiB' for a build's closing line ('' where unknown)."""
    peak = resident_bytes().get("peak")
    return f", peak memory {peak / 2**30:.2f} GiB" if peak else ""
