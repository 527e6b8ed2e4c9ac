"""What the Triton kernels share (the sliding window's ``ops/window/triton.py`` and LAVO's read ``lavo/triton.py``):
whether they can run on a tensor, tile sizes, the dot products' precision, the masked score, the launch layout.

Importing this module imports Triton (an ImportError where it is missing: :func:`lavo_zoo.attention.ops.dispatch.
triton_runs` treats that as "the kernels do not run here"). ``INTERPRETED`` is read when this module is first
imported, which is when the kernels are decorated: with ``TRITON_INTERPRET=1`` set before that, they run in Triton's
interpreter on CPU tensors (what the tests do); otherwise they need CUDA tensors.
"""
from __future__ import annotations

import os

import torch
import triton

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"  # read by @triton.jit at decoration, i.e. at import
DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # fp64 stays on the PyTorch kernels
NEG = -1.0e30  # a masked score: finite, so rows without a real key stay finite


def usable(t: torch.Tensor) -> bool:
    """Whether the kernels can run on tensors like t: CUDA (or any device in the interpreter), fp16/bf16/fp32, not
    empty."""
    return (t.is_cuda or INTERPRETED) and t.dtype in DTYPES and t.numel() > 0


def precision(dtype: torch.dtype) -> str:
    """tl.dot's input precision for operands of this dtype: fp32 products ('ieee') for fp32 inputs unless torch
    allows TF32 matmuls (``torch.set_float32_matmul_precision('high')``), as cuBLAS does; half inputs multiply in
    their own dtype (the flag is ignored for them)."""
    if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"


def block_dim(n: int) -> int:
    """A power-of-two tile extent >= n and >= 16 (tl.dot's minimum)."""
    return max(16, triton.next_power_of_2(n))


def strides(t: torch.Tensor) -> tuple[int, ...]:
    """Every stride of t but the last (the kernels take unit column strides: :func:`rowmajor`); [B, H, T, d] ->
    (batch, head, time) strides."""
    return tuple(t.stride()[:-1])


def rowmajor(t: torch.Tensor) -> torch.Tensor:
    """t with unit stride along its last axis (the kernels' column stride): t itself when it has one, else a copy."""
    return t if t.stride(-1) == 1 else t.contiguous()
