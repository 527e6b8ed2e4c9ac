"""Padded rows that give what the row alone gives, for mechanisms whose computation does not by itself.

- Left alignment, for mechanisms that cut a sequence at absolute positions (LAVO's causal windows and memory,
  Transformer-LS's segments): :func:`left_aligned` runs such a mechanism with each row's real tokens moved to the
  front, so that its windows start at the row's first real token, and moves the outputs back. A left-padded row then
  gives the outputs the row alone gives, as every other mechanism does (their scores depend on relative positions
  only). Only the leading padding moves: each row is rotated left by its number of leading padded positions (which
  land at the end, as right padding), so padding inside a row stays where it is.
- Packing, for mechanisms that must never see a padded position between real ones (the recurrent mechanisms'
  short convolutions and states, ``local``'s attention sinks, which are a row's first real tokens): :func:`pack`
  moves every real token of a row to the front, order kept, wherever the padding is (left, right, inside), and
  :func:`gather_rows` applies that order (or its inverse, to put the outputs back).
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


def pack(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The real tokens of each row moved to the front, order kept.

    Args:
        mask: [B, T] bool, True = real.

    Returns:
        (order [B, T]: position t of the packed row is position order[t] of the row; inverse [B, T]: where each
        position went; packed_mask [B, T]: True for the first (number of real tokens) positions).
    """
    order = torch.argsort(mask.logical_not().to(torch.uint8), dim=1, stable=True)
    inverse = torch.argsort(order, dim=1)
    packed = torch.arange(mask.shape[1], device=mask.device)[None] < mask.sum(1, keepdim=True)
    return order, inverse, packed


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x reordered along its sequence axis, row by row.

    Args:
        x: [B, T, ...].
        index: [B, T] int64 (:func:`pack`'s order, or its inverse to put a packed row's outputs back).

    Returns:
        [B, T, ...]: position t of row b holds x[b, index[b, t]].
    """
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand(*index.shape, *x.shape[2:]))
