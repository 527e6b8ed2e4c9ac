"""The LRA classifier of Skyformer's LRA code (the setting of the LAVO paper's LRA numbers), with any registry
attention that supports the ``noncausal`` pattern.

Token embedding + learned position embedding (both N(0, 0.02)), dropout; the shared pre-LN
:class:`~lavo_zoo.nn.transformer.TransformerEncoder` (``num_layers`` blocks x + Dropout(Attn(LN(x))),
x + Dropout(FFN(LN(x))) with a GELU FFN, then a final LayerNorm); mean pooling over the real tokens; a classifier
MLP (Linear(D, F), ReLU, Linear(F, C)). Retrieval is a two-tower model: both documents go through the same encoder
and the classifier reads [u, v, u * v, u - v] (4D). Defaults: 2 layers, d_model 64, FFN 128, 2 heads, dropout 0.1.

Deliberate difference: Skyformer's mean pooling divides by the padded length (padding positions are zeroed, then
``mean(dim=1)``); here the mean is over the real tokens only, so a document's vector does not depend on how much
padding its batch has.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from lavo_zoo.attention import AttentionSchedule, AttentionSpec
from lavo_zoo.attention.schedule import attention_layers, resolve_schedules
from lavo_zoo.config import NonNegativeInt, PositiveInt, Probability
from lavo_zoo.nn.transformer import TransformerEncoder


@dataclass
class ModelConfig:
    attention_patterns: ClassVar[str] = "noncausal"  # the pattern every layer's attention is built with

    embed_dim: PositiveInt = 64
    num_heads: PositiveInt = 2
    ffn_dim: PositiveInt = 128
    num_layers: PositiveInt = 2
    dropout: Probability = 0.1
    attention_dropout: Probability = 0.0  # the mechanism's own dropout option, where it has one (Skyformer: none)
    activation: str = "gelu"  # the FFN's ("gelu" | "relu")
    # any attention of `lavo-zoo list attentions` that supports pattern noncausal
    attention: AttentionSpec = field(default_factory=lambda: AttentionSpec("sdpa"))
    # a hybrid: the attention of each layer, a list repeated over num_layers whose entries naming model.attention's
    # mechanism take its options ([lavo, lavo, lavo, sdpa] or lavo*3+sdpa); null: model.attention in every layer
    attention_schedule: AttentionSchedule | None = None
    # sizes that come from the data (resolved from data.task / data.max_length before training; 0 = not yet)
    vocab_size: NonNegativeInt = 0
    num_classes: NonNegativeInt = 0
    max_positions: NonNegativeInt = 0
    two_tower: bool = False  # Retrieval: classify a pair of documents

    def __post_init__(self) -> None:
        resolve_schedules(self)


class LRAEncoder(nn.Module):
    """tokens [B, L] (+ mask [B, L], True = real) -> one vector per sequence [B, D] (mean over real tokens)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(cfg.vocab_size, cfg.embed_dim)
        self.positions = nn.Embedding(cfg.max_positions, cfg.embed_dim)
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.02)
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = TransformerEncoder(cfg.num_layers, cfg.embed_dim, cfg.num_heads, cfg.ffn_dim,
                                          attention_layers(cfg)[""],
                                          cfg.dropout, cfg.attention_dropout, cfg.activation)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        L = tokens.shape[1]
        if L > self.positions.num_embeddings:
            raise ValueError(f"sequence of {L} tokens is longer than model.max_positions "
                             f"({self.positions.num_embeddings}); lower data.max_length")
        x = self.dropout(self.tokens(tokens) + self.positions.weight[:L])  # [B, L, D]
        attn_mask = None if bool(mask.all()) else mask  # every mechanism's fast path when nothing is padded
        x = self.encoder(x, attn_mask) * mask[..., None]  # [B, L, D] after the final LayerNorm, padding zeroed
        return x.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)  # [B, D]


class LRAClassifier(nn.Module):
    """One sequence -> class logits [B, C]; with ``two_tower`` a pair -> logits from [u, v, u * v, u - v]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        missing = [k for k in ("vocab_size", "num_classes", "max_positions") if getattr(cfg, k) <= 0]
        if missing:
            raise ValueError(f"model.{', model.'.join(missing)} must be set (the LRA recipe fills them from the "
                             "data before building the model)")
        self.cfg = cfg
        self.encoder = LRAEncoder(cfg)
        width = 4 * cfg.embed_dim if cfg.two_tower else cfg.embed_dim
        self.classifier = nn.Sequential(nn.Linear(width, cfg.ffn_dim), nn.ReLU(),
                                        nn.Linear(cfg.ffn_dim, cfg.num_classes))

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor, tokens2: torch.Tensor | None = None,
                mask2: torch.Tensor | None = None) -> torch.Tensor:
        """Class logits [B, C] of a sequence (or, with ``two_tower``, a pair of them).

        Args:
            tokens: [B, T] token ids.
            mask: [B, T] bool, True = real token.
            tokens2: two-tower: [B, T] the second document's ids; else None.
            mask2: two-tower: [B, T] its mask; else None.

        Raises:
            ValueError: a two-tower model without the second document.
        """
        u = self.encoder(tokens, mask)  # [B, D]
        if not self.cfg.two_tower:
            return self.classifier(u)  # [B, C]
        if tokens2 is None or mask2 is None:
            raise ValueError("the two-tower (Retrieval) model needs tokens2 and mask2, the second document")
        v = self.encoder(tokens2, mask2)  # [B, D]
        return self.classifier(torch.cat([u, v, u * v, u - v], dim=-1))  # [B, C]
