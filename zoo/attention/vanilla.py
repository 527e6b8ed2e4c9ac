"""Vanilla softmax attention (Vaswani et al., 2017, "Attention is all you need") with the T x S score matrix
materialised in plain PyTorch: the paper's 1.0x reference for speed and memory.

This module also holds the small pieces the baseline modules share (:class:`ProjectedAttention` with the usual
W_q, W_k, W_v, W_o projections, :func:`masked_softmax`, :func:`segment_means`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import Attention, StreamingState


def masked_softmax(scores: torch.Tensor, allowed: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` restricted to ``allowed`` (broadcastable bool, True = keep).

    Rows with nothing allowed give all-zero weights (not NaN), in value and gradient.
    """
    if allowed is None:
        return torch.softmax(scores, dim=dim)
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=dim) * allowed.to(scores.dtype)


def segment_means(x: torch.Tensor, mask: torch.Tensor | None, num_segments: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Means of ``num_segments`` contiguous segments of the valid tokens' features (landmarks).

    x [B, H, T, d], mask [B, T] (True = real) or None. Position t belongs to segment floor(t * C / T) with
    C = min(num_segments, T), so segments differ in length by at most one and C = T gives the tokens themselves.
    Padded tokens are left out of the means. Returns means [B, H, C, d] and valid [B, C] (segment has a real token).
    """
    B, _, T, _ = x.shape
    C = min(num_segments, T)
    seg = torch.arange(T, device=x.device) * C // T  # [T]
    onehot = F.one_hot(seg, C).to(x.dtype)  # [T, C]
    w = onehot.expand(B, T, C) if mask is None else onehot * mask[:, :, None].to(x.dtype)  # [B, T, C]
    counts = w.sum(1)  # [B, C]
    means = torch.einsum("btc,bhtd->bhcd", w, x) / counts.clamp_min(1)[:, None, :, None]
    return means, counts > 0


class ProjectedAttention(Attention):
    """Multi-head attention with the standard projections W_q, W_k, W_v, W_o (each D x D)."""

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", bias: bool = True) -> None:
        super().__init__(embed_dim, num_heads, pattern)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, H, T, d]."""
        B, T, _ = t.shape
        return t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    def merge_heads(self, t: torch.Tensor) -> torch.Tensor:
        """[B, H, T, d] -> out_proj([B, T, D])."""
        B, H, T, d = t.shape
        return self.out_proj(t.transpose(1, 2).reshape(B, T, H * d))

    def qkv(self, x: torch.Tensor, context: torch.Tensor | None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries from x, keys/values from context (cross) or x: each [B, H, T or S, d]."""
        src = x if context is None else context
        return (self.split_heads(self.q_proj(x)), self.split_heads(self.k_proj(src)),
                self.split_heads(self.v_proj(src)))


@dataclass
class KVCache(StreamingState):
    """Streaming state of :class:`VanillaAttention`: all past keys and values [B, H, S, d]."""

    k: torch.Tensor
    v: torch.Tensor


@register_attention("vanilla")
class VanillaAttention(ProjectedAttention):
    """Plain softmax attention, score matrix materialised (the paper's 1.0x reference); KV-cache streaming.

    Streaming state: :class:`KVCache` of all past keys and values (grows with the sequence).
    """

    patterns = ("causal", "noncausal", "cross")
    streaming = True
    description = "softmax attention with the T x S score matrix materialised (plain PyTorch reference)"

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", bias: bool = True) -> None:
        super().__init__(embed_dim, num_heads, pattern, bias)

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        q, k, v = self.qkv(x, context)  # [B, H, T, d], [B, H, S, d]
        key_mask = context_mask if self.pattern == "cross" else padding_mask  # [B, S] or None
        offset = 0
        if state is not None:
            offset = state.k.shape[2]
            k, v = torch.cat([state.k, k], 2), torch.cat([state.v, v], 2)
        T, S = q.shape[2], k.shape[2]
        scores = (q @ k.transpose(-1, -2)) * self.head_dim ** -0.5  # [B, H, T, S]
        allowed = None if key_mask is None else key_mask[:, None, None, :]  # [B, 1, 1, S]
        if self.pattern == "causal":
            causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(offset)  # key s <= offset + t
            allowed = causal if allowed is None else allowed & causal
        y = self.merge_heads(masked_softmax(scores, allowed) @ v)
        return (y, KVCache(k, v)) if return_state else y
