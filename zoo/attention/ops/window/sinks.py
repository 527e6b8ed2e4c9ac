"""Sliding-window softmax attention with attention sinks (Xiao et al., ICLR 2024, "Efficient streaming language
models with attention sinks", StreamingLLM): every query also sees the first ``num_sinks`` tokens of the sequence,
wherever its window is. Exact: one softmax over the union of the window's keys and the sink keys outside it (a
sink inside the window counts once), computed in blocks of queries (no T x T matrix), differentiated by autograd.

Positions are explicit, so the same function serves a whole sequence and a streamed chunk: the queries sit at
``q_start`` + i, the window keys at ``k_start`` + j, the sinks at 0 .. S - 1. A relative bias, where the mechanism has
one, applies to the window's keys (it is indexed by the offset inside the window); sinks outside the window score
without it. The dense reference is :func:`naive_sink_window`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lavo_zoo.attention.common import compute_dtype

BLOCK = 64  # queries per block: temporaries ~ B * H * BLOCK * (BLOCK + 2w + sinks) numbers


def sink_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                          sink_k: torch.Tensor, sink_v: torch.Tensor, sink_real: torch.Tensor | None = None,
                          key_real: torch.Tensor | None = None, q_start: int = 0, k_start: int = 0,
                          bias: torch.Tensor | None = None, dropout: float = 0.0, training: bool = False
                          ) -> torch.Tensor:
    """Window-plus-sinks attention.

    Args:
        q: queries [B, H, T, d] at positions q_start + i.
        k: the window's keys [B, H, L, d] at positions k_start + j (every key a query's window needs).
        v: the window's values [B, H, L, d], as ``k``.
        window: w, keys per causal window ([t-w+1, t]; noncausal [t-w+1, t+w-1]).
        causal: whether a query sees only keys at or before it (sinks included).
        sink_k: the sinks' keys [B, H, S, d] at positions 0 .. S - 1.
        sink_v: the sinks' values [B, H, S, d].
        sink_real: [B, S] bool, False for a sink a short row does not have (None: all real).
        key_real: [B, L] bool, False for padded window keys (None: all real).
        bias: [H, 2w-1] relative bias of the window's keys, or None.
        q_start: the position of the first query.
        k_start: the position of the first window key.
        dropout: attention dropout p on the probabilities (in training only).
        training: whether the call is in training (False: no dropout).

    Returns:
        [B, H, T, d] in the compute dtype.
    """
    ct = compute_dtype(q.dtype)
    q, k, v, sink_k, sink_v = (t.to(ct) for t in (q, k, v, sink_k, sink_v))
    B, H, T, d = q.shape
    L, S, w = k.shape[2], sink_k.shape[2], window
    dev = q.device
    spos = torch.arange(S, device=dev)
    outs = []
    for i0 in range(0, T, BLOCK):
        i1 = min(T, i0 + BLOCK)
        tpos = q_start + torch.arange(i0, i1, device=dev)                                   # [c]
        lo = max(0, q_start + i0 - w + 1 - k_start)
        hi = min(L, q_start + i1 - k_start + (0 if causal else w - 1))
        kb, vb = k[:, :, lo:hi], v[:, :, lo:hi]
        rel = (k_start + torch.arange(lo, hi, device=dev))[None, :] - tpos[:, None]       # [c, span] s - t
        in_window = (rel > -w) & ((rel <= 0) if causal else (rel < w))
        allowed = in_window[None] if key_real is None else in_window[None] & key_real[:, None, lo:hi]  # [B|1, c, s]
        scores = (q[:, :, i0:i1] @ kb.transpose(-1, -2)) * d ** -0.5                       # [B, H, c, span]
        if bias is not None:
            scores = scores + bias.to(ct)[:, (rel + w - 1).clamp(0, 2 * w - 2)][None]
        srel = spos[None, :] - tpos[:, None]                                                  # [c, S]
        sink_ok = ~((srel > -w) & ((srel <= 0) if causal else (srel < w)))                    # outside the window
        if causal:
            sink_ok = sink_ok & (srel <= 0)
        sink_allowed = sink_ok[None] if sink_real is None else sink_ok[None] & sink_real[:, None, :]
        sink_scores = (q[:, :, i0:i1] @ sink_k.transpose(-1, -2)) * d ** -0.5              # [B, H, c, S]
        allowed = torch.cat([allowed.expand(B, -1, -1), sink_allowed.expand(B, -1, -1)], -1)[:, None]
        logits = torch.cat([scores, sink_scores], -1).masked_fill(~allowed, torch.finfo(ct).min)
        p = torch.softmax(logits, -1) * allowed                                               # no key: zeros
        if dropout and training:
            p = F.dropout(p, dropout, training=True)
        outs.append(p[..., :hi - lo] @ vb + p[..., hi - lo:] @ sink_v)
    return torch.cat(outs, 2) if outs else q.new_zeros(B, H, 0, v.shape[-1])


def naive_sink_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, num_sinks: int, causal: bool,
                      bias: torch.Tensor | None = None) -> torch.Tensor:
    """Dense reference, one sequence without padding: q, k, v [B, H, T, d]; key s is visible to query t when it is
    in t's window or s < num_sinks (and s <= t causally); the relative bias inside the window only. Tests only.

    Args:
        q: [B, H, T, d] queries.
        k: [B, H, T, d] keys.
        v: [B, H, T, d] values.
        window: w.
        num_sinks: the first tokens every query sees.
        causal: keys [t-w+1, t] (True) or [t-w+1, t+w-1] in the window.
        bias: [H, 2w - 1] relative bias of the window's keys, or None.
    """
    T, w = q.shape[2], window
    t = torch.arange(T)[:, None]
    s = torch.arange(T)[None, :]
    in_window = (s > t - w) & ((s <= t) if causal else (s < t + w))
    allowed = in_window | ((s < num_sinks) & ((s <= t) if causal else torch.ones_like(in_window)))
    scores = q.double() @ k.double().transpose(-1, -2) / q.shape[-1] ** 0.5
    if bias is not None:
        rel = (s - t + w - 1).clamp(0, 2 * w - 2)
        scores = scores + bias.double()[:, rel] * in_window
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v.double()
