"""Kimi Delta Attention, KDA (Kimi Team, 2025, "Kimi Linear: an expressive, efficient attention architecture",
arXiv 2510.26692; flash-linear-attention's ``KimiDeltaAttention`` layer, its defaults): the gated delta rule of Gated
DeltaNet with one decay per key channel instead of one per head.

    beta_t = sigmoid(w_b . x_t)                                              (one write strength per head)
    g_t = -exp(A_log) softplus(W_f2 W_f1 x_t + dt_bias)                      (log decays, one per key channel)
    S_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t / sqrt(d_k)
    y_t = W_o (RMSNorm(o_t) * sigmoid(W_g2 W_g1 x_t + b_g))

with SiLU short convolutions of 4 taps on the query, key and value projections, L2-normalised queries and keys
(d_k = D / H), values of width d_v = ``expand_v`` d_k, the decay's projection of rank d_v (W_f1: D -> d_v, W_f2:
d_v -> D), A_log per head drawn as log U(1, 16), dt_bias per key channel as Mamba's, per-head RMSNorm gated by a
sigmoid of a rank-d_v projection with bias. ``allow_neg_eigval`` doubles beta (eigenvalues of the erase in
[-1, 1]: Grazzi et al. 2025), as the reference layer's option does.

The recurrence is the op of :mod:`lavo_zoo.attention.ops.delta_rule` with a decay per key channel (its chunked form
keeps every decay factor <= 1 for any decay, see there; flash-linear-attention's ``chunk_kda`` on CUDA). With the
decay equal over a head's key channels KDA's state is Gated DeltaNet's. The layer runs on DeltaNet's (its
projections, convolutions, normalised queries and keys, patterns and decoding: :class:`~lavo_zoo.attention.deltanet.
DeltaRuleAttention`); its gates and output are KDA's. Deliberate differences from the reference layer: the heads
are the contract's (``num_heads``, head dim D / H; no grouped value heads), and the kernel-speed options of
flash-linear-attention (``safe_gate``, ``lower_bound``: a bounded gate for its tensor-core path) are not taken.

Patterns: causal, noncausal (a forward and a backward scan combined; ``noncausal_form="final_state"``: the state
after the whole sequence) and cross (the state after the whole real source), see
:mod:`lavo_zoo.attention.recurrent`.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.deltanet import DeltaRuleAttention
from lavo_zoo.attention.ops.delta_rule.naive import naive_delta_rule
from lavo_zoo.attention.ops.short_conv import naive_short_conv
from lavo_zoo.attention.recurrent import (
    l2norm,
    merge_heads,
    naive_source_reading,
    real_rows,
    rms_norm,
    split_heads,
)


def decay_parameters(num_heads: int, channels: int) -> tuple[nn.Parameter, nn.Parameter]:
    """KDA's decay rates and biases as its reference layer draws them: A_log [H] = log U(1, 16) and dt_bias
    [channels], softplus^-1 of a rate log-uniform in [0.001, 0.1].

    Args:
        num_heads: H.
        channels: the decay's channels (every head's key channels).
    """
    A_log = nn.Parameter(torch.log(torch.empty(num_heads).uniform_(1, 16)))
    dt = torch.exp(torch.rand(channels) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
    return A_log, nn.Parameter(dt + torch.log(-torch.expm1(-dt)))


@register_attention("kda")
class KDAAttention(DeltaRuleAttention):
    """Kimi Delta Attention (Kimi Linear, 2025): the gated delta rule with a data-dependent decay per key channel.

    Streaming state (causal): :class:`~lavo_zoo.attention.recurrent.RecurrentState`, per head a d_k x d_v matrix
    (d_v = ``expand_v`` d_k), and the convolutions' last inputs.
    """

    family = "linear attention, gated delta rule (decay per key channel)"
    decoding_state = "H x (D/H) x (expand_v D/H) + (conv_size - 1) x (2 + expand_v) D conv inputs"
    description = "Kimi Delta Attention (delta rule + a decay per key channel, sigmoid-gated norm; chunked, recurrent)"
    # chunks of 20 in blocks of 8, 8 and 4 (the per-channel form's block boundaries and padding), d_v = 2 d_k,
    # beta in [0, 2]
    test_options: ClassVar[dict[str, Any]] = {"chunk_size": 20, "expand_v": 2.0, "allow_neg_eigval": True}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", expand_v: float = 1.0,
                 conv_size: int = 4, chunk_size: int = 64, norm_eps: float = 1e-5, allow_neg_eigval: bool = False,
                 kernels: str = "auto", noncausal_form: str = "bidirectional") -> None:
        """KDA's layer (flash-linear-attention's ``KimiDeltaAttention``; its defaults).

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            expand_v: the values' total width as a multiple of ``embed_dim`` (d_v = expand_v D / H per head).
            conv_size: taps of the SiLU short convolutions on the query, key and value projections (0: none, SiLU
                only, as the reference layer without them).
            chunk_size: tokens per chunk of the PyTorch chunked form.
            norm_eps: the per-head RMSNorm's epsilon.
            allow_neg_eigval: double the write strengths (beta in [0, 2]).
            kernels: 'auto', 'chunk' (the PyTorch chunked form) or 'fla' (flash-linear-attention's kernel on CUDA, in
                half precision); the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) chooses per call.
            noncausal_form: 'bidirectional' or 'final_state' (:class:`~lavo_zoo.attention.recurrent.
                RecurrentAttention`).

        Raises:
            ValueError: an ``expand_v`` that does not give a positive multiple of ``num_heads``, a ``chunk_size``
                below 1, a negative ``conv_size``, an unknown ``kernels`` or ``noncausal_form``, a ``norm_eps``
                that is not a finite number > 0.
        """
        super().__init__(embed_dim, num_heads, pattern, expand_v, conv_size, chunk_size, norm_eps, kernels,
                         noncausal_form)
        rank = self.value_dim // num_heads  # the reference layer's low rank: d_v
        self.allow_neg_eigval = allow_neg_eigval
        self.f_proj = nn.Sequential(nn.Linear(embed_dim, rank, bias=False), nn.Linear(rank, embed_dim, bias=False))
        self.A_log, self.dt_bias = decay_parameters(num_heads, embed_dim)
        self.g_proj = nn.Sequential(nn.Linear(embed_dim, rank, bias=False), nn.Linear(rank, self.value_dim))

    def log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """g [B, H, T, d_k] of x [B, T, D]: -exp(A_log) softplus(W_f2 W_f1 x + dt_bias), in fp32 (fp64 for fp64)."""
        f = self.f_proj(x).to(compute_dtype(x.dtype)) + self.dt_bias
        return -torch.exp(self.A_log)[:, None, None] * F.softplus(split_heads(f, self.num_heads))

    def strengths(self, logits: torch.Tensor) -> torch.Tensor:
        """sigmoid of the strengths' logits, doubled with ``allow_neg_eigval``."""
        return torch.sigmoid(logits) * (2.0 if self.allow_neg_eigval else 1.0)

    def gates(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """beta [B, H, T] and the log decay g [B, H, T, d_k] of x [B, T, D]."""
        return {"beta": self.strengths(self.b_proj(x)).transpose(1, 2), "g": self.log_decay(x)}

    def output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Per-head RMSNorm of o [B, H, T, d_v], gated by sigmoid(W_g2 W_g1 x + b_g), the output projection."""
        o = rms_norm(o, self.norm_weight, self.norm_eps)
        o = o * torch.sigmoid(split_heads(self.g_proj(x), self.num_heads).to(o.dtype))
        return self.out_proj(merge_heads(o).to(x.dtype))


# -------------------------------------------------------------------------------- slow reference, used by tests
def reference_inputs(m: KDAAttention, xq: torch.Tensor, xs: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """KDA's and Gated DeltaNet-2's queries (of xq), keys, values and log decays (of xs) by their definitions: the
    short convolutions by :func:`~lavo_zoo.attention.ops.short_conv.naive_short_conv`, the L2 norms, the query scale
    1 / sqrt(d_k), g = -exp(A_log) softplus(W_f2 W_f1 x + dt_bias) per key channel."""
    d = m.embed_dim // m.num_heads
    q = l2norm(split_heads(naive_short_conv(m.q_conv, m.q_proj(xq)), m.num_heads)) / math.sqrt(d)
    k = l2norm(split_heads(naive_short_conv(m.k_conv, m.k_proj(xs)), m.num_heads))
    v = split_heads(naive_short_conv(m.v_conv, m.v_proj(xs)), m.num_heads)
    f = m.f_proj[1](m.f_proj[0](xs)) + m.dt_bias
    g = -m.A_log.exp().view(-1, 1, 1) * F.softplus(split_heads(f, m.num_heads))
    return q, k, v, g


def reference_output(m: KDAAttention, o: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
    """The read values o [1, H, T, d_v] -> y [1, T, D]: RMSNorm per head, sigmoid(W_g2 W_g1 x + b_g), W_o."""
    gate = split_heads(m.g_proj[1](m.g_proj[0](xq)), m.num_heads)
    o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + m.norm_eps) * m.norm_weight * torch.sigmoid(gate)
    return m.out_proj(merge_heads(o))


def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """Per row, its real tokens alone, by the recurrence token by token (:func:`~lavo_zoo.attention.ops.delta_rule.
    naive.naive_delta_rule`: S <- diag(exp(g_t)) S, then S <- S + beta_t k_t (v_t - S^T k_t)^T): causal reads S_t at
    t, noncausal and cross as :func:`~lavo_zoo.attention.recurrent.naive_source_reading` reads.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    out = torch.zeros_like(x)
    for b, rows, xq, xs in real_rows(m, x, padding_mask, context, context_mask):
        q, k, v, g = reference_inputs(m, xq, xs)
        beta = (torch.sigmoid(m.b_proj(xs)) * (2 if m.allow_neg_eigval else 1)).transpose(1, 2)
        if m.pattern == "causal":
            o, _ = naive_delta_rule(q, k, v, beta, g)
        else:
            o = naive_source_reading(m, naive_delta_rule, q, k, v, beta=beta, g=g)
        out[b, rows] = reference_output(m, o, xq)[0]
    return out
