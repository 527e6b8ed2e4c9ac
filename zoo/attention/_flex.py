"""CUDA fused sliding window: ``flex_attention`` with a sliding-window block mask and a ``score_mod`` for the
relative bias, compiled once. :func:`lavo_zoo.attention._blocked.window_attention` uses it on CUDA for chunks of at
least ``MIN_QUERIES`` queries without attention dropout; ``LAVO_ZOO_FLEX=0`` turns it off (blocked path everywhere).

Status: the mask and bias logic is tested against the blocked path on CPU (flex_attention's eager forward); the
compiled CUDA kernel and its backward have only been exercised where a GPU was available, not in CPU-only CI.
"""
from __future__ import annotations

import functools
import os

import torch

MIN_QUERIES = 256  # shorter chunks (decoding) stay on the blocked path: no recompiles for every tiny shape


def enabled(q: torch.Tensor, dropout: float, training: bool) -> bool:
    """Whether window_attention should take the fused path for these queries."""
    return (q.is_cuda and q.shape[2] >= MIN_QUERIES and not (dropout and training)
            and os.environ.get("LAVO_ZOO_FLEX", "1") != "0")


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention
    return torch.compile(flex_attention, dynamic=False)


def flex_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                          bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                          compiled: bool = True) -> torch.Tensor:
    """Same contract as ``window_attention`` (q [B, H, Tq, d], k/v [B, H, P+Tq, d]); returns [B, H, Tq, d] in q's
    dtype (softmax in fp32 inside the kernel). Rows with no real key give zeros."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, _, Tq, _ = q.shape
    Tk, w = k.shape[2], window
    P = Tk - Tq

    def mask_mod(b, h, qi, kv):
        t = qi + P
        ok = (kv > t - w) & ((kv <= t) if causal else (kv < t + w))
        return ok & key_mask[b, kv] if key_mask is not None else ok

    def score_mod(score, b, h, qi, kv):
        return score + bias[h, (kv - qi - P + w - 1).clamp(0, 2 * w - 2)].to(score.dtype)

    block_mask = create_block_mask(mask_mod, B if key_mask is not None else None, None, Tq, Tk, device=q.device)
    fn = _compiled_flex() if compiled else flex_attention
    return fn(q, k, v, score_mod=score_mod if bias is not None else None, block_mask=block_mask)
