"""What the attention mechanisms share: the compute dtype of sums and softmaxes, head split / merge, the standard
projections (:class:`ProjectedAttention`), a masked softmax, segment means (landmarks) and the one key/value cache
type (:class:`KVCache`).

Kernels shared by several mechanisms live in :mod:`lavo_zoo.attention.ops` (the sliding window); LAVO's package
(:mod:`lavo_zoo.attention.lavo`) keeps its own; everything else builds on these.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention.base import Attention


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for half/bf16/fp32 inputs, fp64 for fp64: the dtype of every sum and softmax (decided in Python:
    ``torch.promote_types`` is an operation dispatched like any other, which a decoding step counts)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def heads_major_empty(B: int, H: int, T: int, d: int, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised [B, H, T, d] tensor laid out as [B, T, H, d] in memory, so that merging the heads afterwards
    (``transpose(1, 2).reshape(B, T, H * d)``) is a view, not a copy. Not a view itself (autograd allows in-place
    ops on it when a custom Function returns it).

    Args:
        B: the batch size.
        H: the heads.
        T: the sequence length.
        d: the head dim.
        like: a tensor on the device wanted.
        dtype: the tensor's dtype.
    """
    return torch.empty_strided((B, H, T, d), (T * H * d, d, H * d, 1), dtype=dtype, device=like.device)


def split_heads(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, T, D] -> [B, H, T, d] (a view; call ``.contiguous()`` where a kernel needs it)."""
    return t.unflatten(-1, (num_heads, t.shape[-1] // num_heads)).transpose(1, 2)


def split_qkv(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v [B, H, T, d] as views of a fused projection qkv [B, T, 3D] (q, k, v side by side: strides
    (T 3D, d, 3D, 1))."""
    return qkv.unflatten(-1, (3, num_heads, qkv.shape[-1] // (3 * num_heads))).permute(2, 0, 3, 1, 4).unbind(0)


def merge_heads(t: torch.Tensor) -> torch.Tensor:
    """[B, H, T, d] -> [B, T, D] (no output projection: see :meth:`ProjectedAttention.output`)."""
    return t.transpose(1, 2).flatten(2)


def masked_softmax(scores: torch.Tensor, allowed: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` restricted to ``allowed`` (broadcastable bool, True = keep).

    Rows with nothing allowed give all-zero weights (not NaN), in value and gradient.
    """
    if allowed is None:
        return torch.softmax(scores, dim=dim)
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=dim) * allowed.to(scores.dtype)


def segment_means(x: torch.Tensor, mask: torch.Tensor | None, num_segments: int,
                  per_row: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Means of contiguous segments of each row's real tokens (landmarks), counted over the real tokens only, so that
    a padded row has the landmarks of the row alone wherever its padding is.

    Args:
        x: [B, H, T, d].
        mask: [B, T] bool, True = real (None: all real).
        num_segments: at most this many segments: C = min(num_segments, T) are returned.
        per_row: [B] int64, the segments of each row (<= C and <= its real tokens; default min(C, its real tokens)).

    Returns:
        (means [B, H, C, d], valid [B, C]). Row b's i-th real token of n belongs to segment floor(i * C_b / n) with
        C_b its segment count, so segments differ in length by at most one and C_b = n gives the tokens themselves;
        segments C_b.. are empty (invalid, zero means). Without a mask, position t belongs to segment floor(t C / T).
    """
    B, _, T, _ = x.shape
    C = min(num_segments, T)
    if mask is None and per_row is None:
        onehot = F.one_hot(torch.arange(T, device=x.device) * C // T, C).to(x.dtype)  # [T, C]
        w = onehot.expand(B, T, C)
    else:
        real = torch.ones(B, T, dtype=torch.long, device=x.device) if mask is None else mask.long()  # [B, T]
        rank = (real.cumsum(1) - 1).clamp_min(0)  # [B, T] each real token's index among its row's real tokens
        n = real.sum(1, keepdim=True)  # [B, 1]
        rows = n.clamp(max=C) if per_row is None else per_row.to(n)[:, None]  # [B, 1]
        seg = (rank * rows).div(n.clamp_min(1), rounding_mode="floor").clamp(max=C - 1)  # [B, T]
        w = F.one_hot(seg, C).to(x.dtype) * real[:, :, None].to(x.dtype)  # [B, T, C]
    counts = w.sum(1)  # [B, C]
    means = torch.einsum("btc,bhtd->bhcd", w, x) / counts.clamp_min(1)[:, None, :, None]
    return means, counts > 0


@dataclass
class KVCache:
    """Streaming state of a softmax attention: past keys and values and the number of tokens consumed.

    ``sdpa`` and ``vanilla`` keep every past key (the cache grows with the sequence); ``local`` keeps the last w-1
    (constant size). ``reorder(index)`` selects / repeats batch rows, as beam search needs.
    """

    keys: torch.Tensor    # [B, H, S, d]
    values: torch.Tensor  # [B, H, S, d]
    position: int = 0     # tokens consumed so far (S when nothing was dropped)
    key_mask: torch.Tensor | None = None  # [B, S] bool: a cross-attention cache of a padded source

    def reorder(self, index: torch.Tensor) -> KVCache:
        """The cache of batch rows ``index`` [B'] (long): row i of the result is row index[i] of this one."""
        return KVCache(self.keys.index_select(0, index), self.values.index_select(0, index), self.position,
                       None if self.key_mask is None else self.key_mask.index_select(0, index))

    def detach(self) -> KVCache:
        """The same cache cut from the autograd graph."""
        return KVCache(self.keys.detach(), self.values.detach(), self.position, self.key_mask)

    def check(self, x: torch.Tensor, num_heads: int) -> None:
        """Refuse a cache from another batch size or layer shape than the input ``x`` [B, T, D]."""
        if self.keys.shape[:2] != (x.shape[0], num_heads):
            raise ValueError(f"state is for batch/heads {list(self.keys.shape[:2])}, input has batch {x.shape[0]} "
                             f"and {num_heads} heads")


def check_cache(state: object, x: torch.Tensor, num_heads: int) -> KVCache:
    """``state`` if it is a :class:`KVCache` matching ``x`` [B, T, D]; a TypeError / ValueError otherwise."""
    if not isinstance(state, KVCache):
        raise TypeError(f"state must be the KVCache returned by this attention, got {type(state).__name__}")
    state.check(x, num_heads)
    return state


class ProjectedAttention(Attention):
    """Multi-head attention with the standard projections W_q, W_k, W_v, W_o (each D x D)."""

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", bias: bool = True) -> None:
        """The contract's arguments (:class:`~lavo_zoo.attention.base.Attention`) and ``bias``: biases in the four
        projections."""
        super().__init__(embed_dim, num_heads, pattern)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, H, T, d]."""
        return split_heads(t, self.num_heads)

    def output(self, t: torch.Tensor) -> torch.Tensor:
        """The heads' outputs [B, H, T, d] merged and projected: out_proj([B, T, D])."""
        return self.out_proj(merge_heads(t))

    def qkv(self, x: torch.Tensor, context: torch.Tensor | None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries from x, keys/values from context (cross) or x: each [B, H, T or S, d]."""
        src = x if context is None else context
        return (self.split_heads(self.q_proj(x)), self.split_heads(self.k_proj(src)),
                self.split_heads(self.v_proj(src)))
