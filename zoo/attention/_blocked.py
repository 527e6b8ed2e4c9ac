"""Exact sliding-window softmax attention, computed blockwise: the w queries of block j against the keys of blocks
j-1 and j (causal) or j-1, j and j+1 (noncausal). No T x T tensor and no gather of a T x w x d tensor; scores and
softmax in fp32 (or the input's wider dtype). Shared by LAVO's local branch and the ``local`` baseline.

Window of query t: causal keys s in [t-w+1, t]; noncausal keys s in [t-w+1, t+w-1]. The optional relative bias
``bias[h, s - t + w - 1]`` (shape [H, 2w-1]) is LAVO's embedded position encoding.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lavo_zoo.attention import _flex


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for half/bf16/fp32 inputs, fp64 for fp64: the dtype of every sum and softmax."""
    return torch.promote_types(dtype, torch.float32)


def _blocks(t: torch.Tensor, w: int, n: int, num: int) -> torch.Tensor:
    """[..., L, c] padded so that L = (n + num - 1) * w  ->  [..., n, num * w, c]: block j sees blocks j..j+num-1."""
    b = t.unflatten(-2, (n + num - 1, w))  # [..., n+num-1, w, c]
    return torch.cat([b[..., i:i + n, :, :] for i in range(num)], dim=-2)


def pad_time(t: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Zero-pad the time axis (-2) of t; no copy when there is nothing to pad."""
    return t if before == after == 0 else F.pad(t, (0, 0, before, after))


def last_positions(prefix: torch.Tensor | None, t: torch.Tensor, window: int) -> torch.Tensor:
    """The last min(w-1, P+T) time steps of cat(prefix, t) as a fresh small tensor: the streaming ring of keys or
    values (prefix [B, H, P, d] or None, t [B, H, T, d])."""
    keep = window - 1
    tail = torch.cat(([prefix] if prefix is not None else []) + [t[:, :, max(0, t.shape[2] - keep):]], 2)
    return tail[:, :, max(0, tail.shape[2] - keep):].clone()


def _pad_cat(prefix: torch.Tensor | None, t: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """[zeros(before), prefix, t, zeros(after)] along time, in one copy."""
    zeros = t.new_zeros(*t.shape[:2], before + after, t.shape[3])
    middle = [prefix.to(t.dtype), t] if prefix is not None else [t]
    return torch.cat([zeros[:, :, :before], *middle, zeros[:, :, before:]], 2)


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                     bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                     prefix: tuple[torch.Tensor, torch.Tensor] | None = None,
                     dropout: float = 0.0, training: bool = False) -> torch.Tensor:
    """Exact sliding-window attention; returns ``[B, H, T, d]`` in :func:`compute_dtype`.

    q, k, v [B, H, T, d]; key_mask [B, T] bool (True = real key). ``prefix`` = (keys, values) [B, H, P, d], P < w:
    the previous chunk's last keys and values (causal streaming; no key_mask then), sitting before position 0.
    A query whose window holds no real key (only possible for padded queries) gets finite garbage, never NaN.
    On CUDA, long chunks go through the fused flex_attention kernel of :mod:`lavo_zoo.attention._flex`.
    """
    ct = compute_dtype(q.dtype)
    if prefix is not None and (not causal or key_mask is not None):
        raise ValueError("window_attention: a key prefix needs causal=True and no key_mask")
    if _flex.enabled(q, dropout, training):
        fk, fv = (torch.cat([prefix[0], k], 2), torch.cat([prefix[1], v], 2)) if prefix is not None else (k, v)
        out = _flex.flex_window_attention(q, fk, fv, window, causal=causal, bias=bias, key_mask=key_mask)
        if out is not None:  # None: the kernel cannot be compiled on this device (warned once); blocked path below
            return out.to(ct)
    B, _, Tq, d = q.shape
    w = window
    P = 0 if prefix is None else prefix[0].shape[2]
    Tk = P + Tq
    n = math.ceil(Tk / w)
    end = n * w - Tk
    after = end + (0 if causal else w)
    num = 2 if causal else 3
    qb = pad_time(q.to(ct), P, end).unflatten(2, (n, w))               # [B, H, n, w, d]
    past_k, past_v = prefix if prefix is not None else (None, None)
    kb = _blocks(_pad_cat(past_k, k.to(ct), w, after), w, n, num)     # [B, H, n, K, d], K = num * w
    vb = _blocks(_pad_cat(past_v, v.to(ct), w, after), w, n, num)     # [B, H, n, K, d]
    real = torch.ones(B, Tk, dtype=torch.bool, device=q.device) if key_mask is None else key_mask
    real = _blocks(F.pad(real, (w, after))[..., None], w, n, num)[..., 0]  # [B, n, K]
    K = num * w
    rel = (torch.arange(K, device=q.device) - w)[None, :] - torch.arange(w, device=q.device)[:, None]  # [w, K]: s-t
    in_window = (rel > -w) & ((rel <= 0) if causal else (rel < w))                                    # [w, K]
    allowed = in_window[None, None] & real[:, :, None, :]                                             # [B, n, w, K]
    scores = (qb @ kb.transpose(-1, -2)) * d ** -0.5                                                  # [B, H, n, w, K]
    if bias is not None:
        scores = scores + bias.to(ct)[:, (rel + w - 1).clamp(0, 2 * w - 2)][None, :, None]           # [1, H, 1, w, K]
    scores = scores.masked_fill(~allowed[:, None], torch.finfo(ct).min)
    p = torch.softmax(scores, dim=-1)
    if dropout and training:
        p = F.dropout(p, dropout, training=True)
    out = (p @ vb).flatten(2, 3)                                                                      # [B, H, n*w, d]
    return out[:, :, P:P + Tq]
