"""Which kernels run: the one place that decides, for the sliding window (LAVO's local branch and the ``local``
mechanism) and for LAVO's memory read together.

The kernels, by name (:data:`KERNELS`):

- ``triton``: the fused Triton kernels (``ops/window/triton.py``, ``lavo/triton.py``); CUDA tensors (any device in
  Triton's interpreter) of fp16 / bf16 / fp32, Triton importable, ``LAVO_ZOO_TRITON`` not 0 (:func:`triton_runs`).
- ``flex``: the window through torch's flex_attention (``ops/window/flex.py``; CUDA, at least
  ``flex.MIN_QUERIES`` queries, ``LAVO_ZOO_FLEX`` not 0, not failed to compile in this process); the read has no
  flex kernel and runs ``recompute`` beside it.
- ``recompute``: autograd Functions that save their inputs and recompute chunk by chunk in backward
  (``ops/window/blocked.py``, ``lavo/read.py``); every device and dtype.
- ``autograd``: the same blocked computation left to autograd, which keeps the [T, 2w] and [T, r] probabilities;
  the only kernels that apply attention dropout (:data:`DROPOUT_KERNELS`: the mask must be the one backward sees).

:func:`choose_kernels` turns a requested backend (:data:`BACKENDS`: 'auto' or a kernel name) into the pair of
kernels; LAVO's layer calls it once per call (``LavoAttention.kernels``), and
:func:`~lavo_zoo.attention.ops.window.window_attention` resolves its ``backend`` argument with it.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import torch

KERNELS = ("triton", "flex", "recompute", "autograd")
BACKENDS = ("auto", "recompute", "autograd", "flex", "triton")  # what a caller may request: 'auto' or a kernel
DROPOUT_KERNELS = frozenset({"autograd"})  # the kernels that apply attention dropout themselves
# the kernel that always runs: a requested kernel that cannot run falls back to it (then to 'autograd' with dropout)
FALLBACK = "recompute"


class Kernels(NamedTuple):
    """The kernels of one call: the sliding window's (LAVO's local branch) and the memory read's."""

    window: str  # 'triton' | 'flex' | 'recompute' | 'autograd'
    read: str    # 'triton' | 'recompute' | 'autograd'


def triton_runs(q: torch.Tensor) -> bool:
    """Whether the Triton kernels run for queries q: ``LAVO_ZOO_TRITON`` is not 0, Triton imports, and q is a CUDA
    tensor (any device in Triton's interpreter) of fp16 / bf16 / fp32 (fp64 stays on the PyTorch kernels)."""
    if os.environ.get("LAVO_ZOO_TRITON", "1") == "0":
        return False
    try:
        from lavo_zoo.attention.ops import triton_utils
    except ImportError:  # no Triton on this platform
        return False
    return triton_utils.usable(q)


def flex_runs(q: torch.Tensor) -> bool:
    """Whether the flex_attention window runs for queries q [B, H, T, d] (see :func:`.window.flex.enabled`)."""
    from lavo_zoo.attention.ops.window import flex  # here: the window package imports this module

    return flex.enabled(q)


def choose_kernels(q: torch.Tensor, backend: str = "auto", *, dropout: float = 0.0, training: bool = False,
                   auto_triton: bool = True) -> Kernels:
    """The kernels that run for queries q [B, H, T, d].

    Args:
        q: the queries (their device, dtype and length decide).
        backend: 'auto' (the fastest kernels that run here) or a kernel name to force: 'triton' where it cannot run
            falls back to 'recompute'; 'flex' forces the flex window (the read runs 'recompute'); 'autograd' forces
            both branches' autograd kernels.
        dropout, training: attention dropout applies in training; a kernel without it (not in
            :data:`DROPOUT_KERNELS`) is replaced by 'autograd', whatever was requested.
        auto_triton: whether 'auto' takes the Triton kernels on CUDA (LAVO does; the ``local`` mechanism and
            :func:`~lavo_zoo.attention.ops.window.window_attention`'s 'auto' keep flex_attention there).

    Returns:
        :class:`Kernels`: 'auto' gives ('triton', 'triton') on CUDA where :func:`triton_runs` (and ``auto_triton``),
        else ('flex', 'recompute') where :func:`flex_runs`, else ('recompute', 'recompute').
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    if backend == "auto":
        if auto_triton and q.is_cuda and triton_runs(q):
            window = read = "triton"
        else:
            window, read = ("flex" if flex_runs(q) else FALLBACK), FALLBACK
    elif backend == "triton":
        window = read = "triton" if triton_runs(q) else FALLBACK
    else:
        window, read = backend, ("autograd" if backend == "autograd" else FALLBACK)
    if dropout and training:
        window, read = (k if k in DROPOUT_KERNELS else "autograd" for k in (window, read))
    return Kernels(window, read)
