"""What a device can still hold: the one reading of its free memory (:func:`available_memory`), below every layer
that refuses work too large for it before it starts (an attention layer whose parameters or state cannot fit,
:mod:`lavo_zoo.attention.registry`; a training run or a predictor's request, :mod:`lavo_zoo.engine.memory`), and how
such a figure is written (:func:`format_bytes`). Torch is imported only to read a CUDA device."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any


def _cgroup_room() -> int | None:
    """Bytes this process's cgroup may still allocate (its limit less its usage; v2, then v1), or None."""
    v1 = "/sys/fs/cgroup/memory/memory."
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         (v1 + "limit_in_bytes", v1 + "usage_in_bytes")):
        try:
            text = Path(limit).read_text().strip()
            if text == "max" or int(text) >= 2**60:  # no limit
                return None
            return max(int(text) - int(Path(usage).read_text()), 0)
        except (OSError, ValueError):
            continue
    return None


def available_memory(device: Any = "cpu") -> int:
    """Bytes a new allocation on ``device`` can still get: on CUDA the free device memory plus what PyTorch's
    allocator holds unused (``torch.cuda.mem_get_info``, ``memory_reserved - memory_allocated``); on a CPU the
    kernel's MemAvailable (else free pages, ``os.sysconf``), no more than the room left under a cgroup limit."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    try:
        found = re.search(r"MemAvailable:\s+(\d+)", Path("/proc/meminfo").read_text())
        room = int(found.group(1)) * 1024 if found else None
    except OSError:
        room = None
    if room is None:
        try:
            room = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):  # no such figure on this system: assume room
            return 2**62
    cgroup = _cgroup_room()
    return min(room, cgroup) if cgroup is not None else room


def format_bytes(n: float) -> str:
    """``n`` bytes as a short figure (1.5 GB, 320 MB, 12 KB)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"
