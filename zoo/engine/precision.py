"""Training's numeric precision (``train.precision``), decided in one place for the trainer and for the benchmarks
that time training (``lavo-zoo bench lm``): 'bf16' is bfloat16 autocast with fp32 weights, 'auto' is that on CUDA
and plain fp32 elsewhere, 'fp32' is fp32 everywhere."""
from __future__ import annotations

import contextlib
from typing import Any

import torch


def autocast_dtype(precision: str, device: torch.device | str) -> torch.dtype | None:
    """The autocast dtype of ``train.precision`` on ``device`` (None: no autocast, fp32)."""
    if precision == "bf16" or (precision == "auto" and torch.device(device).type == "cuda"):
        return torch.bfloat16
    return None


def autocast(dtype: torch.dtype | None, device: torch.device | str) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` to ``dtype`` on ``device``'s type, or nothing for None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def precision_name(dtype: torch.dtype | None) -> str:
    """How records name it: 'bf16-autocast' (fp32 weights, autocast to bf16), 'fp32'."""
    return "fp32" if dtype is None else f"{str(dtype).removeprefix('torch.').replace('bfloat16', 'bf16')}-autocast"
