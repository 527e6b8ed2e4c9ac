"""ABC: attention with bounded-memory control (Peng et al., ACL 2022, "ABC: Attention with Bounded-memory
Control"), the learned-control (ABC_MLP) variant.

Each head keeps n memory slots. Slot logits s_i = W_phi x_i (n per head); the memory is

    K~ = sum_i alpha_i k_i^T,  V~ = sum_i alpha_i v_i^T,  alpha_ij = exp(s_ij) / sum_{i'} exp(s_i'j)   ([n, d])

and a query reads it with softmax attention: o = softmax(scale * K~ q) V~.  In the causal form the memory of
query t is built from tokens i <= t only (the cumulative slot memory; the paper's benchmark library forgot to
accumulate). It is computed exactly chunk by chunk: a running (max-stabilised) sum of exp(s) k and exp(s) v over
the previous chunks plus a small C x C quadratic term inside the chunk, so no T x n x d tensor is formed; the same
running sums are the streaming state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import StreamingState
from lavo_zoo.attention.common import ProjectedAttention, masked_softmax
from lavo_zoo.attention.ops.naive import allowed_keys, merge, ones, qkv


@dataclass
class ABCState(StreamingState):
    """Streaming state of causal ABC: stabilised running sums over all past tokens."""

    k_sum: torch.Tensor  # [B, H, n, d] sum_i exp(s_i - m) k_i^T
    v_sum: torch.Tensor  # [B, H, n, d] sum_i exp(s_i - m) v_i^T
    z: torch.Tensor  # [B, H, n] sum_i exp(s_i - m)
    m: torch.Tensor  # [B, H, n] running max of the slot logits (the stabiliser)


@register_attention("abc")
class ABCAttention(ProjectedAttention):
    """ABC (Peng et al. 2022): bounded memory of ``num_slots`` slots per head; causal with cumulative memory.

    Streaming state: :class:`ABCState` (fixed size, n x d per head).
    """

    family = "bounded memory (learned slots)"
    decoding_state = "H x n x (2 D/H + 2)"
    patterns = ("causal", "noncausal", "cross")
    streaming = True
    description = "ABC bounded-memory control attention (learned slot control, cumulative causal memory)"
    test_options: ClassVar[dict[str, Any]] = {"num_slots": 5, "chunk_size": 8}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", num_slots: int = 64,
                 chunk_size: int = 64, bias: bool = True) -> None:
        """ABC with learned slot control (ABC_MLP).

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            num_slots: n, the memory slots per head.
            chunk_size: tokens per chunk of the exact causal computation (a C x C term inside each chunk).
            bias: biases in the q, k, v and output projections.
        """
        super().__init__(embed_dim, num_heads, pattern, bias)
        if num_slots <= 0 or chunk_size <= 0:
            raise ValueError(f"num_slots ({num_slots}) and chunk_size ({chunk_size}) must be positive")
        self.num_slots = num_slots
        self.chunk_size = chunk_size
        self.slot_proj = nn.Linear(embed_dim, num_heads * num_slots, bias=False)  # W_phi, per head

    def slot_logits(self, src: torch.Tensor) -> torch.Tensor:
        """[B, S, D] -> slot logits s [B, H, S, n]."""
        B, S, _ = src.shape
        return self.slot_proj(src).view(B, S, self.num_heads, self.num_slots).transpose(1, 2)

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        q, k, v = self.qkv(x, context)  # [B, H, T, d], [B, H, S, d]
        s = self.slot_logits(x if context is None else context)  # [B, H, S, n]
        key_mask = context_mask if self.pattern == "cross" else padding_mask
        if self.pattern == "causal":
            o, state = self._causal(q, k, v, s, key_mask, state)
            y = self.output(o)
            return (y, state) if return_state else y
        allowed = None if key_mask is None else key_mask[:, None, :, None]  # [B, 1, S, 1]
        alpha = masked_softmax(s, allowed, dim=2)  # [B, H, S, n], normalised over tokens
        k_mem = alpha.transpose(-1, -2) @ k  # [B, H, n, d]
        v_mem = alpha.transpose(-1, -2) @ v  # [B, H, n, d]
        p = torch.softmax((q @ k_mem.transpose(-1, -2)) * self.head_dim ** -0.5, dim=-1)  # [B, H, T, n]
        return self.output(p @ v_mem)

    def _causal(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: torch.Tensor,
                key_mask: torch.Tensor | None, state: Any) -> tuple[torch.Tensor, Any]:
        B, H, _, d = q.shape
        n = self.num_slots
        if key_mask is not None:
            s = s.masked_fill(~key_mask[:, None, :, None], float("-inf"))
        if state is None:
            sk = q.new_zeros(B, H, n, d)
            sv = q.new_zeros(B, H, n, d)
            z = q.new_zeros(B, H, n)
            m = q.new_full((B, H, n), float("-inf"))
        else:
            sk, sv, z, m = state.k_sum, state.v_sum, state.z, state.m
        scale = self.head_dim ** -0.5
        outs = []
        # split (not slice) so that backward is one concatenation, not a full-size zero tensor per chunk
        for qc, kc, vc, sc in zip(*(t.split(self.chunk_size, 2) for t in (q, k, v, s))):  # [B, H, L, .]
            L = qc.shape[2]
            with torch.no_grad():  # the stabiliser is a constant shift (cancels exactly)
                m_new = torch.maximum(m, sc.amax(2))  # [B, H, n]
                m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
                decay = torch.exp(m - m_safe)  # [B, H, n]; 0 where m was -inf
            sk = sk * decay[..., None]
            sv = sv * decay[..., None]
            z = z * decay
            e = torch.exp(sc - m_safe[:, :, None])  # [B, H, L, n]; 0 for padded keys
            zt = z[:, :, None] + e.cumsum(2)  # [B, H, L, n] normaliser of query t
            zt = zt.masked_fill(zt == 0, 1.0)  # no key yet: numerator and memory are 0 as well
            tril = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
            qk = (qc @ kc.transpose(-1, -2)).masked_fill(~tril, 0.0)  # [B, H, L, L]
            num = qc @ sk.transpose(-1, -2) + qk @ e  # [B, H, L, n] = q_t . sum_{i<=t} e_i k_i
            p = torch.softmax(num * scale / zt, dim=-1)  # [B, H, L, n]
            w = p / zt  # [B, H, L, n]
            intra = (w @ e.transpose(-1, -2)).masked_fill(~tril, 0.0)  # [B, H, L, L]
            outs.append(w @ sv + intra @ vc)  # [B, H, L, d]
            sk = sk + e.transpose(-1, -2) @ kc
            sv = sv + e.transpose(-1, -2) @ vc
            z = z + e.sum(2)
            m = m_new
        o = torch.cat(outs, 2) if outs else q.new_zeros(B, H, 0, d)
        return o, ABCState(sk, sv, z, m)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """ABC: for each query t, slot memory K~_t = sum_i softmax_i(s_i) k_i over the keys it may see (cumulative in
    the causal case), then softmax(q_t K~_t^T / sqrt(d)) V~_t.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    q, k, v = qkv(m, x, context)
    src = x if context is None else context
    B, H, T, d = q.shape
    S = k.shape[2]
    s = m.slot_proj(src).view(B, S, H, m.num_slots).transpose(1, 2)  # [B, H, S, n]
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    key_mask = ones(B, S) if key_mask is None else key_mask
    out = torch.zeros_like(q)
    for b in range(B):
        for t in range(T):
            idx = allowed_keys(m, t, S, key_mask[b])
            if not idx:
                continue
            alpha = torch.softmax(s[b, :, idx], dim=1)  # [H, n_keys, n]
            k_mem = alpha.transpose(-1, -2) @ k[b, :, idx]  # [H, n, d]
            v_mem = alpha.transpose(-1, -2) @ v[b, :, idx]
            p = torch.softmax(k_mem @ q[b, :, t, :, None] * d ** -0.5, dim=1)  # [H, n, 1]
            out[b, :, t] = (p.transpose(-1, -2) @ v_mem)[:, 0]
    return merge(m, out)
