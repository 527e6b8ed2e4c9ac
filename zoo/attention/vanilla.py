"""Vanilla softmax attention (Vaswani et al., 2017, "Attention is all you need") with the T x S score matrix
materialised in plain PyTorch: the paper's 1.0x reference for speed and memory.

The pieces the mechanisms share (projections, head split/merge, masked softmax, the KV cache) are in
:mod:`lavo_zoo.attention.common`.
"""
from __future__ import annotations

from typing import Any

import torch

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.common import KVCache, ProjectedAttention, check_cache, masked_softmax
from lavo_zoo.attention.ops.naive import merge, qkv, softmax_attention


@register_attention("vanilla")
class VanillaAttention(ProjectedAttention):
    """Plain softmax attention, score matrix materialised (the paper's 1.0x reference); KV-cache streaming.

    Streaming state: :class:`KVCache` of all past keys and values (grows with the sequence).
    """

    family = "softmax attention"
    decoding_state = "2 T D (KV cache, grows with T)"
    state_grows = True
    patterns = ("causal", "noncausal", "cross")
    streaming = True
    description = "softmax attention with the T x S score matrix materialised (plain PyTorch reference)"

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", bias: bool = True) -> None:
        """Plain softmax attention.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            bias: biases in the q, k, v and output projections.
        """
        super().__init__(embed_dim, num_heads, pattern, bias)

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        q, k, v = self.qkv(x, context)  # [B, H, T, d], [B, H, S, d]
        key_mask = context_mask if self.pattern == "cross" else padding_mask  # [B, S] or None
        offset = 0
        if state is not None:
            check_cache(state, x, self.num_heads)
            offset = state.keys.shape[2]
            k, v = torch.cat([state.keys, k], 2), torch.cat([state.values, v], 2)
        T, S = q.shape[2], k.shape[2]
        scores = (q @ k.transpose(-1, -2)) * self.head_dim ** -0.5  # [B, H, T, S]
        allowed = None if key_mask is None else key_mask[:, None, None, :]  # [B, 1, 1, S]
        if self.pattern == "causal":
            causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(offset)  # key s <= offset + t
            allowed = causal if allowed is None else allowed & causal
        y = self.output(masked_softmax(scores, allowed) @ v)
        return (y, KVCache(k, v, offset + T)) if return_state else y


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """Softmax attention by a loop over the queries, each over the keys it may see.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    q, k, v = qkv(m, x, context)
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    return merge(m, softmax_attention(q, k, v, key_mask, m.pattern == "causal"))
