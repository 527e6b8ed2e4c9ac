"""Which kernels run: the one place that decides, for the sliding window (LAVO's local branch and the ``local``
mechanism) and for LAVO's memory read together.

The kernels, by name:

- ``triton``: the fused Triton kernels (``ops/window/triton.py``, ``lavo/triton.py``); CUDA tensors (any device in
  Triton's interpreter) of fp16 / bf16 / fp32, Triton importable, ``LAVO_ZOO_TRITON`` not 0, no Triton kernel
  failed to compile in this process (:func:`triton_runs`).
- ``flex``: the window through torch's flex_attention (``ops/window/flex.py``; CUDA, at least
  ``flex.MIN_QUERIES`` queries, ``LAVO_ZOO_FLEX`` not 0, not failed to compile in this process); the read has no
  flex kernel and runs ``recompute`` beside it.
- ``recompute``: autograd Functions that save their inputs and recompute chunk by chunk in backward
  (``ops/window/blocked.py``, ``lavo/read.py``); every device and dtype.
- ``autograd``: the same blocked computation left to autograd, which keeps the [T, 2w] and [T, r] probabilities.

Attention dropout runs inside the kernels that have it (:data:`DROPOUT_KERNELS`: triton, recompute and autograd,
whose backward sees the forward's mask); flex_attention has none, so in training with dropout its place goes to
``recompute``.

No unverified default: 'auto' takes the Triton kernels on CUDA only where ``LAVO_ZOO_TRITON=1`` asks for them
(:func:`triton_by_default`) until a run of the device check on a GPU has passed (then :data:`TRITON_DEFAULT` becomes
True in the commit that records it); until then LAVO's CUDA default is the path that has run on a GPU, the flex
window with the recompute read.

:func:`choose_kernels` turns a requested backend (:data:`BACKENDS`: 'auto' or a kernel name) into the pair of
kernels; LAVO's layer calls it once per call (``LavoAttention.kernels``), and
:func:`~lavo_zoo.attention.ops.window.window_attention` resolves its ``backend`` argument with it.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import torch

BACKENDS = ("auto", "recompute", "autograd", "flex", "triton")  # what a caller may request: 'auto' or a kernel
DROPOUT_KERNELS = frozenset({"triton", "recompute", "autograd"})  # the kernels that apply attention dropout
# the kernel that always runs (dropout included): a requested kernel that cannot run falls back to it
FALLBACK = "recompute"
# whether 'auto' takes the Triton kernels on CUDA without LAVO_ZOO_TRITON=1: False until a device run has passed
TRITON_DEFAULT = False


class Kernels(NamedTuple):
    """The kernels of one call: the sliding window's (LAVO's local branch) and the memory read's."""

    window: str  # 'triton' | 'flex' | 'recompute' | 'autograd'
    read: str    # 'triton' | 'recompute' | 'autograd'


def triton_runs(q: torch.Tensor) -> bool:
    """Whether the Triton kernels run for queries q: ``LAVO_ZOO_TRITON`` is not 0, Triton imports, q is a CUDA
    tensor (any device in Triton's interpreter) of fp16 / bf16 / fp32 (fp64 stays on the PyTorch kernels), and no
    Triton kernel failed to compile in this process."""
    if os.environ.get("LAVO_ZOO_TRITON", "") == "0":
        return False
    try:
        from lavo_zoo.attention.ops import triton_utils
    except ImportError:  # no Triton on this platform
        return False
    return triton_utils.usable(q) and not triton_utils.failures()


def triton_by_default() -> bool:
    """Whether 'auto' takes the Triton kernels on CUDA: ``LAVO_ZOO_TRITON=1``, or :data:`TRITON_DEFAULT` (once a
    device run has passed) unless ``LAVO_ZOO_TRITON=0``."""
    switch = os.environ.get("LAVO_ZOO_TRITON", "")
    return switch == "1" or (TRITON_DEFAULT and switch != "0")


def on_cuda(q: torch.Tensor) -> bool:
    """Whether q is a CUDA tensor (a function of its own so that the tests can state the CUDA choices on a CPU)."""
    return q.is_cuda


def flex_runs(q: torch.Tensor) -> bool:
    """Whether the flex_attention window runs for queries q [B, H, T, d] (see :func:`.window.flex.enabled`)."""
    from lavo_zoo.attention.ops.window import flex  # here: the window package imports this module

    return flex.enabled(q)


def choose_kernels(q: torch.Tensor, backend: str = "auto", *, dropout: float = 0.0, training: bool = False,
                   auto_triton: bool = True) -> Kernels:
    """The kernels that run for queries q [B, H, T, d].

    Args:
        q: the queries (their device, dtype and length decide).
        backend: 'auto' (the verified kernels that run here) or a kernel name to force: 'triton' where it cannot
            run falls back to 'recompute'; 'flex' forces the flex window (the read runs 'recompute'); 'autograd'
            forces both branches' autograd kernels.
        dropout, training: attention dropout applies in training; a kernel without it (not in
            :data:`DROPOUT_KERNELS`: flex) is replaced by 'recompute', whatever was requested.
        auto_triton: whether 'auto' may take the Triton kernels on CUDA (LAVO may, where
            :func:`triton_by_default`; the ``local`` mechanism and
            :func:`~lavo_zoo.attention.ops.window.window_attention`'s 'auto' keep flex_attention there).

    Returns:
        :class:`Kernels`: 'auto' gives ('triton', 'triton') on CUDA where ``auto_triton``, :func:`triton_by_default`
        and :func:`triton_runs`, else ('flex', 'recompute') where :func:`flex_runs`, else ('recompute', 'recompute').
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    if backend == "auto":
        if auto_triton and on_cuda(q) and triton_by_default() and triton_runs(q):
            window = read = "triton"
        else:
            window, read = ("flex" if flex_runs(q) else FALLBACK), FALLBACK
    elif backend == "triton":
        window = read = "triton" if triton_runs(q) else FALLBACK
    else:
        window, read = backend, ("autograd" if backend == "autograd" else FALLBACK)
    if dropout and training:
        window, read = (k if k in DROPOUT_KERNELS else FALLBACK for k in (window, read))
    return Kernels(window, read)
