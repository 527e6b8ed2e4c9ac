"""DeltaNet (Schlag et al. 2021; Yang et al., NeurIPS 2024, "Parallelizing linear transformers with the delta rule
over sequence length"; flash-linear-attention's ``DeltaNet`` layer, its defaults: SiLU short convolutions of 4 taps
on queries, keys and values, SiLU and L2 norm on queries and keys, a sigmoid write strength per head, per-head
RMSNorm, no output gate).

Per head a d x d associative memory that each token overwrites at its key:

    beta_t = sigmoid(w_b . x_t),   S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T,   o_t = S_t^T q_t / sqrt(d)
    y_t = W_o RMSNorm(o_t)

Writing v under k replaces what k retrieved before (to the extent beta), where a linear attention adds it to
everything stored: a pair stored once is retrieved exactly while the keys are near-orthogonal. Training runs the
chunked form of :mod:`lavo_zoo.attention.ops.delta_rule`; decoding carries S and the convolutions' last inputs.

Patterns: causal, noncausal (a forward and a backward scan of the delta rule combined: each query reads the memory
of the tokens up to it and the memory of the tokens after it, the latter written from the end; with
``noncausal_form="final_state"`` the memory after the whole sequence) and cross (the memory after the whole real
source: an associative memory of its key-value pairs); see :mod:`lavo_zoo.attention.recurrent`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.ops.delta_rule import DELTA_RULE_KERNELS
from lavo_zoo.attention.ops.delta_rule.naive import naive_delta_rule
from lavo_zoo.attention.ops.short_conv import ShortConv, naive_short_conv
from lavo_zoo.attention.recurrent import (
    RecurrentAttention,
    RecurrentState,
    Writes,
    check_eps,
    expanded_width,
    l2norm,
    merge_heads,
    naive_source_reading,
    real_rows,
    rms_norm,
    split_heads,
    swish_gate,
)


class DeltaRuleAttention(RecurrentAttention):
    """The delta-rule layers: DeltaNet (``gated`` False: no decay, no output gate, values of width D / H) and Gated
    DeltaNet (``gated`` True: a Mamba-2 decay per head, a swish output gate, values ``expand_v`` times wider); the
    layers of the family's later forms (KDA, :mod:`lavo_zoo.attention.kda`) build on it and override the op's gates
    (:meth:`gates`) and the output stage (:meth:`output`)."""

    gated = False
    kernel_set = DELTA_RULE_KERNELS

    def __init__(self, embed_dim: int, num_heads: int, pattern: str, expand_v: float, conv_size: int,
                 chunk_size: int, norm_eps: float, kernels: str, noncausal_form: str) -> None:
        """The layer both mechanisms share (their constructors give its defaults).

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            expand_v: the values' total width as a multiple of ``embed_dim`` (d_v = expand_v D / H per head).
            conv_size: taps of the SiLU short convolutions on the query, key and value projections (0: none; causal
                queries only, see :mod:`lavo_zoo.attention.recurrent`).
            chunk_size: tokens per chunk of the PyTorch chunked form.
            norm_eps: the per-head RMSNorm's epsilon.
            kernels: 'auto', 'chunk' (the PyTorch chunked form) or 'fla' (flash-linear-attention's kernel on CUDA, in
                half precision); the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) chooses per call.
            noncausal_form: 'bidirectional' or 'final_state' (:class:`~lavo_zoo.attention.recurrent.
                RecurrentAttention`).

        Raises:
            ValueError: an ``expand_v`` that does not give a positive multiple of ``num_heads``, a ``chunk_size``
                below 1, a negative ``conv_size``, an unknown ``kernels`` or ``noncausal_form``, a ``norm_eps``
                that is not a finite number > 0.
        """
        super().__init__(embed_dim, num_heads, pattern, kernels, noncausal_form)
        value_dim = expanded_width("expand_v", expand_v, embed_dim, num_heads)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        check_eps("norm_eps", norm_eps)
        self.value_dim, self.chunk_size, self.norm_eps = value_dim, chunk_size, norm_eps
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, value_dim, bias=False)
        self.b_proj = nn.Linear(embed_dim, num_heads, bias=False)
        self.q_conv = ShortConv(embed_dim, conv_size if pattern == "causal" else 0)
        self.k_conv = ShortConv(embed_dim, conv_size)
        self.v_conv = ShortConv(value_dim, conv_size)
        if self.gated:
            self.a_proj = nn.Linear(embed_dim, num_heads, bias=False)
            self.A_log = nn.Parameter(torch.log(torch.empty(num_heads).uniform_(0, 16)))
            dt = torch.exp(torch.rand(num_heads) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
            self.g_proj = nn.Linear(embed_dim, value_dim, bias=False)
        self.norm_weight = nn.Parameter(torch.ones(value_dim // num_heads))
        self.out_proj = nn.Linear(value_dim, embed_dim, bias=False)

    @property
    def memory_shape(self) -> tuple[int, int]:
        return self.embed_dim // self.num_heads, self.value_dim // self.num_heads

    def gates(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The op's gates of x [B, T, D], by their argument names (:func:`~lavo_zoo.attention.ops.delta_rule.
        chunk_delta_rule`): beta [B, H, T] and, with the gate, the log decay g [B, H, T]. A layer of the family
        overrides it (KDA's decay per key channel, Gated DeltaNet-2's erase and write gates)."""
        beta = torch.sigmoid(self.b_proj(x)).transpose(1, 2)
        if not self.gated:
            return {"beta": beta}
        return {"beta": beta,
                "g": -torch.exp(self.A_log)[:, None] * F.softplus(self.a_proj(x) + self.dt_bias).transpose(1, 2)}

    def queries(self, q: torch.Tensor) -> torch.Tensor:
        """Convolved / activated query projections [B, T, D] -> unit-norm, scaled [B, H, T, d]."""
        return l2norm(split_heads(q, self.num_heads)) * (self.embed_dim // self.num_heads) ** -0.5

    def output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The read values o [B, H, T, d_v] of the tokens x [B, T, D] -> the layer's output [B, T, D]: per-head
        RMSNorm, the swish output gate (Gated DeltaNet), the output projection."""
        o = rms_norm(o, self.norm_weight, self.norm_eps)
        if self.gated:
            o = swish_gate(o, split_heads(self.g_proj(x), self.num_heads))
        return self.out_proj(merge_heads(o).to(x.dtype))

    def _keys_values(self, x: torch.Tensor, caches: tuple) -> tuple[torch.Tensor, torch.Tensor, tuple]:
        k, ck = self.k_conv(self.k_proj(x), caches[0])
        v, cv = self.v_conv(self.v_proj(x), caches[1])
        return (l2norm(split_heads(k, self.num_heads)), split_heads(v, self.num_heads),
                tuple(c for c in (ck, cv) if c is not None))

    def run_causal(self, x: torch.Tensor, state: RecurrentState | None) -> tuple[torch.Tensor, RecurrentState]:
        caches = state.conv if state is not None else ()
        q, cq = self.q_conv(self.q_proj(x), caches[0] if caches else None)
        k, v, ckv = self._keys_values(x, caches[1:] if caches else (None, None))
        q = self.queries(q)
        o, memory = self.start_kernels(q).delta_rule(q, k, v, state=None if state is None else state.memory,
                                                     chunk_size=self.chunk_size, **self.gates(x))
        return self.output(o, x), RecurrentState(memory, ((cq,) if cq is not None else ()) + ckv)

    def writes(self, source: torch.Tensor) -> Writes:
        k, v, _ = self._keys_values(source, (None, None))
        return Writes(k, v, self.gates(source))

    def reader(self, x: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
        q, _ = self.q_conv(self.q_proj(x))
        return self.queries(q), lambda o: self.output(o, x)


@register_attention("deltanet")
class DeltaNetAttention(DeltaRuleAttention):
    """DeltaNet (Yang et al. 2024): a d x d associative memory per head, overwritten by the delta rule.

    Streaming state (causal): :class:`~lavo_zoo.attention.recurrent.RecurrentState`, per head a d x d matrix, and
    the convolutions' last inputs.
    """

    family = "linear attention, delta rule"
    decoding_state = "H x (D/H) x (D/H) + (conv_size - 1) x 3 D conv inputs"
    description = "DeltaNet (delta-rule associative memory per head, short convs; chunked WY form, recurrent state)"
    test_options: ClassVar[dict[str, Any]] = {"chunk_size": 8}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", conv_size: int = 4,
                 chunk_size: int = 64, norm_eps: float = 1e-5, kernels: str = "auto",
                 noncausal_form: str = "bidirectional") -> None:
        """DeltaNet's layer (flash-linear-attention's ``DeltaNet``; its defaults): values of width D / H.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            conv_size: taps of the SiLU short convolutions on the query, key and value projections (0: none).
            chunk_size: tokens per chunk of the PyTorch chunked form.
            norm_eps: the per-head RMSNorm's epsilon.
            kernels: 'auto', 'chunk' (the PyTorch chunked form) or 'fla' (flash-linear-attention's kernel on CUDA, in
                half precision); the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) chooses per call.
            noncausal_form: 'bidirectional' or 'final_state' (:class:`~lavo_zoo.attention.recurrent.
                RecurrentAttention`).

        Raises:
            ValueError: a ``chunk_size`` below 1, a negative ``conv_size``, an unknown ``kernels`` or
                ``noncausal_form``, a ``norm_eps`` that is not a finite number > 0.
        """
        super().__init__(embed_dim, num_heads, pattern, 1.0, conv_size, chunk_size, norm_eps, kernels,
                         noncausal_form)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """Per row, its real tokens alone, by the delta rule token by token (S <- exp(g) S; S <- S + beta k (v - S^T k)^T):
    causal reads S_t at t, noncausal and cross as :func:`~lavo_zoo.attention.recurrent.naive_source_reading`
    reads.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    out = torch.zeros_like(x)
    for b, rows, xq, xs in real_rows(m, x, padding_mask, context, context_mask):
        q = m.queries(naive_short_conv(m.q_conv, m.q_proj(xq)))
        k = l2norm(split_heads(naive_short_conv(m.k_conv, m.k_proj(xs)), m.num_heads))
        v = split_heads(naive_short_conv(m.v_conv, m.v_proj(xs)), m.num_heads)
        beta = torch.sigmoid(m.b_proj(xs)).transpose(1, 2)
        g = (-torch.exp(m.A_log)[:, None] * F.softplus(m.a_proj(xs) + m.dt_bias).transpose(1, 2)) if m.gated else None
        if m.pattern == "causal":
            o, _ = naive_delta_rule(q, k, v, beta, g)
        else:
            o = naive_source_reading(m, naive_delta_rule, q, k, v, beta=beta, g=g)
        out[b, rows] = m.output(o, xq)[0]
    return out
