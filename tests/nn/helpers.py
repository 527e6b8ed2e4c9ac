"""Helpers of the tests of zoo/nn: point clouds of known kinds and a slow, exact reference of their distances."""
from __future__ import annotations

import torch


def clouds(kind: str, n: int, m: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(n, 3, generator=g) - 0.5
    if kind == "near":  # a prediction close to its ground truth
        b = a[torch.randint(n, (m,), generator=g)] + 0.01 * torch.randn(m, 3, generator=g)
    elif kind == "far":  # one cloud spread far wider: most queries need the coarse grids or the dense fallback
        b = 5 * torch.randn(m, 3, generator=g)
    elif kind == "duplicates":
        b = torch.cat([a[:m // 2], a[:m - m // 2]])
    else:
        b = torch.rand(m, 3, generator=g) - 0.5
    return a, b


def brute_sq_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[B, N, M] squared distances in fp64, one difference at a time (no |a|^2 + |b|^2 - 2ab cancellation)."""
    return (a.double()[:, :, None] - b.double()[:, None]).square().sum(-1)
