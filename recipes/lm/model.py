"""The paper's GPT-2 decoder: fairseq ``transformer_lm_gpt`` with any attention from the registry.

Pre-LayerNorm blocks with a final LayerNorm, GELU FFN, token embeddings scaled by sqrt(D), tied input/output
embeddings, sinusoidal positions unless the attention encodes position itself (LAVO's EPE, rotary): the trunk
:class:`~lavo_zoo.nn.transformer.TiedDecoderLM`, shared with the ``recall`` recipe. Sizes come from
:class:`ModelConfig`; the defaults are GPT-2 small (12 x 768, 12 heads, FFN 3072).

The LM head never materialises all T x V logits: with targets the model returns per-token NLL computed by
:func:`~lavo_zoo.nn.losses.chunked_cross_entropy`; without, only the last position's logits. ``features`` and
``logits`` give every position's (what the transformers form in ``hf/`` returns).
Streaming: ``model(idx, state=s, return_state=True)`` carries every layer's attention state (LAVO's O(1)
recurrent state, or the softmax attentions' KV cache) and the position offset across chunks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch

from lavo_zoo.attention import AttentionSchedule, AttentionSpec
from lavo_zoo.attention.schedule import resolve_schedules
from lavo_zoo.config import NonNegativeInt, PositiveInt, Probability
from lavo_zoo.nn.losses import chunked_cross_entropy
from lavo_zoo.nn.transformer import DecoderState, TiedDecoderLM


@dataclass
class ModelConfig:
    attention_patterns: ClassVar[str] = "causal"  # the pattern every layer's attention is built with

    num_layers: PositiveInt = 12
    embed_dim: PositiveInt = 768
    num_heads: PositiveInt = 12
    ffn_dim: PositiveInt = 3072
    dropout: Probability = 0.1
    # any causal attention from `lavo-zoo list attentions`; YAML {name: lavo, num_bases: 64, window_size: 16}
    attention: AttentionSpec = field(default_factory=lambda: AttentionSpec("lavo"))
    # a hybrid: the attention of each layer, a list repeated over num_layers whose entries naming model.attention's
    # mechanism take its options ([lavo, lavo, lavo, sdpa] or lavo*3+sdpa); null: model.attention in every layer
    attention_schedule: AttentionSchedule | None = None
    # auto: sinusoidal unless the attention encodes position itself (LAVO's EPE, rotary)
    positions: Literal["auto", "sinusoidal", "none"] = "auto"
    ce_chunk_size: NonNegativeInt = 0  # rows per cross-entropy chunk (0: as many as fit 32M fp32 logits)
    vocab_size: NonNegativeInt = 0  # from data.tokenizer (LMRecipe.resolve); saved with the run so eval needs no data

    def __post_init__(self) -> None:
        self.attention.check(self.attention_patterns, "model.attention")
        resolve_schedules(self)


class TransformerLM(TiedDecoderLM):
    """Token embedding (x sqrt(D), + sinusoidal positions) -> num_layers pre-LN blocks -> LayerNorm -> tied head
    (:class:`~lavo_zoo.nn.transformer.TiedDecoderLM`, whose ``features`` and ``logits`` it adds the loss to)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, embed_dropout=cfg.dropout)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, state: DecoderState | None = None,
                return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, DecoderState]:
        """idx [B, T] -> NLL [B, T] (fp32) with ``targets`` [B, T], else the last position's logits [B, V].

        With ``return_state`` also returns the :class:`DecoderState` after these tokens; pass it back as ``state`` to
        continue the sequence (requires a streaming attention).

        Args:
            idx: [B, T] token ids.
            targets: [B, T] the next tokens, or None (logits are returned).
            state: the state after the tokens before (``return_state``), or None (the sequence starts here).
            return_state: also return the state after these tokens.
        """
        h, new_state = self.features(idx, state=state, return_state=return_state)  # [B, T, D]
        if targets is not None:
            out = chunked_cross_entropy(h, self.embed_tokens.weight, targets, chunk_size=self.cfg.ce_chunk_size or None,
                                        reduction="none")  # [B, T]
        else:
            out = self.logits(h[:, -1])  # [B, V]
        return (out, new_state) if return_state else out
