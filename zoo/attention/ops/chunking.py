"""What the chunked forms of the recurrent ops share: a sequence cut into chunks of C tokens."""
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
