"""The (gated) delta rule token by token (the reference of :mod:`lavo_zoo.attention.ops.delta_rule`), as its papers
state it: S <- exp(g_t) S; the value stored under k_t, S^T k_t, is moved towards v_t by beta_t:
S <- S + beta_t k_t (v_t - S^T k_t)^T; o_t = S^T q_t. Tests only; use float64."""
from __future__ import annotations

import torch


def naive_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                     g: torch.Tensor | None = None, state: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k [B, H, T, K], v [B, H, T, V], beta [B, H, T], g [B, H, T] or None, state [B, H, K, V] -> (o, state)."""
    B, H, T, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1]) if state is None else state
    out = []
    for t in range(T):
        if g is not None:
            S = S * g[:, :, t].exp()[..., None, None]
        kt = k[:, :, t]
        stored = (kt[..., None] * S).sum(-2)  # [B, H, V] S^T k
        S = S + beta[:, :, t, None, None] * kt[..., None] * (v[:, :, t] - stored)[..., None, :]
        out.append((q[:, :, t, :, None] * S).sum(-2))
    return (torch.stack(out, 2) if out else v.new_zeros(B, H, 0, v.shape[-1])), S
