"""The gated delta rule token by token (the reference of :mod:`lavo_zoo.attention.ops.delta_rule`), as its papers
state it: the state decays, S <- D_t S (D_t = diag(exp(g_t)), one decay per head or per key channel); what it holds
at the erase direction e_t = b_t . k_t is removed and w_t . v_t written at k_t,
S <- S + k_t (w_t . v_t - S^T e_t)^T (DeltaNet: b_t = w_t = beta_t, one per head: the value stored under k_t moved
towards v_t by beta_t); o_t = S^T q_t. Tests only; use float64."""
from __future__ import annotations

import torch


def naive_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                     g: torch.Tensor | None = None, state: torch.Tensor | None = None,
                     write: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k [B, H, T, K], v [B, H, T, V], beta [B, H, T] / [B, H, T, K], g [B, H, T] / [B, H, T, K] / None,
    state [B, H, K, V], write [B, H, T, V] / None (beta, per head) -> (o [B, H, T, V], state).

    Its arguments are stated on `lavo_zoo.attention.ops.delta_rule.chunk.chunk_delta_rule`, the form it checks.
    """
    B, H, T, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1]) if state is None else state
    out = []
    for t in range(T):
        if g is not None:
            a = g[:, :, t].exp()
            S = S * (a[..., None, None] if a.dim() == 2 else a[..., None])
        kt, bt = k[:, :, t], beta[:, :, t]
        erase = kt * (bt[..., None] if bt.dim() == 2 else bt)                          # [B, H, K]
        written = v[:, :, t] * (bt[..., None] if write is None else write[:, :, t])    # [B, H, V]
        held = (erase[..., None] * S).sum(-2)                                           # S^T e [B, H, V]
        S = S + kt[..., None] * (written - held)[..., None, :]
        out.append((q[:, :, t, :, None] * S).sum(-2))
    return (torch.stack(out, 2) if out else v.new_zeros(B, H, 0, v.shape[-1])), S
