"""Attention dropout inside the kernels that recompute in backward: the keep-mask of a call is a function of a seed
drawn once per call, so backward regenerates exactly the mask forward used instead of saving it.

- :func:`new_seed`: the call's seed, drawn from torch's default CPU generator (``torch.manual_seed`` makes runs
  repeat; no device synchronisation).
- :func:`keep_factor`: the PyTorch kernels' mask of one chunk (its own generator seeded from the call's seed and the
  chunk's first query), as the factor that multiplies kept probabilities: 1 / (1 - p) where kept, 0 where dropped.
- The Triton kernels draw theirs with ``tl.rand`` from the seed and each element's offset
  (:func:`lavo_zoo.attention.ops.triton_utils.dropout_factor`, materialised by
  :func:`~lavo_zoo.attention.ops.triton_utils.dropout_mask`).

Masks are laid out per query and per "slot" of the query: the window's 2w - 1 relative key offsets
(s - t + w - 1; causal windows use the first w) and the read's r bases.
"""
from __future__ import annotations

import torch

SEED_BOUND = 2**31 - 1  # seeds are non-negative int32 (what tl.rand takes)


def new_seed() -> int:
    """A fresh seed for one call's dropout mask, from torch's default CPU generator."""
    return int(torch.randint(0, SEED_BOUND, (1,)).item())


def keep_factor(seed: int, first: int, shape: tuple[int, ...], p: float, device: torch.device,
                dtype: torch.dtype) -> torch.Tensor:
    """The dropout factor of one chunk whose first query is ``first``: [*shape] of dtype, 1 / (1 - p) where the
    element is kept (probability 1 - p), 0 where dropped. The same (seed, first, shape, device) always gives the same
    mask, whatever else drew random numbers in between.

    Args:
        seed: the call's seed (:func:`new_seed`).
        first: the chunk's first query (its position in the call), which picks the chunk's stream.
        shape: the mask's shape, e.g. [B, H, Tq, slots] for the chunk's Tq queries.
        p: the dropout probability, in [0, 1).
        device: where the mask is drawn (the same seed gives other masks on other devices).
        dtype: the factor's dtype.
    """
    gen = torch.Generator(device=device)
    gen.manual_seed(_mix(seed, first))  # one stream per (call, chunk)
    keep = torch.rand(shape, generator=gen, device=device) >= p
    return keep.to(dtype) / (1.0 - p)


def _mix(seed: int, first: int) -> int:
    """A 64-bit generator seed from (call seed, chunk) whose low 32 bits depend on both (the CPU generator keeps only
    those): splitmix64's finaliser of seed * golden ratio + first."""
    x = (seed * 0x9E3779B97F4A7C15 + first) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)
