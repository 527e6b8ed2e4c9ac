"""``mean``: every query gets the mean of the values it may see. The weakest sensible attention site, a control for
studies: a site where softmax attention does not beat ``mean`` does not use its attention.

No queries, keys or scores: y_t = W_o mean_{s in K(t)} W_v x_s over the real tokens K(t) that query t may see
(causal: positions 0..t, the running mean; noncausal: every real token; cross: every real source token). Padded keys
are left out; padded query rows are zero before the output projection (as in ``sdpa`` and ``lavo``); a query with no
real key reads zeros. Sums run in fp32 (fp64 for fp64 inputs) whatever the model dtype.

Decoding: causal streaming carries :class:`MeanState` (the running sum of the values and the count, constant size);
cross attention keeps :class:`MeanCrossCache`, the source's mean value, so a step costs the same for any source
length.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import PATTERNS, Attention, StreamingState
from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops.naive import allowed_keys, ones


@dataclass
class MeanState(StreamingState):
    """Causal streaming state: the values summed over every token so far and their number."""

    total: torch.Tensor  # [B, D] sum of v over the tokens consumed (compute dtype)
    count: int           # tokens consumed so far


@dataclass
class MeanCrossCache(StreamingState):
    """Cross-attention cache of one source: its mean value (not the source tokens)."""

    memory: torch.Tensor  # [B, 1, D] mean of v over the real source tokens (compute dtype)


@register_attention("mean")
class MeanAttention(Attention):
    """The mean of the values each query may see (no scores): the control a real attention site must beat.

    Streaming state (causal): :class:`MeanState` (fixed size, D numbers and a count).
    """

    family = "control (mean of values)"
    decoding_state = "D value sum + count"
    patterns = PATTERNS
    streaming = True
    reads_queries = False  # in cross attention the output ignores the target: every query reads the source's mean
    description = "mean of the visible values, no scores (the weakest sensible attention: a control for studies)"

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", bias: bool = True) -> None:
        """The mean control.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            bias: biases in the value and output projections.
        """
        super().__init__(embed_dim, num_heads, pattern)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def source_mean(self, context: torch.Tensor, context_mask: torch.Tensor | None) -> torch.Tensor:
        """Mean of v = W_v context over the real source tokens: [B, 1, D] in the compute dtype (zeros when there is
        none). It depends on the source only: cross decoding computes it once."""
        v = self.v_proj(context).to(compute_dtype(context.dtype))                          # [B, S, D]
        if context_mask is None:
            return v.mean(1, keepdim=True) if v.shape[1] else v.new_zeros(v.shape[0], 1, v.shape[2])
        valid = context_mask[..., None].to(v.dtype)                                         # [B, S, 1]
        return (v * valid).sum(1, keepdim=True) / valid.sum(1, keepdim=True).clamp(min=1)

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        B, T, D = x.shape
        new_state = None
        if self.pattern == "cross":
            out = self.source_mean(context, context_mask).expand(B, T, D)
        elif self.pattern == "noncausal":
            out = self.source_mean(x, padding_mask).expand(B, T, D)
        else:
            out, new_state = self._running(x, padding_mask, state)
        if padding_mask is not None:
            out = out * padding_mask[..., None]
        y = self.out_proj(out.to(x.dtype))
        return (y, new_state) if return_state else y

    def _running(self, x: torch.Tensor, padding_mask: torch.Tensor | None, state: MeanState | None
                 ) -> tuple[torch.Tensor, MeanState]:
        """Causal: the running mean of v over the real tokens 0..t (after the state's), [B, T, D], and the state."""
        B, T, D = x.shape
        v = self.v_proj(x).to(compute_dtype(x.dtype))                                       # [B, T, D]
        if state is not None:
            if not isinstance(state, MeanState):
                raise TypeError(f"state must be the MeanState returned by this attention, got {type(state).__name__}")
            if state.total.shape != (B, D):
                raise ValueError(f"state is for batch/width {list(state.total.shape)}, input has batch {B} and "
                                 f"width {D}")
        prev = v.new_zeros(B, D) if state is None else state.total.to(v.dtype)
        count = 0 if state is None else state.count
        if padding_mask is None:
            seen = count + torch.arange(1, T + 1, device=x.device, dtype=v.dtype)[None, :, None]   # [1, T, 1]
        else:
            valid = padding_mask[..., None].to(v.dtype)                                     # [B, T, 1]
            v, seen = v * valid, count + valid.cumsum(1)
        total = prev[:, None] + v.cumsum(1)                                                 # [B, T, D] inclusive
        out = total / seen.clamp(min=1)
        return out, MeanState(total[:, -1] if T else prev, count + T)  # (streaming takes no padding mask)

    # ------------------------------------------------------------------------------------------ decoding
    def cross_cache(self, context: torch.Tensor, context_mask: torch.Tensor | None = None) -> MeanCrossCache:
        """Only the source's mean value is kept: a decoding step costs the same for any source length."""
        super().cross_cache(context, context_mask)  # validates
        return MeanCrossCache(self.source_mean(context, context_mask))

    def cross_step(self, x: torch.Tensor, cache: MeanCrossCache) -> torch.Tensor:
        if not isinstance(cache, MeanCrossCache) or cache.memory.shape[1:] != (1, self.embed_dim):
            raise TypeError("cache must be the MeanCrossCache that this attention's cross_cache() returned")
        return self.out_proj(cache.memory.expand(x.shape[0], x.shape[1], self.embed_dim).to(x.dtype))


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """Each query's output by a loop: the plain mean of W_v x_s over the real keys s it may see (causal: s <= t),
    zeros for a padded query or one without a key, then W_o.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    src = x if context is None else context
    B, T, D = x.shape
    S = src.shape[1]
    v = m.v_proj(src).double()
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    km = ones(B, S) if key_mask is None else key_mask
    out = torch.zeros(B, T, D, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            keys = allowed_keys(m, t, S, km[b])
            if keys and (padding_mask is None or bool(padding_mask[b, t])):
                out[b, t] = v[b, keys].mean(0)
    return m.out_proj(out.to(x.dtype))
