"""A small decoder for the recall tasks, with any causal attention of the registry, and the size of its recurrent
state.

Zoology's model: token embeddings (+ positions) -> ``num_layers`` pre-LN blocks (attention, feed-forward) -> LayerNorm
-> a head tied to the embeddings, two layers by default. Here positions are sinusoidal unless the attention encodes
position itself (LAVO's EPE, rotary, local's relative bias), as in the ``lm`` recipe (Zoology learns absolute ones
for attention and gives the other mixers a short convolution instead); embeddings are fairseq's (normal, std
D^-0.5, scaled by sqrt(D)). Logits are computed only at the positions asked for (the queries), never [B, T, V].

:func:`state_bytes` measures the recurrent state: what each layer's attention keeps after a sequence to go on with
it (``Attention.step``: LAVO's sums and window, a KV cache, a feature-map prefix sum, an SSM state; a mechanism that
cannot stream keeps its whole input), summed over the tensors of the state object itself; ``model.layer_states``
gives it layer by layer (a hybrid's layers keep different states).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch

from lavo_zoo.attention import AttentionSchedule, AttentionSpec
from lavo_zoo.attention.schedule import resolve_schedules
from lavo_zoo.config import NonNegativeInt, PositiveInt, Probability
from lavo_zoo.nn.transformer import TiedDecoderLM


@dataclass
class ModelConfig:
    attention_patterns: ClassVar[str] = "causal"  # the pattern every layer's attention is built with

    num_layers: PositiveInt = 2
    embed_dim: PositiveInt = 128
    num_heads: PositiveInt = 1
    ffn_dim: PositiveInt = 512
    dropout: Probability = 0.0  # on the residual branches (Zoology's resid_dropout)
    embed_dropout: Probability = 0.1  # on the embeddings (Zoology's)
    # any causal attention from `lavo-zoo list attentions`; YAML {name: lavo, num_bases: 32, window_size: 16}
    attention: AttentionSpec = field(default_factory=lambda: AttentionSpec("sdpa"))
    # a hybrid: the attention of each layer, a list repeated over num_layers whose entries naming model.attention's
    # mechanism take its options ([lavo, lavo, lavo, sdpa] or lavo*3+sdpa); null: model.attention in every layer
    attention_schedule: AttentionSchedule | None = None
    # auto: sinusoidal unless the attention encodes position itself (LAVO's EPE, rotary, local's relative bias)
    positions: Literal["auto", "sinusoidal", "none"] = "auto"
    vocab_size: NonNegativeInt = 0  # data.vocab_size (RecallRecipe.resolve); saved with the run

    def __post_init__(self) -> None:
        self.attention.check(self.attention_patterns, "model.attention")
        resolve_schedules(self)


class RecallModel(TiedDecoderLM):
    """Tokens [B, T] -> logits at the selected positions (see the module docstring); the trunk is
    :class:`~lavo_zoo.nn.transformer.TiedDecoderLM`, with dropout ``embed_dropout`` on the embeddings."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, embed_dropout=cfg.embed_dropout)

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> the final hidden states [B, T, D] (after the last LayerNorm)."""
        return self.features(tokens)[0]

    def forward(self, tokens: torch.Tensor, select: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, T] -> logits [N, V] at the N positions where ``select`` [B, T] (bool) is True, in row-major
        order; without ``select``, logits [B, V] at the last position."""
        h = self.hidden(tokens)  # [B, T, D]
        h = h[select] if select is not None else h[:, -1]  # [N, D] or [B, D]
        return self.logits(h)


def state_bytes(model: RecallModel, seq_len: int) -> tuple[int, bool]:
    """(bytes, grows): the recurrent state of ``model`` for ONE sequence of ``seq_len`` tokens, summed over its
    layers (:meth:`~lavo_zoo.nn.transformer.TiedDecoderLM.layer_states`: each attention's ``step`` state, measured
    on random inputs of the model's dtype: the size does not depend on the values), and whether it grows with the
    sequence (larger after ``2 * seq_len`` tokens: a KV cache, or the whole input of a mechanism that cannot stream)
    in any layer."""
    layers = model.layer_states(seq_len)
    return sum(layer.bytes for layer in layers), any(layer.grows for layer in layers)
