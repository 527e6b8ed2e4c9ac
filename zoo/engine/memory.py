"""Peak memory of a region of work, measured the same way by ``lavo-zoo bench`` and ``lavo-zoo compare``.

On CUDA: ``torch.cuda.max_memory_allocated`` above what was allocated when the region started. On CPU (Linux): the
kernel's resident-set high-water mark is reset (``/proc/self/clear_refs``) and the peak is VmHWM - VmRSS at the
start, i.e. the real peak of every allocation made inside the region. Where clear_refs is not available,
ru_maxrss - RSS at the start is used (it then also counts earlier peaks of the process).

On CPU the resident set at the start also holds memory that earlier work freed but the C library kept for reuse, which
the region then reuses without growing it: :func:`release_freed_memory` returns it to the system first, so that a
region measured after other work reads the same as one measured first (``lavo-zoo compare`` measures each cell so).

What a device can still hold (:func:`~lavo_zoo.free_memory.available_memory`, below the attention layer, which
refuses a layer that could not fit) and the refusal of a request that cannot fit, before it
starts (:func:`check_fits`), are here too: the predictors estimate a request's memory from its sizes (beam, batch,
lengths, frames) and call :func:`check_fits` with it.
"""
from __future__ import annotations

import ctypes
import gc
import re
import resource
from pathlib import Path
from typing import Any, Self

from lavo_zoo.errors import InputError, ZooError
from lavo_zoo.free_memory import available_memory, format_bytes  # the one reading of a device's free memory


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


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says memory ran out: Python's MemoryError, torch's OutOfMemoryError (CUDA) or its CPU
    allocator's refusal."""
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error))


def check_fits(need: float, device: Any, request: str, fix: str) -> None:
    """Refuse, before it starts, a request whose estimated memory ``need`` (bytes) exceeds what ``device`` can still
    hold (:func:`available_memory`).

    Args:
        need: the estimate, in bytes.
        device: where the request would run.
        request: what was asked, for the message (e.g. "a beam of 64 over 8 documents").
        fix: how to ask for less (e.g. "lower beam or batch_size").

    Raises:
        InputError: the request cannot fit (a usage error: exit 2 on the command line).
    """
    room = available_memory(device)
    if need > room:
        raise InputError(f"{request} needs about {format_bytes(need)} of memory, but {device} has "
                         f"{format_bytes(room)} free; {fix}")


def build_on_meta(build: Any) -> Any:
    """The model ``build()`` returns, built on PyTorch's meta device (which allocates nothing), or None where it cannot
    be built there. The build's own refusals (an option out of range: a :class:`~lavo_zoo.errors.ZooError`) are
    raised, as the real build would raise them, so that a check made before any work refuses what the work would.
    The real build afterwards draws the random numbers it drew before.

    Args:
        build: a zero-argument callable returning the model (``lambda: recipe.build_model(cfg)``).
    """
    import torch

    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            return build()
    except ZooError:
        raise
    except Exception:  # noqa: BLE001 - a module that cannot be built on meta: no model to check
        return None


def check_model_fits(build: Any, device: Any, copies: int, request: str) -> None:
    """Refuse, before it is built, a model whose parameters ``device`` cannot hold ``copies`` times (1 to run it; 4 to
    train it with Adam: weights, gradients and two moments): the model is built once on PyTorch's meta device, which
    allocates nothing, to count its parameters (:func:`build_on_meta`: an option the build refuses is refused here).
    A model that cannot be built there is not checked (it is then built as before).

    Args:
        build: a zero-argument callable returning the model (``lambda: recipe.build_model(cfg)``).
        device: where it would run.
        copies: the parameter-sized tensors the work keeps per parameter.
        request: what was asked, for the message.

    Raises:
        InputError: the parameters cannot fit, naming their count and the bytes they need.
    """
    model = build_on_meta(build)
    if model is None:
        return
    params = list(model.parameters()) + list(model.buffers())
    count = sum(p.numel() for p in params)
    need = sum(p.numel() * p.element_size() for p in params) * copies
    check_fits(need, device, f"{request} ({count:,} parameters and buffers, x{copies})",
               "lower the model's or the data's sizes in the config")
