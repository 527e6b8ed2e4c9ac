"""Peak memory of a region of work, measured the same way by ``lavo-zoo bench`` and ``lavo-zoo compare``.

On CUDA: ``torch.cuda.max_memory_allocated`` above what was allocated when the region started. On CPU (Linux): the
kernel's resident-set high-water mark is reset (``/proc/self/clear_refs``) and the peak is VmHWM - VmRSS at the
start, i.e. the real peak of every allocation made inside the region. Where clear_refs is not available,
ru_maxrss - RSS at the start is used (it then also counts earlier peaks of the process).

On CPU the resident set at the start also holds memory that earlier work freed but the C library kept for reuse, which
the region then reuses without growing it: :func:`release_freed_memory` returns it to the system first, so that a
region measured after other work reads the same as one measured first (``lavo-zoo compare`` measures each cell so).
"""
from __future__ import annotations

import ctypes
import gc
import re
import resource
from pathlib import Path
from typing import Any, Self


def memory_now() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes."""
    status = Path("/proc/self/status").read_text()
    kb = [int(re.search(rf"{k}:\s+(\d+)", status).group(1)) for k in ("VmRSS", "VmHWM")]
    return kb[0] * 1024, kb[1] * 1024


def release_freed_memory() -> bool:
    """Collect garbage and return the memory freed blocks hold to the system (glibc's ``malloc_trim``), so that the
    resident set is the memory in use. False where the C library has no such call (the freed memory then stays)."""
    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def reset_peak() -> str:
    """Reset the resident-set high-water mark; returns the memory method used."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return "VmHWM-reset"
    except OSError:
        return "ru_maxrss"


class PeakMemory:
    """``with PeakMemory(device) as peak: ...`` then ``peak.bytes`` (above the start) and ``peak.method``."""

    def __init__(self, device: Any = "cpu") -> None:
        import torch

        self.device = torch.device(device)
        self.bytes, self.method, self._base = 0, "", 0

    def __enter__(self) -> Self:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base, self.method = torch.cuda.memory_allocated(self.device), "cuda.max_memory_allocated"
        else:
            self.method = reset_peak()
            self._base = memory_now()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        elif self.method == "VmHWM-reset":
            peak = memory_now()[1]
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self.bytes = max(peak - self._base, 0)
