"""``local``, exact sliding-window softmax attention over w keys (the shared op
:mod:`lavo_zoo.attention.ops.window`: blocked, no T x T), optional learned relative bias, streaming with the last w-1
keys and values: one of the two softmax attentions LAVO is measured against (the other is ``sdpa``).

``num_sinks`` > 0 adds StreamingLLM's attention sinks (Xiao et al., ICLR 2024): every query also sees the first
``num_sinks`` tokens, one exact softmax over the window and the sinks (:mod:`lavo_zoo.attention.ops.window.sinks`),
the control the field reports against linear attention. Its streaming state keeps the sinks' keys and values beside
the window's last w-1 (constant size). With sinks, a padded row runs on its real tokens alone (packed first), so
the sinks are the row's first real tokens whatever its padding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import StreamingState
from lavo_zoo.attention.common import KVCache, ProjectedAttention, check_cache, merge_heads, split_heads
from lavo_zoo.attention.ops.naive import heads, merge
from lavo_zoo.attention.ops.padding import gather_rows, pack
from lavo_zoo.attention.ops.window import last_positions, window_attention
from lavo_zoo.attention.ops.window.naive import local_window
from lavo_zoo.attention.ops.window.sinks import naive_sink_window, sink_window_attention


@dataclass
class SinkCache(StreamingState):
    """Streaming state of ``local`` with sinks: the sinks' keys and values and the window's last w-1 (constant)."""

    sink_keys: torch.Tensor    # [B, H, S, d] the first S = min(num_sinks, position) tokens
    sink_values: torch.Tensor  # [B, H, S, d]
    keys: torch.Tensor         # [B, H, L, d] the last L = min(w-1, position) tokens
    values: torch.Tensor       # [B, H, L, d]
    position: int              # tokens consumed so far


@register_attention("local")
class LocalAttention(ProjectedAttention):
    """Exact sliding-window softmax attention over w keys (blocked, no T x T), optional learned relative bias"""

    family = "sliding-window softmax"
    decoding_state = "2 (w-1) D last keys/values (+ 2 num_sinks D sink keys/values)"
    patterns = ("causal", "noncausal")
    streaming = True
    test_options: ClassVar[dict[str, Any]] = {"window_size": 5, "relative_bias": True}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", window_size: int = 16,
                 relative_bias: bool = False, dropout: float = 0.0, bias: bool = True, num_sinks: int = 0) -> None:
        """Exact sliding-window attention, optionally with attention sinks.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            window_size: w: causal keys [t-w+1, t], noncausal [t-w+1, t+w-1].
            relative_bias: add a learned [H, 2w-1] bias on the scores by relative position (the window's keys).
            dropout: attention dropout on the probabilities, in training.
            bias: biases in the q, k, v and output projections.
            num_sinks: StreamingLLM's attention sinks: the first ``num_sinks`` real tokens stay visible to every
                query (causal: to every later one) beside its window; 0: none.

        Raises:
            ValueError: a negative ``num_sinks``, a ``window_size`` below 1 or a dropout outside [0, 1).
        """
        super().__init__(embed_dim, num_heads, pattern, bias)
        if num_sinks < 0:
            raise ValueError(f"num_sinks must be >= 0, got {num_sinks}")
        self.num_sinks = num_sinks
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
        return (f"{super().extra_repr()}, window_size={self.window_size}, relative_bias={self.rel_bias is not None}"
                + (f", num_sinks={self.num_sinks}" if self.num_sinks else ""))

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: KVCache | None, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, KVCache]:
        if self.num_sinks:
            return self._attend_with_sinks(x, padding_mask, state, return_state)
        q, k, v = (split_heads(p(x), self.num_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        if state is not None:
            check_cache(state, x, self.num_heads)
            self._check_window(state)
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

    def _check_window(self, state: KVCache | SinkCache) -> None:
        """Refuse a cache that another window or number of sinks filled: it holds the last min(n, w - 1) keys of
        the n tokens it has seen (and the first min(n, num_sinks) as sinks); another count would shift every
        window silently."""
        n, w = state.position, self.window_size
        sinks = state.sink_keys.shape[2] if isinstance(state, SinkCache) else 0
        if state.keys.shape[2] != min(n, w - 1) or sinks != min(n, self.num_sinks):
            raise ValueError(f"state holds {state.keys.shape[2]} recent and {sinks} sink keys after {n} tokens; this "
                             f"layer (window_size {w}, num_sinks {self.num_sinks}) keeps {min(n, w - 1)} and "
                             f"{min(n, self.num_sinks)}: the state is from a layer of another configuration; continue "
                             "with the layer that returned it")

    def _attend_with_sinks(self, x: torch.Tensor, padding_mask: torch.Tensor | None, state: SinkCache | None,
                           return_state: bool) -> torch.Tensor | tuple[torch.Tensor, SinkCache]:
        if padding_mask is not None:  # the row's real tokens first: its sinks are its first real tokens
            order, inverse, real = pack(padding_mask)
            x = gather_rows(x, order)
        q, k, v = (split_heads(p(x), self.num_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        if state is not None and not isinstance(state, SinkCache):
            raise TypeError(f"state must be the SinkCache returned by this attention, got {type(state).__name__}")
        if state is not None:
            if state.keys.shape[:2] != (x.shape[0], self.num_heads):
                raise ValueError(f"state is for batch/heads {list(state.keys.shape[:2])}, input has batch "
                                 f"{x.shape[0]} and {self.num_heads} heads")
            self._check_window(state)
        n = 0 if state is None else state.position
        fresh = self.num_sinks - n if n < self.num_sinks else 0  # sinks among this chunk's first tokens
        sink_k, sink_v = k[:, :, :fresh], v[:, :, :fresh]
        past_k = past_v = None
        if state is not None:
            past_k, past_v = state.keys, state.values
            sink_k, sink_v = torch.cat([state.sink_keys, sink_k], 2), torch.cat([state.sink_values, sink_v], 2)
        keys = k if past_k is None else torch.cat([past_k, k], 2)
        values = v if past_v is None else torch.cat([past_v, v], 2)
        P = 0 if past_k is None else past_k.shape[2]
        out = sink_window_attention(q, keys, values, self.window_size, causal=self.pattern == "causal",
                                    sink_k=sink_k, sink_v=sink_v, q_start=n, k_start=n - P, bias=self.rel_bias,
                                    sink_real=None if padding_mask is None else real[:, :sink_k.shape[2]],
                                    key_real=None if padding_mask is None else real,
                                    dropout=self.dropout, training=self.training)
        if padding_mask is not None:
            out = out * real[:, None, :, None]
        y = self.out_proj(merge_heads(out).to(x.dtype))
        if padding_mask is not None:
            y = gather_rows(y, inverse)
        if not return_state:
            return y
        w = self.window_size
        return y, SinkCache(sink_k.clone(), sink_v.clone(), last_positions(past_k, k, w),
                            last_positions(past_v, v, w), n + x.shape[1])


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(attn: LocalAttention, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The ``local`` mechanism: exact sliding window of w keys, optional relative bias, with a dense [T, T] mask;
    with sinks, each row's real tokens alone with the sinks' dense mask.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    if attn.num_sinks:
        out = attn.out_proj(torch.zeros_like(x))  # padded rows: zero before the projection, as the fast path
        for b in range(x.shape[0]):
            rows = torch.arange(x.shape[1]) if padding_mask is None else padding_mask[b].nonzero()[:, 0]
            q, k, v = (heads(attn, p(x[b:b + 1, rows])) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
            o = naive_sink_window(q, k, v, attn.window_size, attn.num_sinks, attn.pattern == "causal", attn.rel_bias)
            out[b, rows] = merge(attn, o, None, x.dtype)[0]
        return out
    q, k, v = (heads(attn, p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    out = local_window(attn, q, k, v, attn.rel_bias, padding_mask, attn.pattern == "causal")
    return merge(attn, out, padding_mask, x.dtype)
