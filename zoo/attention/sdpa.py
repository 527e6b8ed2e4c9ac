"""The two softmax attentions LAVO is measured against: ``sdpa`` (full attention through
``torch.nn.functional.scaled_dot_product_attention``, optional rotary embedding, KV-cache streaming) and ``local``
(exact sliding window of w keys, optional learned relative bias, streaming with the last w-1 keys and values).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import PATTERNS, Attention
from lavo_zoo.attention.common import KVCache, check_cache, compute_dtype, merge_heads, split_heads
from lavo_zoo.attention.ops.window import last_positions, window_attention


def rotary(t: torch.Tensor, offset: int, base: float) -> torch.Tensor:
    """Rotary embedding (rotate-half layout) of t [B, H, T, d] at positions offset..offset+T-1."""
    d, T = t.shape[-1], t.shape[-2]
    ct = compute_dtype(t.dtype)
    inv_freq = base ** (-torch.arange(0, d // 2, dtype=torch.float64, device=t.device) * 2 / d)    # [d/2]
    angle = torch.arange(offset, offset + T, dtype=torch.float64, device=t.device)[:, None] * inv_freq  # [T, d/2]
    cos, sin = angle.cos().to(ct), angle.sin().to(ct)
    a, b = t.to(ct).chunk(2, dim=-1)                                                              # [B, H, T, d/2]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).to(t.dtype)


class _Projected(Attention):
    """Standard multi-head projections W_q, W_k, W_v, W_o."""

    def __init__(self, embed_dim: int, num_heads: int, pattern: str, dropout: float, bias: bool) -> None:
        super().__init__(embed_dim, num_heads, pattern)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dropout = dropout
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(embed_dim, embed_dim, bias=bias)
                                                                for _ in range(4))


@register_attention("sdpa")
class SDPAttention(_Projected):
    """Full softmax attention (torch scaled_dot_product_attention; FlashAttention on CUDA), optional rotary"""

    patterns = PATTERNS
    streaming = True

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", rope: bool = False,
                 rope_base: float = 10000.0, dropout: float = 0.0, bias: bool = True) -> None:
        """``rope=True`` rotates queries and keys by their positions (self-attention only)."""
        super().__init__(embed_dim, num_heads, pattern, dropout, bias)
        if rope and pattern == "cross":
            raise ValueError("rope=True needs self-attention (causal or noncausal): cross attention has no shared "
                             "positions between queries and keys")
        if rope and self.head_dim % 2:
            raise ValueError(f"rope=True needs an even head dim, got {self.head_dim}")
        self.rope, self.rope_base = rope, rope_base

    @property
    def encodes_position(self) -> bool:
        return self.rope

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rope={self.rope}"

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: KVCache | None, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, KVCache]:
        T, H = x.shape[1], self.num_heads
        src = x if context is None else context
        q, k, v = (split_heads(p(t), H) for p, t in ((self.q_proj, x), (self.k_proj, src), (self.v_proj, src)))
        if state is not None:
            check_cache(state, x, H)
        pos = state.position if state is not None else 0
        if self.rope:
            q, k = rotary(q, pos, self.rope_base), rotary(k, pos, self.rope_base)
        if state is not None:
            k, v = torch.cat([state.keys, k], 2), torch.cat([state.values, v], 2)   # [B, H, S, d]
        S = k.shape[2]
        key_mask = context_mask if context is not None else padding_mask          # [B, S] or None
        causal = self.pattern == "causal"
        mask = None
        if key_mask is not None or (causal and S != T):
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device)
            if causal:   # query i sits at position S - T + i
                mask = mask.tril(S - T)
            mask = mask[None, None] if key_mask is None else mask & key_mask[:, None, None, :]  # [B|1, 1, T, S]
            has_key = mask.any(-1, keepdim=True)                                   # [B|1, 1, T, 1]
            mask = mask | ~has_key           # rows with no real key (padded queries): finite, zeroed below
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                             dropout_p=self.dropout if self.training else 0.0)  # [B, H, T, d]
        if mask is not None:
            out = out * has_key
        if padding_mask is not None:
            out = out * padding_mask[:, None, :, None]
        y = self.out_proj(merge_heads(out))
        return (y, KVCache(k, v, pos + T)) if return_state else y


    def cross_cache(self, context: torch.Tensor, context_mask: torch.Tensor | None = None) -> KVCache:
        """The source's projected keys and values, computed once: a decoding step does not re-project it."""
        super().cross_cache(context, context_mask)  # validates
        k, v = split_heads(self.k_proj(context), self.num_heads), split_heads(self.v_proj(context), self.num_heads)
        return KVCache(k, v, 0, context_mask)

    def cross_step(self, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        check_cache(cache, x, self.num_heads)
        q = split_heads(self.q_proj(x), self.num_heads)                               # [B, H, t, d]
        mask = None if cache.key_mask is None else cache.key_mask[:, None, None, :]   # [B, 1, 1, S]
        if mask is not None:
            has_key = mask.any(-1, keepdim=True)                                      # [B, 1, 1, 1]
            mask = mask | ~has_key
        out = F.scaled_dot_product_attention(q, cache.keys, cache.values, attn_mask=mask,
                                             dropout_p=self.dropout if self.training else 0.0)  # [B, H, t, d]
        if mask is not None:
            out = out * has_key
        return self.out_proj(merge_heads(out))


@register_attention("local")
class LocalAttention(_Projected):
    """Exact sliding-window softmax attention over w keys (blocked, no T x T), optional learned relative bias"""

    patterns = ("causal", "noncausal")
    streaming = True

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", window_size: int = 16,
                 relative_bias: bool = False, dropout: float = 0.0, bias: bool = True) -> None:
        """Causal: keys [t-w+1, t]; noncausal: [t-w+1, t+w-1]. ``relative_bias`` adds a learned [H, 2w-1] bias."""
        super().__init__(embed_dim, num_heads, pattern, dropout, bias)
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
