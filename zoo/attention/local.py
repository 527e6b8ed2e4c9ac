"""``local``, exact sliding-window softmax attention over w keys (the shared op
:mod:`lavo_zoo.attention.ops.window`: blocked, no T x T), optional learned relative bias, streaming with the last w-1
keys and values: one of the two softmax attentions LAVO is measured against (the other is ``sdpa``).
"""
from __future__ import annotations

import torch
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.common import KVCache, ProjectedAttention, check_cache, merge_heads, split_heads
from lavo_zoo.attention.ops.naive import heads, merge
from lavo_zoo.attention.ops.window import last_positions, window_attention
from lavo_zoo.attention.ops.window.naive import local_window


@register_attention("local")
class LocalAttention(ProjectedAttention):
    """Exact sliding-window softmax attention over w keys (blocked, no T x T), optional learned relative bias"""

    family = "sliding-window softmax"
    decoding_state = "2 (w-1) D last keys/values"
    patterns = ("causal", "noncausal")
    streaming = True

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", window_size: int = 16,
                 relative_bias: bool = False, dropout: float = 0.0, bias: bool = True) -> None:
        """Causal: keys [t-w+1, t]; noncausal: [t-w+1, t+w-1]. ``relative_bias`` adds a learned [H, 2w-1] bias."""
        super().__init__(embed_dim, num_heads, pattern, bias)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dropout = dropout
        if window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {window_size}")
        self.window_size = window_size
        self.rel_bias = nn.Parameter(torch.zeros(num_heads, 2 * window_size - 1)) if relative_bias else None

    @property
    def encodes_position(self) -> bool:
        return self.rel_bias is not None

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window_size={self.window_size}, relative_bias={self.rel_bias is not None}"

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: KVCache | None, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, KVCache]:
        q, k, v = (split_heads(p(x), self.num_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        if state is not None:
            check_cache(state, x, self.num_heads)
        past_k, past_v = (state.keys, state.values) if state is not None else (None, None)  # [B, H, <w, d]
        prefix = None if state is None else (past_k, past_v)
        out = window_attention(q, k, v, self.window_size, causal=self.pattern == "causal", bias=self.rel_bias,
                               key_mask=padding_mask, prefix=prefix, dropout=self.dropout, training=self.training)
        if padding_mask is not None:
            out = out * padding_mask[:, None, :, None]
        y = self.out_proj(merge_heads(out).to(x.dtype))
        if not return_state:
            return y
        w = self.window_size
        position = (state.position if state is not None else 0) + x.shape[1]
        return y, KVCache(last_positions(past_k, k, w), last_positions(past_v, v, w), position)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(attn: LocalAttention, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The ``local`` mechanism: exact sliding window of w keys, optional relative bias, with a dense [T, T] mask."""
    q, k, v = (heads(attn, p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    out = local_window(attn, q, k, v, attn.rel_bias, padding_mask, attn.pattern == "causal")
    return merge(attn, out, padding_mask, x.dtype)
