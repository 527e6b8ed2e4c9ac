"""The gated linear recurrence token by token (the reference of :mod:`lavo_zoo.attention.ops.gated_linear`):
S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t. Tests only; use float64."""
from __future__ import annotations

import torch


def naive_gated_linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None,
                       state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k [B, H, T, K], v [B, H, T, V], g [B, H, T] / [B, H, T, K] / None, state [B, H, K, V] -> (o, state).

    Its arguments are stated on `lavo_zoo.attention.ops.gated_linear.chunk.chunk_gated_linear`, the form it checks.
    """
    B, H, T, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1]) if state is None else state
    out = []
    for t in range(T):
        if g is not None:
            a = g[:, :, t].exp()
            S = S * (a[..., None, None] if a.dim() == 2 else a[..., None])
        S = S + k[:, :, t, :, None] * v[:, :, t, None, :]
        out.append((q[:, :, t, :, None] * S).sum(-2))
    return (torch.stack(out, 2) if out else v.new_zeros(B, H, 0, v.shape[-1])), S
