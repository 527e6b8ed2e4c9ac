"""GLA, gated linear attention (Yang et al., ICML 2024, "Gated linear attention transformers with hardware-efficient
training"; flash-linear-attention's ``GatedLinearAttention``, its defaults).

Per head a [d_k, d_v] state decayed per key channel by a data-dependent gate and written with k v^T:

    alpha_t = exp(logsigmoid(W_2 W_1 x_t + b) / 16)        (low-rank gate, rank 16; one decay per key channel)
    S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t / sqrt(d_k)
    y_t = W_o (RMSNorm(o_t) * swish(W_g x_t))              (per-head RMSNorm, swish output gate)

with keys of width d_k = ``expand_k`` * D / H (0.5 D / H) and values of width D / H. Training runs the chunked form
of :mod:`lavo_zoo.attention.ops.gated_linear` (32-token chunks: see there for the numerics); decoding carries the
state. The reference layer has no short convolution by default (``use_short_conv=False``); ``conv_size`` > 0 adds
its short convolutions (with SiLU) on the query, key and value projections.

Patterns: causal, noncausal (a forward and a backward scan combined; ``noncausal_form="final_state"``: the state
after the whole sequence) and cross (the state after the whole real source), see :mod:`lavo_zoo.attention.recurrent`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
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
    expanded_width,
    merge_heads,
    naive_source_reading,
    real_rows,
    rms_norm,
    split_heads,
    swish_gate,
)


@register_attention("gla")
class GLAAttention(RecurrentAttention):
    """GLA (Yang et al. 2024): linear attention with a data-dependent decay per key channel, RMSNorm and an output
    gate.

    Streaming state (causal): :class:`~lavo_zoo.attention.recurrent.RecurrentState`, per head a d_k x d_v matrix.
    """

    family = "gated linear attention (decay per key channel)"
    decoding_state = "H x (expand_k D/H) x (D/H) (+ conv inputs when conv_size > 0)"
    description = "GLA gated linear attention (data-dependent decay per key channel; chunked, recurrent state)"
    kernel_set = GATED_LINEAR_KERNELS
    test_options: ClassVar[dict[str, Any]] = {"chunk_size": 8, "conv_size": 3}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", expand_k: float = 0.5,
                 gate_low_rank_dim: int = 16, gate_logit_normalizer: float = 16.0, conv_size: int = 0,
                 chunk_size: int = 32, norm_eps: float = 1e-5, kernels: str = "auto",
                 noncausal_form: str = "bidirectional") -> None:
        """GLA's layer (flash-linear-attention's ``GatedLinearAttention``; its defaults).

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            expand_k: the keys' (and queries') total width as a multiple of ``embed_dim`` (d_k = expand_k D / H
                per head).
            gate_low_rank_dim: the rank of the gate's low-rank projection.
            gate_logit_normalizer: the log decay is logsigmoid(gate logits) / this.
            conv_size: taps of a SiLU short convolution on the query, key and value projections (0: none, as the
                reference layer; causal queries only, see :mod:`lavo_zoo.attention.recurrent`).
            chunk_size: tokens per chunk of the PyTorch chunked form (see :mod:`lavo_zoo.attention.ops.gated_linear`
                for its numerics).
            norm_eps: the per-head RMSNorm's epsilon.
            kernels: 'auto', 'chunk' (the PyTorch chunked form) or 'fla' (flash-linear-attention's kernel on CUDA);
                the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) chooses per call.
            noncausal_form: 'bidirectional' or 'final_state' (:class:`~lavo_zoo.attention.recurrent.
                RecurrentAttention`).

        Raises:
            ValueError: an ``expand_k`` that does not give a positive multiple of ``num_heads``, a non-positive
                gate size, normaliser or ``chunk_size``, a negative ``conv_size``, an unknown ``kernels`` or
                ``noncausal_form``, a ``norm_eps`` that is not a finite number > 0.
        """
        super().__init__(embed_dim, num_heads, pattern, kernels, noncausal_form)
        key_dim = expanded_width("expand_k", expand_k, embed_dim, num_heads)
        for option, value in (("gate_low_rank_dim", gate_low_rank_dim), ("chunk_size", chunk_size),
                              ("gate_logit_normalizer", gate_logit_normalizer)):
            if not value > 0 or value == float("inf"):
                raise ValueError(f"{option} must be a finite number > 0, got {value!r}")
        check_eps("norm_eps", norm_eps)
        self.key_dim, self.chunk_size = key_dim, chunk_size
        self.gate_logit_normalizer, self.norm_eps = gate_logit_normalizer, norm_eps
        self.q_proj = nn.Linear(embed_dim, key_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, key_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.g_proj = nn.Linear(embed_dim, embed_dim, bias=False)  # output gate
        self.gk_proj = nn.Sequential(nn.Linear(embed_dim, gate_low_rank_dim, bias=False),
                                     nn.Linear(gate_low_rank_dim, key_dim, bias=True))
        self.norm_weight = nn.Parameter(torch.ones(embed_dim // num_heads))
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.q_conv = ShortConv(key_dim, conv_size if pattern == "causal" else 0, activation=conv_size > 0)
        self.k_conv = ShortConv(key_dim, conv_size, activation=conv_size > 0)
        self.v_conv = ShortConv(embed_dim, conv_size, activation=conv_size > 0)

    @property
    def memory_shape(self) -> tuple[int, int]:
        return self.key_dim // self.num_heads, self.embed_dim // self.num_heads

    def log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """log alpha [B, H, T, d_k] of x [B, T, D]."""
        return split_heads(F.logsigmoid(self.gk_proj(x)) / self.gate_logit_normalizer, self.num_heads)

    def queries(self, q: torch.Tensor) -> torch.Tensor:
        return split_heads(q, self.num_heads) * (self.key_dim // self.num_heads) ** -0.5

    def output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Per-head RMSNorm, swish gate from x, out_proj: o [B, H, T, d_v] -> [B, T, D]."""
        gate = split_heads(self.g_proj(x), self.num_heads)
        return self.out_proj(merge_heads(swish_gate(rms_norm(o, self.norm_weight, self.norm_eps), gate)).to(x.dtype))

    def _keys_values(self, x: torch.Tensor, caches: tuple) -> tuple[torch.Tensor, torch.Tensor, tuple]:
        k, ck = self.k_conv(self.k_proj(x), caches[0])
        v, cv = self.v_conv(self.v_proj(x), caches[1])
        return split_heads(k, self.num_heads), split_heads(v, self.num_heads), tuple(c for c in (ck, cv)
                                                                                     if c is not None)

    def run_causal(self, x: torch.Tensor, state: RecurrentState | None) -> tuple[torch.Tensor, RecurrentState]:
        caches = state.conv if state is not None else ()
        q, cq = self.q_conv(self.q_proj(x), caches[0] if caches else None)
        k, v, ckv = self._keys_values(x, caches[1:] if caches else (None, None))
        q = self.queries(q)
        o, memory = self.start_kernels(q).gated_linear(q, k, v, self.log_decay(x),
                                                       None if state is None else state.memory, self.chunk_size)
        return self.output(o, x), RecurrentState(memory, ((cq,) if cq is not None else ()) + ckv)

    def writes(self, source: torch.Tensor) -> Writes:
        k, v, _ = self._keys_values(source, (None, None))
        return Writes(k, v, {"g": self.log_decay(source)})

    def reader(self, x: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
        q, _ = self.q_conv(self.q_proj(x))
        return self.queries(q), lambda o: self.output(o, x)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """Per row, its real tokens alone, by the token recurrence S_t = diag(alpha_t) S_{t-1} + k_t v_t^T: causal
    reads S_t at t, noncausal and cross as :func:`~lavo_zoo.attention.recurrent.naive_source_reading` reads.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    out = torch.zeros_like(x)
    for b, rows, xq, xs in real_rows(m, x, padding_mask, context, context_mask):
        q = m.queries(naive_short_conv(m.q_conv, m.q_proj(xq)))
        k = split_heads(naive_short_conv(m.k_conv, m.k_proj(xs)), m.num_heads)
        v = split_heads(naive_short_conv(m.v_conv, m.v_proj(xs)), m.num_heads)
        g = split_heads(F.logsigmoid(m.gk_proj(xs)) / m.gate_logit_normalizer, m.num_heads)
        if m.pattern == "causal":
            o, _ = naive_gated_linear(q, k, v, g)
        else:
            o = naive_source_reading(m, naive_gated_linear, q, k, v, g=g)
        out[b, rows] = m.output(o, xq)[0]
    return out
