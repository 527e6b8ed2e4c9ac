"""The loop and dense pieces that the mechanisms' slow references share (tests only; never registered).

Each mechanism's reference is the function ``naive`` beside it, in its own module (LAVO's in
:mod:`lavo_zoo.attention.lavo.naive`; the sliding window's dense form in :mod:`lavo_zoo.attention.ops.window.naive`).
A reference takes a built module (to share its parameters) and the same inputs as ``module(...)`` and computes the
output from the mechanism's defining formula: quadratic forms, per-query loops, the recurrence. Use float64.

The arguments of every reference ``naive(m, x, padding_mask=None, context=None, context_mask=None)``, stated here
once (the contract's inputs, as :meth:`~lavo_zoo.attention.base.Attention.forward` states them); it returns the
output [B, T, D]:

    m: the built module whose parameters the reference shares (float64, eval mode).
    x: the queries' sequence [B, T, D].
    padding_mask: [B, T] bool, True = a real token, or None (all real).
    context: cross: the source [B, S, D]; None for the other patterns.
    context_mask: cross: [B, S] bool, True = a real source token, or None (all real).
"""
from __future__ import annotations

import torch


def heads(m, t: torch.Tensor) -> torch.Tensor:
    """t [B, T, D] split into module m's heads: [B, H, T, d]."""
    B, T, _ = t.shape
    return t.view(B, T, m.num_heads, m.head_dim).transpose(1, 2)  # [B, H, T, d]


def qkv(m, x: torch.Tensor, context: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Module m's queries from x [B, T, D], keys and values from context [B, S, D] (cross) or x: [B, H, T or S, d]
    each."""
    src = x if context is None else context
    return heads(m, m.q_proj(x)), heads(m, m.k_proj(src)), heads(m, m.v_proj(src))


def merge(m, o: torch.Tensor, padding_mask: torch.Tensor | None = None, dtype: torch.dtype | None = None
          ) -> torch.Tensor:
    """out_proj of the merged heads o [B, H, T, d]; padded query rows zeroed first when ``padding_mask`` is given,
    cast to ``dtype`` when given.

    Args:
        m: the module (its ``out_proj``).
        o: [B, H, T, d] the heads' outputs.
        padding_mask: [B, T] bool, True = real query, or None.
        dtype: the dtype the projection takes, or None (o's).
    """
    if padding_mask is not None:
        o = o * padding_mask[:, None, :, None]
    B, H, T, d = o.shape
    o = o.transpose(1, 2).reshape(B, T, H * d)
    return m.out_proj(o if dtype is None else o.to(dtype))


def ones(B: int, T: int) -> torch.Tensor:
    """A [B, T] mask with every token real."""
    return torch.ones(B, T, dtype=torch.bool)


def key_mask_4d(mask: torch.Tensor | None, B: int, T: int) -> torch.Tensor:
    """[B, T] key mask (None: every key real) -> [B, 1, 1, T], broadcastable over heads and queries."""
    return (ones(B, T) if mask is None else mask)[:, None, None, :]


def allowed_keys(m, t: int, S: int, key_mask_b: torch.Tensor) -> list[int]:
    """Indices of keys query t may see (causal: s <= t).

    Args:
        m: the module (its pattern).
        t: the query's position.
        S: the keys.
        key_mask_b: [S] bool, one row's key mask (True = real).
    """
    return [s for s in range(S) if bool(key_mask_b[s]) and (m.pattern != "causal" or s <= t)]


def segments(T: int, C: int) -> list[list[int]]:
    """The positions 0..T-1 split into min(C, T) contiguous segments as even as they come (t goes to t C // T)."""
    C = min(C, T)
    return [[t for t in range(T) if t * C // T == c] for c in range(C)]


def seg_means(x: torch.Tensor, mask_b: torch.Tensor, C: int) -> tuple[torch.Tensor, list[bool]]:
    """x [T, d] of one sequence/head -> the means [C', d] of C' = min(C, n) contiguous segments of its n real tokens
    (the i-th real token in segment floor(i C' / n)), and their validity (all True)."""
    real = [t for t in range(x.shape[0]) if bool(mask_b[t])]
    rows = [x[[real[i] for i in seg]].mean(0) for seg in segments(len(real), C)]
    return (torch.stack(rows) if rows else x.new_zeros(0, x.shape[1])), [True] * len(rows)


def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None = None,
                      causal: bool = False) -> torch.Tensor:
    """Per-query loop softmax attention: q [B,H,T,d], k, v [B,H,S,d] -> [B,H,T,d] (scale d^-1/2).

    Args:
        q: [B, H, T, d] queries.
        k: [B, H, S, d] keys.
        v: [B, H, S, d] values.
        key_mask: [B, S] bool, True = real key, or None.
        causal: query t sees keys s <= t only.
    """
    B, _, T, d = q.shape
    S = k.shape[2]
    out = torch.zeros_like(q)
    for b in range(B):
        for t in range(T):
            idx = [s for s in range(S) if (key_mask is None or bool(key_mask[b, s])) and (not causal or s <= t)]
            if idx:
                p = torch.softmax(q[b, :, t, None, :] @ k[b, :, idx].transpose(-1, -2) * d ** -0.5, -1)  # [H,1,n]
                out[b, :, t] = (p @ v[b, :, idx])[:, 0]
    return out
