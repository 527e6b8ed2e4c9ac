"""The paper's summarization model: a 6+6 encoder-decoder Transformer (CAB's ParaGen setting) around the shared
encoder-decoder core (:mod:`lavo_zoo.nn.transformer`), with any registry attention at each site.

Token embeddings are shared by the encoder, the decoder and the output projection (tied); learned absolute
positions (``max_source_positions`` / ``max_target_positions``) are added and an embedding LayerNorm follows
(as BART's ``layernorm_embedding``). The decoder decodes incrementally through the core's ``DecoderCache`` (every
self-attention's streaming state plus cross-attention caches computed once per source); search is
:func:`lavo_zoo.nn.search.generate` over :meth:`encode` / :meth:`init_cache` / :meth:`decode_step`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from lavo_zoo.attention import SiteAttention, SiteSchedule
from lavo_zoo.attention.schedule import attention_layers, resolve_schedules
from lavo_zoo.config import NonNegativeFloat, NonNegativeInt, PositiveInt, Probability
from lavo_zoo.errors import InputError
from lavo_zoo.nn.transformer import DecoderCache, TransformerDecoder, TransformerEncoder


@dataclass
class ModelConfig:
    embed_dim: PositiveInt = 512
    num_heads: PositiveInt = 8
    ffn_dim: PositiveInt = 2048
    encoder_layers: PositiveInt = 6
    decoder_layers: PositiveInt = 6
    dropout: Probability = 0.1
    attention_dropout: Probability = 0.1
    activation: Literal["gelu", "relu"] = "gelu"
    norm_first: bool = True  # pre-LN blocks (False: post-LN as the original Transformer and BART)
    max_source_positions: PositiveInt = 4096
    max_target_positions: PositiveInt = 512
    vocab_size: NonNegativeInt = 0  # resolved from data.tokenizer before training (GPT-2 BPE + BOS/EOS/PAD/separator)
    pad_id: int = -1  # resolved with vocab_size
    never_generate: list[int] = field(default_factory=list)  # ids search must not emit (BOS, PAD, separator)
    label_smoothing: NonNegativeFloat = 0.1
    # one attention per site (softmax by default): {encoder_self: {name: lavo, num_bases: 64, window_size: 16}}
    attention: SiteAttention = field(default_factory=SiteAttention)
    # a hybrid per site: the attention of each of the site's layers, a list repeated over them whose entries naming
    # that site's model.attention mechanism take its options (decoder_self: [lavo, lavo, lavo, sdpa])
    attention_schedule: SiteSchedule = field(default_factory=SiteSchedule)

    def __post_init__(self) -> None:
        resolve_schedules(self)


class SummarizationTransformer(nn.Module):
    """Encoder-decoder Transformer over token ids with tied embeddings and learned positions.

    ``forward(source [B, S], source_mask [B, S], target_in [B, T]) -> hidden [B, T, D]``; :meth:`logits` maps hidden
    states to vocabulary scores with the tied embedding matrix.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size < 1 or not 0 <= cfg.pad_id < cfg.vocab_size:
            raise InputError(f"model.vocab_size ({cfg.vocab_size}) and model.pad_id ({cfg.pad_id}) must be resolved "
                             "from the tokenizer before the model is built (SummarizationRecipe.resolve)")
        self.cfg = cfg
        D = cfg.embed_dim
        self.embed_tokens = nn.Embedding(cfg.vocab_size, D, padding_idx=cfg.pad_id)
        self.source_positions = nn.Embedding(cfg.max_source_positions, D)
        self.target_positions = nn.Embedding(cfg.max_target_positions, D)
        self.source_norm = nn.LayerNorm(D)
        self.target_norm = nn.LayerNorm(D)
        self.dropout = nn.Dropout(cfg.dropout)
        common = {"num_heads": cfg.num_heads, "ffn_dim": cfg.ffn_dim, "dropout": cfg.dropout,
                  "attention_dropout": cfg.attention_dropout, "activation": cfg.activation,
                  "norm_first": cfg.norm_first}
        layers = attention_layers(cfg)  # {site: the attention of each layer}
        self.encoder = TransformerEncoder(cfg.encoder_layers, D, attention=layers["encoder_self"], **common)
        self.decoder = TransformerDecoder(cfg.decoder_layers, D, self_attention=layers["decoder_self"],
                                          cross_attention=layers["cross"], **common)
        for embedding in (self.embed_tokens, self.source_positions, self.target_positions):
            nn.init.normal_(embedding.weight, std=D ** -0.5)
        with torch.no_grad():
            self.embed_tokens.weight[cfg.pad_id].zero_()

    # --------------------------------------------------------------------------------------------- embeddings
    def embed_source(self, source: torch.Tensor) -> torch.Tensor:
        """source [B, S] -> [B, S, D]: tokens + positions, LayerNorm, dropout."""
        S = source.shape[1]
        if S > self.cfg.max_source_positions:
            raise InputError(f"source of {S} tokens is longer than model.max_source_positions "
                             f"({self.cfg.max_source_positions}); lower data.max_source_tokens")
        x = self.embed_tokens(source) + self.source_positions.weight[:S]
        return self.dropout(self.source_norm(x))

    def embed_target(self, target: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """target [B, T] at positions offset .. offset+T-1 -> [B, T, D]."""
        T = target.shape[1]
        if offset + T > self.cfg.max_target_positions:
            raise InputError(f"target position {offset + T - 1} is beyond model.max_target_positions "
                             f"({self.cfg.max_target_positions}); lower data.max_target_tokens or eval.max_len_b")
        x = self.embed_tokens(target) + self.target_positions.weight[offset:offset + T]
        return self.dropout(self.target_norm(x))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., D] -> [..., V] through the tied embedding matrix."""
        return hidden @ self.embed_tokens.weight.t()

    # ----------------------------------------------------------------------------------------- teacher forcing
    def forward(self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor,
                target_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The decoder's hidden states [B, T, D] (before the output projection) under teacher forcing.

        Args:
            source: [B, S] the sources' token ids.
            source_mask: [B, S] bool, True = real token.
            target_in: [B, T] BOS + summary, shifted right.
            target_mask: [B, T] bool, True = real token, or None (all real).
        """
        memory = self.encode(source, source_mask)
        return self.decoder(self.embed_target(target_in), memory, source_mask, target_mask)

    # -------------------------------------------------------------------------- incremental decoding (search)
    def encode(self, source: torch.Tensor, source_mask: torch.Tensor) -> torch.Tensor:
        """source [B, S] -> memory [B, S, D]."""
        return self.encoder(self.embed_source(source), source_mask)

    def init_cache(self, memory: torch.Tensor, source_mask: torch.Tensor) -> DecoderCache:
        """The decoder's cache for ``memory`` [B, S, D] of the sources (cross-attention caches computed once)."""
        return self.decoder.init_cache(memory, source_mask)

    def decode_step(self, tokens: torch.Tensor, cache: DecoderCache) -> tuple[torch.Tensor, DecoderCache]:
        """tokens [N, t] (the next t target tokens) -> (logits of the last one [N, V], the updated cache); the ids of
        ``never_generate`` get -inf."""
        hidden, cache = self.decoder.step(self.embed_target(tokens, offset=cache.position), cache)
        logits = self.logits(hidden[:, -1])  # [N, V]
        if self.cfg.never_generate:
            logits[:, self.cfg.never_generate] = float("-inf")
        return logits, cache
