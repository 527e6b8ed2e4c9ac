"""Losses shared by recipe models."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

MAX_CHUNK_ELEMENTS = 1 << 25  # 32M fp32 logits (128 MB) per chunk


def _chunk_nll(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
    logits = (hidden @ weight.t()).float()  # [n, V]
    return F.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="none")  # [n]


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                          chunk_size: int | None = None, ignore_index: int = -100,
                          reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of the linear head ``hidden @ weight.T`` without materialising all N x V logits.

    hidden [..., D], weight [V, D], targets [...] (int64). The logits exist one chunk of ``chunk_size`` rows at a
    time, in fp32; when gradients are needed each chunk is recomputed in the backward pass (activation
    checkpointing), so neither pass holds more than one chunk. ``reduction``: ``none`` -> fp32 NLL shaped like
    ``targets`` (0 at ignored positions), ``sum``, or ``mean`` over non-ignored targets (as F.cross_entropy).
    """
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got '{reduction}'")
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(f"hidden {list(hidden.shape)} and targets {list(targets.shape)} disagree")
    h = hidden.reshape(-1, hidden.shape[-1])  # [N, D]
    t = targets.reshape(-1)  # [N]
    chunk = chunk_size or max(1, MAX_CHUNK_ELEMENTS // weight.shape[0])
    needs_grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    parts = []
    for start in range(0, h.shape[0], chunk):
        args = (h[start:start + chunk], weight, t[start:start + chunk], ignore_index)
        parts.append(checkpoint(_chunk_nll, *args, use_reentrant=False) if needs_grad else _chunk_nll(*args))
    nll = torch.cat(parts) if parts else h.new_zeros(0, dtype=torch.float32)  # [N]
    if reduction == "none":
        return nll.view(targets.shape)
    if reduction == "sum":
        return nll.sum()
    return nll.sum() / (t != ignore_index).sum()
