"""What the chunked forms of the recurrent ops share: a sequence cut into chunks of C tokens, and the log decay between
two tokens of a chunk summed from the decays themselves (never a difference of cumulative sums)."""
from __future__ import annotations

import torch


def split_chunks(t: torch.Tensor, n: int, C: int) -> torch.Tensor:
    """[B, H, T, ...] zero-padded to n * C tokens -> [B, H, n, C, ...].

    Args:
        t: a per-token tensor, tokens on dim 2.
        n: the number of chunks (n * C >= T).
        C: tokens per chunk.
    """
    pad = n * C - t.shape[2]
    if pad:
        t = torch.cat([t, t.new_zeros(*t.shape[:2], pad, *t.shape[3:])], 2)
    return t.unflatten(2, (n, C))


def segment_sums(g: torch.Tensor, dim: int) -> torch.Tensor:
    """The log decay between every two tokens of a chunk, as sums of the decays themselves: S_ij = sum_{j < t <= i}
    g_t (-inf for j > i), so that exp(S) is each decay factor, 0 above the diagonal. Differences of cumulative sums
    (b_i - b_j) would lose the weak decays that follow a strong one to rounding (after one token of -1e6, every later
    factor of a float32 chunk was a few percent off).

    Args:
        g: log decays with the chunk's tokens along ``dim``: [..., C] (dim -1) or [..., C, K] (dim -2).
        dim: -1 or -2.

    Returns:
        [..., C, C] (dim -1) or [..., C, C, K] (dim -2).
    """
    C = g.shape[dim]
    later = torch.ones(C, C, dtype=torch.bool, device=g.device).tril(-1)  # [t, j]: t > j
    upto = torch.ones(C, C, dtype=torch.bool, device=g.device).tril()  # [i, j]: i >= j
    if dim == -2:
        later, upto = later[..., None], upto[..., None]
    x = g.unsqueeze(dim)
    x = x.expand(*x.shape[:dim], C, *x.shape[dim:][1:])  # x[..., t, j(, K)] = g_t
    return x.masked_fill(~later, 0.0).cumsum(dim - 1).masked_fill(~upto, float("-inf"))


def suffix_sums(g: torch.Tensor, dim: int) -> torch.Tensor:
    """sum_{t > i} g_t for every token i along ``dim`` (the decay from i to the end of the chunk), summed from the
    end, never as a difference of cumulative sums (see :func:`segment_sums`)."""
    inclusive = g.flip(dim).cumsum(dim).flip(dim)
    return torch.cat([inclusive.narrow(dim, 1, g.shape[dim] - 1), torch.zeros_like(g.narrow(dim, 0, 1))], dim)
