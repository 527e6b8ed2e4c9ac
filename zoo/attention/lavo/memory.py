"""LAVO's memory rows in PyTorch: the mean features each query reads (docs/lavo.md), and the streaming state's part
that carries them across chunks. :func:`dissected_memory` (causal with context dissection: window j reads the mean
features of the complete windows before it, from the per-window sums of :func:`window_sums` and their prefix sum),
:func:`running_memory` (causal without: token t reads the running mean of features 0..t), :func:`mean_memory`
(noncausal and cross attention: one mean per sequence). The op (``ops.py``) reads them; the Triton kernels of
``triton_memory.py`` compute the first and the last on the GPU path, and ``fused.py``'s PyTorch form uses these.
Sums and counts run in the compute dtype (fp32, fp64 for fp64 inputs) whatever the features' dtype: a sum reads half
features and accumulates in fp32 without a cast copy.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from lavo_zoo.attention.common import compute_dtype


class MemoryState(NamedTuple):
    """The memory's part of the causal streaming state (constant size)."""

    sum_complete: torch.Tensor  # [B, H, d] compute dtype: features summed over complete windows (all tokens w/o cd)
    sum_partial: torch.Tensor   # [B, H, d] ... over the current, incomplete window (zeros without context dissection)
    position: int               # tokens consumed so far


def window_sums(feats: torch.Tensor, a: int, w: int) -> torch.Tensor:
    """Sums of feats [B, H, T, d] over windows of w time steps, the first window starting a steps before position 0
    (its first a steps and the last window's tail count as zeros): [B, H, ceil((a + T) / w), d] in the compute
    dtype. The whole windows are summed through a view, so no padded (or cast) copy of feats is made."""
    T, ct = feats.shape[2], compute_dtype(feats.dtype)
    head = min(T, (w - a) % w)                                    # steps that finish the first, partial window
    whole = (T - head) // w * w
    parts = [feats[:, :, :head].sum(2, keepdim=True, dtype=ct)] if head else []
    parts.append(feats[:, :, head:head + whole].unflatten(2, (whole // w, w)).sum(3, dtype=ct))
    if head + whole < T:
        parts.append(feats[:, :, head + whole:].sum(2, keepdim=True, dtype=ct))
    return torch.cat(parts, 2)


def mean_memory(feats: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """One memory per sequence (noncausal and cross attention): the mean of feats [B, H, T, d] (zero at padded
    positions) over the valid [B, 1, T] positions (1 real, 0 padded); [B, H, 1, d] (zeros where nothing is real)."""
    return feats.sum(2, keepdim=True, dtype=compute_dtype(feats.dtype)) / valid.sum(-1).clamp(min=1)[..., None, None]


def dissected_memory(feats: torch.Tensor, valid: torch.Tensor, window: int, state: MemoryState | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Context dissection: window j reads the mean features of the complete windows before it (cumulative sums over
    windows, O(T d)).

    Args:
        feats: [B, H, T, d] features, zero at padded positions; the chunk starts at ``state.position``.
        valid: [B, 1, T] 1 for real positions, 0 for padded ones.
        window: w.
        state: the memory state before the chunk, or None (the sequence starts here).

    Returns:
        mem [B, H, n, d], the memory rows (query t reads row (a + t) // w, a = position % w: :func:`read`'s offset
        and group); empty [B, 1, T, 1] bool, where the memory has no real token; the (sum_complete, sum_partial)
        after the chunk (views of per-window tensors).
    """
    B, H, T, d = feats.shape
    w, ct = window, compute_dtype(feats.dtype)
    pos = state.position if state is not None else 0
    a = pos % w                                   # the chunk starts a tokens into its first window
    n = math.ceil((a + T) / w)
    end = n * w - a - T
    sums = window_sums(feats, a, w)                                             # [B, H, n, d] per window
    counts = F.pad(valid, (a, end)).unflatten(2, (n, w)).sum(3)                # [B, 1, n]
    prev = torch.zeros(B, H, d, dtype=ct, device=feats.device) if state is None else state.sum_complete
    if state is not None:
        sums = torch.cat([sums[:, :, :1] + state.sum_partial[:, :, None], sums[:, :, 1:]], 2)
        counts = torch.cat([counts[..., :1] + a, counts[..., 1:]], -1)
    before = prev[:, :, None] + F.pad(sums.cumsum(2), (0, 0, 1, 0))[:, :, :-1]  # [B, H, n, d] complete windows < j
    count = (pos - a) + F.pad(counts.cumsum(-1), (1, 0))[..., :-1]              # [B, 1, n]
    mem = before / count.clamp(min=1)[..., None]                                # [B, H, n, d]
    empty = (count == 0)[..., None].expand(B, 1, n, w).flatten(2)[:, :, a:a + T, None]  # [B, 1, T, 1]
    if (pos + T) % w == 0:
        return mem, empty, (before[:, :, -1] + sums[:, :, -1], torch.zeros_like(prev))
    return mem, empty, (before[:, :, -1], sums[:, :, -1])


def running_memory(feats: torch.Tensor, valid: torch.Tensor, state: MemoryState | None = None
                   ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Without context dissection (paper eq. 4): token t reads the running mean of features 0..t.

    Args:
        feats: [B, H, T, d] features, zero at padded positions; valid: [B, 1, T] 1 real, 0 padded.
        state: the memory state before the chunk (its ``sum_complete`` is the running sum), or None.

    Returns:
        mem [B, H, T, d], one row per token (this ablation's memory is one more [T, d] tensor than dissection's);
        the (running sum, zeros) after the chunk (the sum a view of a [B, H, T, d] tensor).
    """
    B, H, _, d = feats.shape
    ct = compute_dtype(feats.dtype)
    prev = torch.zeros(B, H, d, dtype=ct, device=feats.device) if state is None else state.sum_complete
    cum = prev[:, :, None] + feats.cumsum(2, dtype=ct)                          # [B, H, T, d] inclusive sums
    count = (state.position if state is not None else 0) + valid.cumsum(-1)     # [B, 1, T]
    return cum / count.clamp(min=1)[..., None], (cum[:, :, -1], torch.zeros_like(prev))
