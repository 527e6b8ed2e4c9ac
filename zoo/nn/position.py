"""Position encodings shared by recipe backbones."""
from __future__ import annotations

import math

import torch


def sinusoidal_positions(length: int, dim: int, offset: int = 0, dtype: torch.dtype = torch.float32,
                         device: torch.device | str | None = None) -> torch.Tensor:
    """Sinusoidal table [length, dim] for positions offset..offset+length-1 (Vaswani et al.; sin on even
    channels, cos on odd, as Informer's PositionalEmbedding; fairseq's layout differs by a channel permutation).

    Args:
        length: the positions.
        dim: the channels (even).
        offset: the first position.
        dtype: the table's dtype (computed in float64).
        device: where it is made (None: the default device).

    Raises:
        ValueError: an odd ``dim``.
    """
    if dim % 2:
        raise ValueError(f"sinusoidal positions need an even dim, got {dim}")
    pos = torch.arange(offset, offset + length, dtype=torch.float64, device=device)[:, None]  # [T, 1]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64, device=device) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim, dtype=torch.float64, device=device)  # [T, D]
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table.to(dtype)
