"""``sdpa``, full softmax attention through ``torch.nn.functional.scaled_dot_product_attention`` (FlashAttention on
CUDA), optional rotary embedding, KV-cache streaming: one of the two softmax attentions LAVO is measured against (the
other is ``local``, the exact sliding window).
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import PATTERNS
from lavo_zoo.attention.common import KVCache, ProjectedAttention, check_cache, compute_dtype, merge_heads, split_heads
from lavo_zoo.attention.ops.naive import heads, key_mask_4d, merge
from lavo_zoo.attention.ops.window.naive import dense_attention


def rotary(t: torch.Tensor, offset: int, base: float) -> torch.Tensor:
    """Rotary embedding (rotate-half layout) of t [B, H, T, d] at positions offset..offset+T-1."""
    d, T = t.shape[-1], t.shape[-2]
    ct = compute_dtype(t.dtype)
    inv_freq = base ** (-torch.arange(0, d // 2, dtype=torch.float64, device=t.device) * 2 / d)    # [d/2]
    angle = torch.arange(offset, offset + T, dtype=torch.float64, device=t.device)[:, None] * inv_freq  # [T, d/2]
    cos, sin = angle.cos().to(ct), angle.sin().to(ct)
    a, b = t.to(ct).chunk(2, dim=-1)                                                              # [B, H, T, d/2]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).to(t.dtype)


@register_attention("sdpa")
class SDPAttention(ProjectedAttention):
    """Full softmax attention (torch scaled_dot_product_attention; FlashAttention on CUDA), optional rotary"""

    family = "softmax attention"
    decoding_state = "2 T D (KV cache, grows with T)"
    state_grows = True
    patterns = PATTERNS
    streaming = True
    test_options: ClassVar[dict[str, Any]] = {"rope": True}

    @classmethod
    def test_options_for(cls, pattern: str) -> dict[str, Any]:
        """:attr:`test_options` without rotary positions in cross attention (queries and keys share no positions).

        Args:
            pattern: causal, noncausal or cross.
        """
        return {} if pattern == "cross" else dict(cls.test_options)

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", rope: bool = False,
                 rope_base: float = 10000.0, dropout: float = 0.0, bias: bool = True) -> None:
        """Full softmax attention.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            rope: rotate queries and keys by their positions (rotary embedding; self-attention, even head dim).
            rope_base: the rotary embedding's base (the wavelengths' scale).
            dropout: attention dropout on the probabilities, in training.
            bias: biases in the q, k, v and output projections.
        """
        super().__init__(embed_dim, num_heads, pattern, bias)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dropout = dropout
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


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive_rotary(t: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary embedding, rotate-half layout: channel i pairs with i + d/2, angle pos * base^(-2i/d)."""
    d = t.shape[-1]
    out = t.double().clone()
    for i in range(d // 2):
        angle = positions.double() * base ** (-2 * i / d)            # [T]
        a, b = t[..., i].double(), t[..., i + d // 2].double()
        out[..., i] = a * torch.cos(angle) - b * torch.sin(angle)
        out[..., i + d // 2] = b * torch.cos(angle) + a * torch.sin(angle)
    return out


def naive(attn: SDPAttention, x: torch.Tensor, padding_mask: torch.Tensor | None = None,
          context: torch.Tensor | None = None, context_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Full softmax attention with a dense mask (and rotary embedding when the module has rope=True).

    Its arguments are stated in `lavo_zoo.attention.ops.naive` (``attn``: the module, there ``m``).
    """
    B, T, _ = x.shape
    src = x if context is None else context
    S = src.shape[1]
    q, k, v = heads(attn, attn.q_proj(x)), heads(attn, attn.k_proj(src)), heads(attn, attn.v_proj(src))
    if attn.rope:
        q, k = naive_rotary(q, torch.arange(T), attn.rope_base), naive_rotary(k, torch.arange(S), attn.rope_base)
    allowed = key_mask_4d(context_mask if context is not None else padding_mask, B, S)
    if attn.pattern == "causal":
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
    return merge(attn, dense_attention(q, k, v, allowed), padding_mask, x.dtype)
