"""LAVO's memory rows in PyTorch: the mean features each query reads (docs/lavo.md), and the streaming state's part
that carries them across chunks. :func:`dissected_memory` (causal with context dissection: window j reads the mean
features of the complete windows before it, from the per-window sums of :func:`window_sums` and their prefix sum),
:func:`running_memory` (causal without: token t reads the running mean of features 0..t), :func:`mean_memory`
(noncausal and cross attention: one mean per sequence). The op (``ops.py``) reads them; the Triton kernels of
``triton_memory.py`` compute the first and the last on the GPU path, and ``fused.py``'s PyTorch form uses these.
Sums and counts run in the compute dtype (fp32, fp64 for fp64 inputs) whatever the features' dtype: a sum reads half
features and accumulates in fp32 without a cast copy.

Each function also builds the binding memory (``weights`` given; docs/lavo.md, "The binding memory"): token t's item
is then the [r, d] matrix c_t f_t^T, where c_t = B k_t ([B, H, T, r], the weights) are its key's projections on the
r bases and f_t its features, so that a memory row is an [r, d] matrix (per basis, the mean of the features weighted
by the keys' projections on it) where the paper's is a [d] mean. The tokens, windows and counts are the same; the
rows, the sums and the state gain the r axis.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from lavo_zoo.attention.common import compute_dtype


class MemoryState(NamedTuple):
    """The memory's part of the causal streaming state (constant size)."""

    sum_complete: torch.Tensor  # [B, H, d] compute dtype: features summed over complete windows (all tokens w/o cd);
    #                             the binding memory's [B, H, r, d]: the items c_t f_t^T summed
    sum_partial: torch.Tensor   # [B, H, d] or [B, H, r, d]: ... over the current, incomplete window (zeros w/o cd)
    position: int               # tokens consumed so far


def _per_row(count: torch.Tensor, item: tuple[int, ...]) -> torch.Tensor:
    """count [B, 1, n] viewed against memory rows [B, H, n, *item] ([d], or [r, d] for the binding memory)."""
    return count.view(*count.shape, *[1] * len(item))


def window_sums(feats: torch.Tensor, a: int, w: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Sums of feats [B, H, T, d] over windows of w time steps, the first window starting a steps before position 0
    (its first a steps and the last window's tail count as zeros): [B, H, ceil((a + T) / w), d] in the compute
    dtype. The whole windows are summed through a view, so no padded (or cast) copy of feats is made. With
    ``weights`` [B, H, T, r] (the binding memory), the sums of the items weights_t feats_t^T: [B, H, n, r, d], one
    [r, w] x [w, d] product per window (padded copies of both).

    Args:
        feats: [B, H, T, d] the features (zero at padded positions).
        a: steps of the first window before position 0, 0 <= a < w (a streaming chunk's position in its window).
        w: the window.
        weights: [B, H, T, r] the binding memory's key projections, or None (the paper's memory).
    """
    T, ct = feats.shape[2], compute_dtype(feats.dtype)
    if weights is not None:
        n = math.ceil((a + T) / w)
        pad = (0, 0, a, n * w - a - T)
        c = F.pad(weights.to(ct), pad).unflatten(2, (n, w))                     # [B, H, n, w, r]
        f = F.pad(feats.to(ct), pad).unflatten(2, (n, w))                       # [B, H, n, w, d]
        return c.mT @ f                                                          # [B, H, n, r, d]
    head = min(T, (w - a) % w)                                    # steps that finish the first, partial window
    whole = (T - head) // w * w
    parts = [feats[:, :, :head].sum(2, keepdim=True, dtype=ct)] if head else []
    parts.append(feats[:, :, head:head + whole].unflatten(2, (whole // w, w)).sum(3, dtype=ct))
    if head + whole < T:
        parts.append(feats[:, :, head + whole:].sum(2, keepdim=True, dtype=ct))
    return torch.cat(parts, 2)


def mean_memory(feats: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """One memory per sequence (noncausal and cross attention): the mean of feats [B, H, T, d] (zero at padded
    positions) over the valid [B, 1, T] positions (1 real, 0 padded); [B, H, 1, d] (zeros where nothing is real).
    With ``weights`` [B, H, T, r] (the binding memory): the mean of the items weights_t feats_t^T, [B, H, 1, r, d]."""
    count = valid.sum(-1).clamp(min=1)[..., None, None]                         # [B, 1, 1, 1]
    if weights is None:
        return feats.sum(2, keepdim=True, dtype=compute_dtype(feats.dtype)) / count
    ct = compute_dtype(feats.dtype)
    return (weights.to(ct).mT @ feats.to(ct)).unsqueeze(2) / count[..., None]   # [B, H, 1, r, d]


def dissected_memory(feats: torch.Tensor, valid: torch.Tensor, window: int, state: MemoryState | None = None,
                     weights: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Context dissection: window j reads the mean features of the complete windows before it (cumulative sums over
    windows, O(T d)).

    Args:
        feats: [B, H, T, d] features, zero at padded positions; the chunk starts at ``state.position``.
        valid: [B, 1, T] 1 for real positions, 0 for padded ones.
        window: w.
        state: the memory state before the chunk, or None (the sequence starts here).
        weights: the binding memory's [B, H, T, r] key projections on the bases, or None (the paper's memory).

    Returns:
        mem [B, H, n, d] (the binding memory's [B, H, n, r, d]), the memory rows (query t reads row (a + t) // w,
        a = position % w: :func:`read`'s offset and group); empty [B, 1, T, 1] bool, where the memory has no real
        token; the (sum_complete, sum_partial) after the chunk (views of per-window tensors).
    """
    B, H, T, _ = feats.shape
    w, ct = window, compute_dtype(feats.dtype)
    pos = state.position if state is not None else 0
    a = pos % w                                   # the chunk starts a tokens into its first window
    n = math.ceil((a + T) / w)
    end = n * w - a - T
    sums = window_sums(feats, a, w, weights)                                    # [B, H, n, *item] per window
    item = tuple(sums.shape[3:])                                                # (d,) or (r, d)
    counts = F.pad(valid, (a, end)).unflatten(2, (n, w)).sum(3)                # [B, 1, n]
    prev = torch.zeros(B, H, *item, dtype=ct, device=feats.device) if state is None else state.sum_complete
    if state is not None:
        sums = torch.cat([sums[:, :, :1] + state.sum_partial[:, :, None], sums[:, :, 1:]], 2)
        counts = torch.cat([counts[..., :1] + a, counts[..., 1:]], -1)
    before_pad = (0, 0) * len(item) + (1, 0)                                    # one zero row in front, on dim 2
    before = prev[:, :, None] + F.pad(sums.cumsum(2), before_pad)[:, :, :-1]   # [B, H, n, *item] windows < j
    count = (pos - a) + F.pad(counts.cumsum(-1), (1, 0))[..., :-1]              # [B, 1, n]
    mem = before / _per_row(count.clamp(min=1), item)                           # [B, H, n, *item]
    empty = (count == 0)[..., None].expand(B, 1, n, w).flatten(2)[:, :, a:a + T, None]  # [B, 1, T, 1]
    if (pos + T) % w == 0:
        return mem, empty, (before[:, :, -1] + sums[:, :, -1], torch.zeros_like(prev))
    return mem, empty, (before[:, :, -1], sums[:, :, -1])


def running_memory(feats: torch.Tensor, valid: torch.Tensor, state: MemoryState | None = None,
                   weights: torch.Tensor | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Without context dissection (paper eq. 4): token t reads the running mean of features 0..t.

    Args:
        feats: [B, H, T, d] features, zero at padded positions.
        valid: [B, 1, T] 1 real, 0 padded.
        state: the memory state before the chunk (its ``sum_complete`` is the running sum), or None.
        weights: the binding memory's [B, H, T, r] key projections on the bases, or None (the paper's memory).

    Returns:
        mem [B, H, T, d], one row per token (this ablation's memory is one more [T, d] tensor than dissection's; the
        binding memory's [B, H, T, r, d], r times more); the (running sum, zeros) after the chunk (the sum a view of
        the per-token tensor).
    """
    ct = compute_dtype(feats.dtype)
    items = feats if weights is None else weights.to(ct)[..., :, None] * feats.to(ct)[..., None, :]  # [.., T, *item]
    item = tuple(items.shape[3:])                                               # (d,) or (r, d)
    B, H = feats.shape[:2]
    prev = torch.zeros(B, H, *item, dtype=ct, device=feats.device) if state is None else state.sum_complete
    cum = prev[:, :, None] + items.cumsum(2, dtype=ct)                          # [B, H, T, *item] inclusive sums
    count = (state.position if state is not None else 0) + valid.cumsum(-1)     # [B, 1, T]
    return cum / _per_row(count.clamp(min=1), item), (cum[:, :, -1], torch.zeros_like(prev))
