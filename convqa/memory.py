"""This process's resident memory, for the reports of index builds and benchmarks ("peak RAM").

Linux's /proc/self/status gives the resident set now (VmRSS) and its high-water mark (VmHWM),
pages of memory-mapped files included; both start afresh in a process started by exec. It also
splits the resident set into anonymous memory (RssAnon: what the process allocated, which only
swap can take back) and file-backed pages (RssFile + RssShmem: memory-mapped index files and
libraries, which the kernel drops under pressure and reads again when touched).
Elsewhere the peak comes from `getrusage` (ru_maxrss: KiB on Linux, bytes on macOS), which a
spawned child inherits from its parent's peak, and the current size is unknown.
"""
from __future__ import annotations

import sys


def resident_bytes() -> dict[str, int]:
    """{"now": bytes resident now, "peak": the most resident so far, "anon": anonymous bytes
    resident now, "file": file-backed bytes resident now}; a key is missing where the platform
    does not tell."""
    fields = {"VmRSS": "now", "VmHWM": "peak", "RssAnon": "anon", "RssFile": "file",
              "RssShmem": "file"}
    values: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in fields:
                    name = fields[key]
                    values[name] = values.get(name, 0) + int(rest.split()[0]) * 1024
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
