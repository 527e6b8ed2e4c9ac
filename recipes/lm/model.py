"""The paper's GPT-2 decoder: fairseq ``transformer_lm_gpt`` with any attention from the registry.

Pre-LayerNorm blocks with a final LayerNorm, GELU FFN, token embeddings scaled by sqrt(D), tied input/output
embeddings, sinusoidal positions unless the attention encodes position itself (LAVO's EPE, rotary). Sizes come from
:class:`ModelConfig`; the defaults are GPT-2 small (12 x 768, 12 heads, FFN 3072).

The LM head never materialises all T x V logits: with targets the model returns per-token NLL computed by
:func:`~lavo_zoo.nn.losses.chunked_cross_entropy`; without, only the last position's logits. ``features`` and
``logits`` give every position's (what the transformers form in ``hf/`` returns).
Streaming: ``model(idx, state=s, return_state=True)`` carries every layer's attention state (LAVO's O(1)
recurrent state, or the softmax attentions' KV cache) and the position offset across chunks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from lavo_zoo.attention import AttentionSpec
from lavo_zoo.config import NonNegativeInt, PositiveInt, Probability
from lavo_zoo.nn.losses import chunked_cross_entropy
from lavo_zoo.nn.position import sinusoidal_positions
from lavo_zoo.nn.transformer import PreLNDecoderBlock


@dataclass
class ModelConfig:
    num_layers: PositiveInt = 12
    embed_dim: PositiveInt = 768
    num_heads: PositiveInt = 12
    ffn_dim: PositiveInt = 3072
    dropout: Probability = 0.1
    # any causal attention from `lavo-zoo list attentions`; YAML {name: lavo, num_bases: 64, window_size: 16}
    attention: AttentionSpec = field(default_factory=lambda: AttentionSpec("lavo"))
    # auto: sinusoidal unless the attention encodes position itself (LAVO's EPE, rotary)
    positions: Literal["auto", "sinusoidal", "none"] = "auto"
    ce_chunk_size: NonNegativeInt = 0  # rows per cross-entropy chunk (0: as many as fit 32M fp32 logits)
    vocab_size: NonNegativeInt = 0  # from data.tokenizer (LMRecipe.resolve); saved with the run so eval needs no data

    def __post_init__(self) -> None:
        self.attention.check("causal", "model.attention")


@dataclass
class LMState:
    """Streaming state: tokens consumed so far (the next position) and each layer's attention state."""

    offset: int
    layers: list[Any]


class TransformerLM(nn.Module):
    """Token embedding (x sqrt(D), + sinusoidal positions) -> num_layers pre-LN blocks -> LayerNorm -> tied head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size < 1:
            raise ValueError("model.vocab_size is unset: resolve the config first (LMRecipe.resolve(cfg))")
        vocab_size = cfg.vocab_size
        self.cfg = cfg
        self.embed_scale = math.sqrt(cfg.embed_dim)
        self.embed_tokens = nn.Embedding(vocab_size, cfg.embed_dim)  # also the output projection (tied)
        self.blocks = nn.ModuleList(
            PreLNDecoderBlock(cfg.attention.build(cfg.embed_dim, cfg.num_heads, "causal"), cfg.ffn_dim, cfg.dropout)
            for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(cfg.embed_dim)
        self.dropout = nn.Dropout(cfg.dropout)
        encodes = any(b.attn.encodes_position for b in self.blocks)
        self.use_positions = cfg.positions == "sinusoidal" or (cfg.positions == "auto" and not encodes)
        self.streaming = all(b.attn.streaming for b in self.blocks)  # can carry LMState across chunks
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """fairseq's init for the embeddings (normal, std D^-0.5) and FFN (Xavier-uniform, zero bias)."""
        nn.init.normal_(self.embed_tokens.weight, std=self.cfg.embed_dim ** -0.5)
        for block in self.blocks:
            for fc in (block.ffn.fc1, block.ffn.fc2):
                nn.init.xavier_uniform_(fc.weight)
                nn.init.zeros_(fc.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, state: LMState | None = None,
                return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, LMState]:
        """idx [B, T] -> NLL [B, T] (fp32) with ``targets`` [B, T], else the last position's logits [B, V].

        With ``return_state`` also returns the :class:`LMState` after these tokens; pass it back as ``state`` to
        continue the sequence (requires a streaming attention).
        """
        h, new_state = self.features(idx, state=state, return_state=return_state)  # [B, T, D]
        if targets is not None:
            out = chunked_cross_entropy(h, self.embed_tokens.weight, targets, chunk_size=self.cfg.ce_chunk_size or None,
                                        reduction="none")  # [B, T]
        else:
            out = self.logits(h[:, -1])  # [B, V]
        return (out, new_state) if return_state else out

    def features(self, idx: torch.Tensor, *, state: LMState | None = None, return_state: bool = False
                 ) -> tuple[torch.Tensor, LMState | None]:
        """idx [B, T] -> (the final LayerNorm's output h [B, T, D], the :class:`LMState` after these tokens when
        ``return_state`` or ``state`` is given, else None). ``logits(h)`` gives every position's logits."""
        T = idx.shape[1]
        offset = state.offset if state is not None else 0
        x = self.embed_tokens(idx) * self.embed_scale  # [B, T, D]
        if self.use_positions:
            x = x + sinusoidal_positions(T, self.cfg.embed_dim, offset, x.dtype, x.device)  # [T, D] broadcast
        x = self.dropout(x)
        streaming = return_state or state is not None
        new_layers = []
        for i, block in enumerate(self.blocks):
            if streaming:
                x, layer_state = block(x, state=state.layers[i] if state else None, return_state=True)
                new_layers.append(layer_state)
            else:
                x = block(x)
        return self.ln_f(x), (LMState(offset + T, new_layers) if streaming else None)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., D] -> logits [..., V] through the tied output projection."""
        return h @ self.embed_tokens.weight.t()
