"""Losses shared by recipe models: ``chunked_cross_entropy`` (a linear head's loss without all N x V logits at
once) and ``label_smoothed_cross_entropy`` (fairseq's, ignoring padding, chunked the same way)."""
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

    Args:
        hidden: [..., D] the head's inputs.
        weight: [V, D] the output head's weight.
        targets: [...] int64 class ids.
        chunk_size: rows of logits at a time (None: about :data:`MAX_CHUNK_ELEMENTS` logits per chunk).
        ignore_index: targets equal to it count nothing (padding).
        reduction: ``none``, ``sum`` or ``mean`` (above).

    Raises:
        ValueError: an unknown reduction, or shapes that disagree.
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


def _chunk_smoothed(x: torch.Tensor, weight: torch.Tensor | None, targets: torch.Tensor, ignore_index: int,
                    epsilon: float) -> torch.Tensor:
    """Per-token (label-smoothed loss, NLL) of one chunk: x = logits [n, V] or hidden [n, D] with weight [V, D]."""
    logits = x if weight is None else x @ weight.t()
    lp = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)  # [n, V], fp32+
    valid = targets != ignore_index
    nll = -lp.gather(-1, targets.masked_fill(~valid, 0)[:, None])[:, 0]  # [n]
    eps_i = epsilon / max(1, lp.shape[-1] - 1)
    loss = (1.0 - epsilon - eps_i) * nll - eps_i * lp.sum(-1)  # (1 - eps) on the target, eps / (V - 1) elsewhere
    return torch.stack([loss, nll]).masked_fill(~valid, 0.0)  # [2, n]


def label_smoothed_cross_entropy(logits_or_hidden: torch.Tensor, targets: torch.Tensor, epsilon: float = 0.1, *,
                                 weight: torch.Tensor | None = None, ignore_index: int = -100,
                                 reduction: str = "mean", chunk_size: int | None = None
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Label-smoothed cross-entropy (fairseq's ``label_smoothed_cross_entropy``): the target class gets 1 - epsilon,
    every other class epsilon / (V - 1). Returns (loss, nll), the plain NLL for perplexity, both reduced alike.

    logits [..., V], or hidden [..., D] with the output head ``weight`` [V, D] (the logits then exist one chunk at a
    time, as in :func:`chunked_cross_entropy`; both inputs are chunked, in fp32, recomputed in the backward pass).
    targets [...] int64; positions equal to ``ignore_index`` (padding) count nothing. ``reduction``: ``none`` (shaped
    like targets), ``sum``, or ``mean`` over the non-ignored targets.

    Args:
        logits_or_hidden: logits [..., V], or hidden [..., D] with ``weight``.
        targets: [...] int64 class ids.
        epsilon: the smoothing, in [0, 1).
        weight: [V, D] the output head, with hidden inputs; None: the inputs are logits.
        ignore_index: targets equal to it count nothing (padding).
        reduction: ``none``, ``sum`` or ``mean`` (above).
        chunk_size: rows of logits at a time (None: about :data:`MAX_CHUNK_ELEMENTS` logits per chunk).

    Raises:
        ValueError: an unknown reduction or an epsilon outside [0, 1).
    """
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got '{reduction}'")
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon}")
    if logits_or_hidden.shape[:-1] != targets.shape:
        raise ValueError(f"logits/hidden {list(logits_or_hidden.shape)} and targets {list(targets.shape)} disagree")
    x = logits_or_hidden.reshape(-1, logits_or_hidden.shape[-1])  # [N, V or D]
    t = targets.reshape(-1)  # [N]
    vocab = weight.shape[0] if weight is not None else x.shape[-1]
    chunk = chunk_size or max(1, MAX_CHUNK_ELEMENTS // vocab)
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad))
    parts = []
    for start in range(0, x.shape[0], chunk):
        args = (x[start:start + chunk], weight, t[start:start + chunk], ignore_index, epsilon)
        parts.append(checkpoint(_chunk_smoothed, *args, use_reentrant=False) if needs_grad else _chunk_smoothed(*args))
    both = torch.cat(parts, 1) if parts else x.new_zeros(2, 0, dtype=torch.promote_types(x.dtype, torch.float32))
    if reduction == "none":
        return both[0].view(targets.shape), both[1].view(targets.shape)
    total = both.sum(1)
    if reduction == "mean":
        total = total / (t != ignore_index).sum().clamp(min=1)
    return total[0], total[1]
