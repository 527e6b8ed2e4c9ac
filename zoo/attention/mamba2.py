"""Mamba-2 (Dao & Gu, ICML 2024, "Transformers are SSMs: generalized models and efficient algorithms through
structured state space duality"; flash-linear-attention's ``Mamba2`` layer, its defaults: expand 2, state 128,
one group, convolution of 4 taps with bias, gated RMSNorm after the scan).

    [z, x, B, C, dt] = W_in u_t;   [x, B, C] = SiLU(conv4([x, B, C]))              (x: E = expand * D channels)
    dt_t = softplus(dt + dt_bias) (one per head), a_t = exp(-exp(A_log) dt_t)
    h_t = a_t h_{t-1} + B_t (dt_t x_t)^T,   y_t = h_t^T C_t + D x_t                (per head: h [N, E / H])
    out_t = W_out (RMSNorm(y_t * SiLU(z_t)))

The SSD scan is gated linear attention with one decay per head (queries C, keys B, values dt x), computed in
training by the chunked form of :mod:`lavo_zoo.attention.ops.gated_linear`; decoding carries h and the
convolution's last 3 inputs. Mamba-2 has no num_heads of its own: here the E channels are split into the
contract's ``num_heads`` heads (head dim E / H).

Patterns: causal, noncausal and cross, see :mod:`lavo_zoo.attention.recurrent`; every query is its C, its own x for
the skip D x (once, after both scans) and its gate z. Noncausal: a forward and a backward scan combined, Hydra's
quasiseparable mixer with one set of parameters for both directions (``noncausal_form="final_state"``: the state after
the whole sequence); cross: the state after the whole real source.
"""
from __future__ import annotations

import math
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
    merge_heads,
    naive_source_reading,
    real_rows,
    rms_norm,
    split_heads,
)


@register_attention("mamba2")
class Mamba2Attention(RecurrentAttention):
    """Mamba-2 (Dao & Gu 2024): selective SSM with a scalar decay per head (SSD), short convolution, gated RMSNorm.

    Streaming state (causal): :class:`~lavo_zoo.attention.recurrent.RecurrentState`, per head an N x (E / H)
    matrix, and the convolution's last inputs.
    """

    family = "state space model (SSD: decay per head)"
    decoding_state = "expand D x state_size + (conv_size - 1) x (expand D + 2 state_size) conv inputs"
    description = "Mamba-2 selective state space (SSD; scalar decay per head, short conv, gated RMSNorm)"
    kernel_set = GATED_LINEAR_KERNELS
    test_options: ClassVar[dict[str, Any]] = {"state_size": 8, "chunk_size": 8}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", state_size: int = 128,
                 expand: int = 2, conv_size: int = 4, chunk_size: int = 64, norm_eps: float = 1e-5,
                 kernels: str = "auto", noncausal_form: str = "bidirectional") -> None:
        """Mamba-2's layer (flash-linear-attention's ``Mamba2``; its defaults, one group).

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``;
                the E = expand D inner channels are split into ``num_heads`` heads.
            state_size: N, the SSM state per head is N x (E / H).
            expand: E / D, the inner width.
            conv_size: taps of the SiLU short convolution (with bias) on x, B and C (0: none).
            chunk_size: tokens per chunk of the PyTorch chunked form.
            norm_eps: the gated RMSNorm's epsilon.
            kernels: 'auto', 'chunk' (the PyTorch chunked form) or 'fla' (flash-linear-attention's kernel on CUDA);
                the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) chooses per call.
            noncausal_form: 'bidirectional' or 'final_state' (:class:`~lavo_zoo.attention.recurrent.
                RecurrentAttention`).

        Raises:
            ValueError: a ``state_size``, ``expand`` or ``chunk_size`` below 1, a negative ``conv_size``, an
                unknown ``kernels`` or ``noncausal_form``, a ``norm_eps`` that is not a finite number > 0.
        """
        super().__init__(embed_dim, num_heads, pattern, kernels, noncausal_form)
        if state_size < 1 or expand < 1 or chunk_size < 1:
            raise ValueError(f"state_size ({state_size}), expand ({expand}) and chunk_size ({chunk_size}) must "
                             "be >= 1")
        check_eps("norm_eps", norm_eps)
        E = expand * embed_dim
        self.state_size, self.expand, self.inner, self.chunk_size, self.norm_eps = \
            state_size, expand, E, chunk_size, norm_eps
        self.in_proj = nn.Linear(embed_dim, 2 * E + 2 * state_size + num_heads, bias=False)  # z, x, B, C, dt
        self.conv = ShortConv(E + 2 * state_size, conv_size, activation=True, bias=True)
        dt = torch.exp(torch.rand(num_heads) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt), dt in [1e-3, 0.1]
        self.A_log = nn.Parameter(torch.log(torch.empty(num_heads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(num_heads))
        self.norm_weight = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, embed_dim, bias=False)

    @property
    def memory_shape(self) -> tuple[int, int]:
        return self.state_size, self.inner // self.num_heads

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, state_size={self.state_size}, expand={self.expand}"

    def _split(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """z [B, T, E], xBC [B, T, E + 2N], dt [B, T, H] of u [B, T, D]."""
        E, N = self.inner, self.state_size
        return self.in_proj(u).split([E, E + 2 * N, self.num_heads], -1)

    def _ssm_inputs(self, xbc: torch.Tensor, dt: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, H, T, P], keys B [B, H, T, N], queries C [B, H, T, N], values dt x, log decays [B, H, T]."""
        E, N, H = self.inner, self.state_size, self.num_heads
        x, Bm, Cm = xbc.split([E, N, N], -1)
        x = split_heads(x, H)
        dt = F.softplus(dt + self.dt_bias).transpose(1, 2)  # [B, H, T]
        g = -torch.exp(self.A_log)[:, None] * dt
        keys, queries = (t[:, None].expand(-1, H, -1, -1) for t in (Bm, Cm))
        return x, keys, queries, x * dt[..., None], g

    def output(self, y: torch.Tensor, x: torch.Tensor, z: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """y [B, H, T, P] + D x, gated RMSNorm with z [B, T, E], out_proj -> [B, T, D].

        Args:
            y: [B, H, T, P] the SSM's output per head.
            x: [B, H, T, P] the SSM's input (the skip through D).
            z: [B, T, E] the gate branch.
            dtype: the output's dtype (the layer's input's).
        """
        y = merge_heads(y + self.D[:, None, None] * x)
        return self.out_proj(rms_norm(y * F.silu(z.to(y.dtype)), self.norm_weight, self.norm_eps).to(dtype))

    def run_causal(self, u: torch.Tensor, state: RecurrentState | None) -> tuple[torch.Tensor, RecurrentState]:
        z, xbc, dt = self._split(u)
        xbc, cache = self.conv(xbc, state.conv[0] if state is not None and state.conv else None)
        x, keys, queries, values, g = self._ssm_inputs(xbc, dt)
        memory = None if state is None else state.memory
        y, memory = self.start_kernels(queries).gated_linear(queries, keys, values, g, memory, self.chunk_size)
        return self.output(y, x, z, u.dtype), RecurrentState(memory, () if cache is None else (cache,))

    def writes(self, source: torch.Tensor) -> Writes:
        _, xbc, dt = self._split(source)
        xbc, _ = self.conv(xbc)
        _, keys, _, values, g = self._ssm_inputs(xbc, dt)
        return Writes(keys, values, {"g": g})

    def reader(self, u: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
        z, xbc, dt = self._split(u)
        x, _, queries, _, _ = self._ssm_inputs(F.silu(xbc), dt)  # the query side: its activation, no convolution
        return queries, lambda y: self.output(y, x, z, u.dtype)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, u, padding_mask=None, context=None, context_mask=None):
    """Per row, its real tokens alone, by the SSM recurrence h_t = a_t h_{t-1} + B_t (dt_t x_t)^T: causal reads
    y_t = h_t^T C_t + D x_t, noncausal and cross as :func:`~lavo_zoo.attention.recurrent.naive_source_reading`
    reads.

    Its arguments are stated in `lavo_zoo.attention.ops.naive` (``u``: the input, there ``x``).
    """
    E, N, H = m.inner, m.state_size, m.num_heads
    out = torch.zeros_like(u)

    def streams(v, conv):
        z, xbc, dt = m.in_proj(v).split([E, E + 2 * N, H], -1)
        xbc = naive_short_conv(m.conv, xbc) if conv else F.silu(xbc)
        x, Bm, Cm = xbc.split([E, N, N], -1)
        dt = F.softplus(dt + m.dt_bias).transpose(1, 2)  # [1, H, T]
        return z, split_heads(x, H), Bm[:, None].expand(-1, H, -1, -1), Cm[:, None].expand(-1, H, -1, -1), dt

    for b, rows, uq, us in real_rows(m, u, padding_mask, context, context_mask):
        _, xs, Bs, _, dts = streams(us, True)
        g = -torch.exp(m.A_log)[:, None] * dts
        if m.pattern == "causal":
            z, x, _, C, _ = streams(uq, True)
            y, _ = naive_gated_linear(C, Bs, xs * dts[..., None], g)
        else:
            z, x, _, C, _ = streams(uq, False)
            y = naive_source_reading(m, naive_gated_linear, C, Bs, xs * dts[..., None], g=g)
        out[b, rows] = m.output(y, x, z, u.dtype)[0]
    return out
