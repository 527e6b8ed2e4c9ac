"""Left padding for mechanisms that cut a sequence at absolute positions (LAVO's causal windows and memory,
Transformer-LS's segments): :func:`left_aligned` runs such a mechanism with each row's real tokens moved to the front,
so that its windows start at the row's first real token, and moves the outputs back.

A left-padded row then gives the outputs the row alone gives, as every other mechanism does (their scores depend on
relative positions only). Only the leading padding moves: each row is rotated left by its number of leading padded
positions (which land at the end, as right padding), so padding inside a row stays where it is.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def leading_padding(padding_mask: torch.Tensor) -> torch.Tensor:
    """The padded positions before each row's first real token.

    Args:
        padding_mask: [B, T] bool, True = a real token.

    Returns:
        [B] int64; 0 for a row without a real token (nothing to align).
    """
    return padding_mask.to(torch.uint8).argmax(1)  # the first True (argmax returns the first maximum)


def rotate(t: torch.Tensor, shift: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Rotate each row b of ``t`` left by ``shift[b]`` positions along ``dim`` (right for negative shifts).

    Args:
        t: [B, ..., T, ...] (batch first; ``dim`` is the sequence axis).
        shift: [B] int64.
        dim: the sequence axis of ``t``.

    Returns:
        A tensor like ``t`` whose position i of row b holds ``t``'s position (i + shift[b]) mod T.
    """
    T = t.shape[dim]
    index = (torch.arange(T, device=t.device) + shift.to(t.device)[:, None]) % T    # [B, T]
    shape = [t.shape[0]] + [1] * (t.dim() - 1)
    shape[dim] = T
    return t.gather(dim, index.view(shape).expand(t.shape))


def left_aligned(attend: Callable[..., Any], x: torch.Tensor, padding_mask: torch.Tensor, *args: Any) -> Any:
    """``attend(x, padding_mask, *args)`` run on rows whose leading padding was moved to their end, its output moved
    back: position t of a row with p leading padded positions is computed at t - p, so windows cut at multiples of
    w from the start of the call start at the row's first real token.

    Args:
        attend: an attention's computation on validated inputs, returning y [B, T, D] (no streaming state: padding
            and state do not go together).
        x: [B, T, D].
        padding_mask: [B, T] bool, True = a real token.
        *args: passed on to ``attend`` after the mask.

    Returns:
        ``attend``'s output [B, T, D], at the positions of ``x``.
    """
    lead = leading_padding(padding_mask)                                              # [B]
    y = attend(rotate(x, lead), rotate(padding_mask, lead), *args)                    # [B, T, D]
    return rotate(y, -lead)
