"""Based's linear attention (Arora et al., ICML 2024, "Simple linear attention language models balance the
recall-throughput tradeoff"; flash-linear-attention's ``BasedLinearAttention``, Zoology's ``Based``).

Queries and keys are projected to ``feature_dim`` (f = 16) per head and mapped by the second-order Taylor
expansion of exp, phi(q) . phi(k) = 1 + q.k / sqrt(f) + (q.k)^2 / (2 f):

    phi(x) = [1, x / f^(1/4), x_i^2 / sqrt(2 f) (i), x_i x_j / sqrt(f) (i < j)]        (1 + f + f (f + 1) / 2 features)
    o_t = sum_{s <= t} phi(q_t).phi(k_s) v_s / (sum_{s <= t} phi(q_t).phi(k_s) + eps)

so the state per head is sum phi(k) [v, 1]^T, a (1 + f + f(f+1)/2) x (d + 1) matrix (153 x (d + 1) at f = 16),
whatever the length. Training runs the chunked form of :mod:`lavo_zoo.attention.ops.gated_linear` (no gate; the
normaliser is the value column of ones); decoding carries the state.

The reference layer has no short convolution; the Based architecture puts one in the neighbouring layers
(Zoology's MQAR runs alternate a BaseConv layer with this one). ``conv_size`` > 0 adds a short convolution on the
query, key and value projections (flash-linear-attention's form in its other layers), off by default as in the
reference layer.

Patterns: causal, noncausal and cross, see :mod:`lavo_zoo.attention.recurrent`. Without a decay, noncausal
attention is every query against the sums over all real tokens (Zoology's ``causal=False``; LION-LIT) in both of its
forms: the forward and backward scans, which count each key once, add up to those sums, so the layer reads the sums
(one pass; its noncausal state is their constant size). With a short convolution the two forms still agree, since
the keys and values are convolved over the sequence before either reads them. Cross reads the sums over the real
source tokens. Projections without bias, as the reference.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.ops.gated_linear import GATED_LINEAR_KERNELS
from lavo_zoo.attention.ops.gated_linear.naive import naive_gated_linear
from lavo_zoo.attention.ops.short_conv import ShortConv, naive_short_conv
from lavo_zoo.attention.recurrent import (
    RecurrentAttention,
    RecurrentState,
    Writes,
    check_eps,
    merge_heads,
    naive_source_reading,
    real_rows,
    split_heads,
)


def taylor_features(x: torch.Tensor) -> torch.Tensor:
    """x [..., f] -> [..., 1 + f + f (f + 1) / 2] with phi(x).phi(y) = 1 + x.y / sqrt(f) + (x.y)^2 / (2 f)."""
    f = x.shape[-1]
    i, j = torch.triu_indices(f, f, 1, device=x.device)
    diag = x * x / math.sqrt(2 * f)
    off = x[..., i] * x[..., j] / math.sqrt(f)
    return torch.cat([torch.ones_like(x[..., :1]), x / f ** 0.25, diag, off], -1)


@register_attention("based")
class BasedAttention(RecurrentAttention):
    """Based (Arora et al. 2024): linear attention with the 2nd-order Taylor feature map of exp, normalised.

    Streaming state (causal): :class:`~lavo_zoo.attention.recurrent.RecurrentState`, per head a
    (1 + f + f (f + 1) / 2) x (d + 1) matrix (feature sums times values and the normaliser).
    """

    family = "linear attention (Taylor feature map)"
    decoding_state = "H x (1 + f + f(f+1)/2) x (D/H + 1) (+ conv inputs when conv_size > 0)"
    description = "Based linear attention (2nd-order Taylor features of exp, normalised; chunked, recurrent state)"
    kernel_set = GATED_LINEAR_KERNELS
    test_options: ClassVar[dict[str, Any]] = {"feature_dim": 4, "chunk_size": 8, "conv_size": 3}
    source_op = False  # no decay: a source's state is the plain sum of its writes
    noncausal_state = ("H x (1 + f + f(f+1)/2) x (D/H + 1), the sums after the sequence (no decay: both noncausal "
                       "forms read them; no streaming)")

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", feature_dim: int = 16,
                 conv_size: int = 0, chunk_size: int = 64, eps: float = 1e-12, kernels: str = "auto",
                 noncausal_form: str = "bidirectional") -> None:
        """Based's layer (flash-linear-attention's ``BasedLinearAttention``; its defaults).

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            feature_dim: f, the width per head that queries and keys are projected to before the Taylor feature map
                (1 + f + f (f + 1) / 2 features).
            conv_size: taps of a short convolution on the query, key and value projections (0: none, as the
                reference layer; causal queries only, see :mod:`lavo_zoo.attention.recurrent`).
            chunk_size: tokens per chunk of the PyTorch chunked form.
            eps: added to the normaliser (a query that sees no weight reads zeros, not NaN).
            kernels: 'auto', 'chunk' (the PyTorch chunked form) or 'fla' (flash-linear-attention's kernel on CUDA);
                the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) chooses per call.
            noncausal_form: 'bidirectional' or 'final_state' (:class:`~lavo_zoo.attention.recurrent.
                RecurrentAttention`; the same function for Based, see the module docstring).

        Raises:
            ValueError: a ``feature_dim`` or ``chunk_size`` below 1, a negative ``conv_size``, an unknown
                ``kernels`` or ``noncausal_form``, an ``eps`` that is not a finite number > 0.
        """
        super().__init__(embed_dim, num_heads, pattern, kernels, noncausal_form)
        if feature_dim < 1 or chunk_size < 1:
            raise ValueError(f"feature_dim ({feature_dim}) and chunk_size ({chunk_size}) must be >= 1")
        check_eps("eps", eps)
        self.feature_dim, self.chunk_size, self.eps = feature_dim, chunk_size, eps
        self.q_proj = nn.Linear(embed_dim, num_heads * feature_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, num_heads * feature_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        # queries are convolved in causal attention only (see lavo_zoo.attention.recurrent)
        self.q_conv = ShortConv(num_heads * feature_dim, conv_size if pattern == "causal" else 0, activation=False)
        self.k_conv = ShortConv(num_heads * feature_dim, conv_size, activation=False)
        self.v_conv = ShortConv(embed_dim, conv_size, activation=False)

    @property
    def memory_shape(self) -> tuple[int, int]:
        f = self.feature_dim
        return 1 + f + f * (f + 1) // 2, self.embed_dim // self.num_heads + 1

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, feature_dim={self.feature_dim}"

    def _keys_values(self, x: torch.Tensor, caches: tuple) -> tuple[torch.Tensor, torch.Tensor, tuple]:
        """phi(k) [B, H, T, F] and [v, 1] [B, H, T, d + 1] of x [B, T, D], and the convolutions' caches."""
        k, ck = self.k_conv(self.k_proj(x), caches[0])
        v, cv = self.v_conv(self.v_proj(x), caches[1])
        v = split_heads(v, self.num_heads)
        return (taylor_features(split_heads(k, self.num_heads)), torch.cat([v, torch.ones_like(v[..., :1])], -1),
                tuple(c for c in (ck, cv) if c is not None))

    def _output(self, o: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[B, H, T, d + 1] (numerators, normaliser) -> out_proj of the normalised heads [B, T, D]."""
        return self.out_proj(merge_heads(o[..., :-1] / (o[..., -1:] + self.eps)).to(dtype))

    def run_causal(self, x: torch.Tensor, state: RecurrentState | None) -> tuple[torch.Tensor, RecurrentState]:
        caches = state.conv if state is not None else ()
        q, cq = self.q_conv(self.q_proj(x), caches[0] if caches else None)
        fk, v, ckv = self._keys_values(x, caches[1:] if caches else (None, None))
        fq = taylor_features(split_heads(q, self.num_heads))
        o, memory = self.start_kernels(fq).gated_linear(fq, fk, v, None, None if state is None else state.memory,
                                                        self.chunk_size)
        conv = ((cq,) if cq is not None else ()) + ckv
        return self._output(o, x.dtype), RecurrentState(memory, conv)

    def writes(self, source: torch.Tensor) -> Writes:
        fk, v, _ = self._keys_values(source, (None, None))
        return Writes(fk, v, {})

    def reader(self, x: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
        q, _ = self.q_conv(self.q_proj(x))
        return taylor_features(split_heads(q, self.num_heads)), lambda o: self._output(o, x.dtype)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """Per row, its real tokens alone: causal by the token recurrence of the sums, noncausal and cross as
    :func:`~lavo_zoo.attention.recurrent.naive_source_reading` reads the sums; the normalised quotient, then
    out_proj.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    out = torch.zeros_like(x)
    for b, rows, xq, xs in real_rows(m, x, padding_mask, context, context_mask):
        q = naive_short_conv(m.q_conv, m.q_proj(xq))
        k = naive_short_conv(m.k_conv, m.k_proj(xs))
        v = split_heads(naive_short_conv(m.v_conv, m.v_proj(xs)), m.num_heads)
        fq, fk = (taylor_features(split_heads(t, m.num_heads)) for t in (q, k))
        v1 = torch.cat([v, torch.ones_like(v[..., :1])], -1)
        if m.pattern == "causal":
            o, _ = naive_gated_linear(fq, fk, v1)
        else:
            o = naive_source_reading(m, naive_gated_linear, fq, fk, v1)
        o = o[..., :-1] / (o[..., -1:] + m.eps)
        out[b, rows] = m.out_proj(merge_heads(o))[0]
    return out

