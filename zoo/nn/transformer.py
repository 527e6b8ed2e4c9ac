"""Pre-LayerNorm transformer blocks around any registry attention (see :mod:`lavo_zoo.attention`)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lavo_zoo.attention.base import Attention

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


class FeedForward(nn.Module):
    """Linear(D -> F), activation, dropout, Linear(F -> D): the transformer's position-wise MLP (the dropout after
    the second linear layer belongs to the residual connection around it, in the block)."""

    def __init__(self, embed_dim: int, ffn_dim: int, dropout: float = 0.0, activation: str = "gelu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got '{activation}'")
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.act = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, T, D]
        return self.fc2(self.dropout(self.act(self.fc1(x))))  # [B, T, D]


class PreLNDecoderBlock(nn.Module):
    """x + Dropout(Attn(LN(x))), then x + Dropout(FFN(LN(x))) (fairseq ``normalize_before=True``).

    ``forward(x, state=s, return_state=True)`` passes the attention's streaming state (recurrent state or KV
    cache) through, so a causal decoder can consume any length chunk by chunk.
    """

    def __init__(self, attention: Attention, ffn_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        dim = attention.embed_dim
        self.ln_attn = nn.LayerNorm(dim)
        self.attn = attention
        self.ln_ffn = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, ffn_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, *, state: Any = None, return_state: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        h = self.ln_attn(x)  # [B, T, D]
        if return_state or state is not None:
            h, state = self.attn(h, state=state, return_state=True)
        else:
            h = self.attn(h)
        x = x + self.dropout(h)
        x = x + self.dropout(self.ffn(self.ln_ffn(x)))  # [B, T, D]
        return (x, state) if return_state else x
