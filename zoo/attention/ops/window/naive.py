"""The sliding window's slow, obviously-correct form, used only by tests: dense T x T score matrices with explicit
masks (O(T^2)), in float64. ``local`` and LAVO's local branch build their references on :func:`local_window`.
"""
from __future__ import annotations

import torch

from lavo_zoo.attention.base import Attention
from lavo_zoo.attention.ops.naive import key_mask_4d


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias, over allowed keys) v. allowed [B, 1, Tq, Tk] bool; bias [H, Tq, Tk].

    Rows with no allowed key (padded queries only) get uniform weights; callers zero those rows.

    Args:
        q: [B, H, Tq, d] queries.
        k: [B, H, Tk, d] keys.
        v: [B, H, Tk, d] values.
        allowed: [B, 1, Tq, Tk] bool, the keys each query may see.
        bias: [H, Tq, Tk] added to the scaled scores, or None.
    """
    q, k, v = q.double(), k.double(), v.double()
    a = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5            # [B, H, Tq, Tk]
    if bias is not None:
        a = a + bias.double()
    a = a.masked_fill(~allowed, torch.finfo(a.dtype).min)
    return torch.softmax(a, -1) @ v


def window_mask(T: int, w: int, causal: bool) -> torch.Tensor:
    """[T, T] bool: key s is in query t's window ([t-w+1, t] causal, [t-w+1, t+w-1] noncausal)."""
    t = torch.arange(T)[:, None]
    s = torch.arange(T)[None, :]
    return (s > t - w) & ((s <= t) if causal else (s < t + w))


def relative_bias(table: torch.Tensor, T: int, w: int) -> torch.Tensor:
    """[H, 2w-1] table -> [H, T, T] with entry [h, t, s] = table[h, s - t + w - 1] (0 outside the window)."""
    out = torch.zeros(table.shape[0], T, T, dtype=table.dtype)
    for t in range(T):
        for s in range(max(0, t - w + 1), min(T, t + w)):
            out[:, t, s] = table[:, s - t + w - 1]
    return out


def local_window(attn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor | None,
                 padding_mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """Exact w-key window attention with a dense [T, T] mask and optional relative-bias table.

    Args:
        attn: the module (its ``window_size``).
        q: [B, H, T, d] queries.
        k: [B, H, T, d] keys.
        v: [B, H, T, d] values.
        table: the [H, 2w - 1] relative-bias table, or None.
        padding_mask: [B, T] bool, True = real token, or None.
        causal: keys [t-w+1, t] (True) or [t-w+1, t+w-1].
    """
    B, _, T, _ = q.shape
    w = attn.window_size
    allowed = window_mask(T, w, causal)[None, None] & key_mask_4d(padding_mask, B, T)
    return dense_attention(q, k, v, allowed, None if table is None else relative_bias(table, T, w))
