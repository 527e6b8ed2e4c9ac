"""The one attention contract every mechanism (LAVO and the baselines) follows; see docs/architecture.md.

    attn = build_attention("lavo", embed_dim=256, num_heads=4, pattern="causal", num_bases=32, window_size=16)
    y = attn(x)                                          # x [B, T, D] -> y [B, T, D]
    y = attn(x, padding_mask=m)                          # m [B, T] bool, True = real token
    y, state = attn(x, state=None, return_state=True)    # streaming (causal, mechanisms with streaming=True)
    y = attn(x_tgt, context=x_src, context_mask=m_src)   # pattern="cross"

Subclasses set ``patterns`` and ``streaming`` and implement :meth:`Attention.attend`; :meth:`Attention.forward`
validates the inputs once, here, so every mechanism refuses bad input with the same clear messages.
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

PATTERNS = ("causal", "noncausal", "cross")


class Attention(nn.Module):
    """Base class: multi-head attention over ``[B, T, D]`` inputs with one of ``PATTERNS``."""

    patterns: ClassVar[tuple[str, ...]] = ()
    streaming: ClassVar[bool] = False  # causal pattern can carry a recurrent state / cache across chunks
    description: ClassVar[str] = ""
    # False for mechanisms whose eval-mode output is not a fixed function of the valid tokens (e.g. sampled keys),
    # so that exact invariance tests (padding, streaming == full) know to use a tolerance or skip.
    deterministic: ClassVar[bool] = True

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal") -> None:
        super().__init__()
        if pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {', '.join(PATTERNS)}, got '{pattern}'")
        if pattern not in self.patterns:
            raise ValueError(f"{type(self).__name__} does not support pattern '{pattern}'; "
                             f"it supports: {', '.join(self.patterns)}")
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be a positive multiple of num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.pattern = pattern

    @property
    def encodes_position(self) -> bool:
        """True when the mechanism injects position itself (LAVO's EPE, rotary), so a backbone may drop its own."""
        return False

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None, *,
                context: torch.Tensor | None = None, context_mask: torch.Tensor | None = None,
                state: Any = None, return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, Any]:
        self._check(x, "x", padding_mask, "padding_mask")
        if self.pattern == "cross":
            if context is None:
                raise ValueError("pattern 'cross' needs context=[B, S, D] (the source sequence)")
            self._check(context, "context", context_mask, "context_mask")
            if context.shape[0] != x.shape[0]:
                raise ValueError(f"context batch {context.shape[0]} != x batch {x.shape[0]}")
        elif context is not None or context_mask is not None:
            raise ValueError(f"context is only used with pattern 'cross' (this attention is '{self.pattern}')")
        if (state is not None or return_state) and not (self.pattern == "causal" and self.streaming):
            raise ValueError(f"{type(self).__name__} with pattern '{self.pattern}' has no streaming state; "
                             "state/return_state need pattern 'causal' and a mechanism with streaming=True")
        if (state is not None or return_state) and padding_mask is not None:
            raise ValueError("streaming (state/return_state) does not take a padding_mask; feed real tokens only")
        return self.attend(x, padding_mask, context, context_mask, state, return_state)

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """Mechanism-specific computation on validated inputs; returns y or (y, state) when return_state."""
        raise NotImplementedError

    def _check(self, t: torch.Tensor, name: str, mask: torch.Tensor | None, mask_name: str) -> None:
        if t.dim() != 3 or t.shape[-1] != self.embed_dim:
            raise ValueError(f"{name} must have shape [B, T, {self.embed_dim}] (embed_dim={self.embed_dim}), "
                             f"got {list(t.shape)}")
        if mask is not None and (mask.dtype != torch.bool or mask.shape != t.shape[:2]):
            raise ValueError(f"{mask_name} must be a bool tensor of shape {list(t.shape[:2])} "
                             f"(True = real token), got {mask.dtype} {list(mask.shape)}")

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, pattern={self.pattern}"
