"""S4D: diagonal state-space layer (Gu et al., NeurIPS 2022, "On the parameterization and initialization of
diagonal state space models"), used as a drop-in token mixer in place of attention.

Per channel c (all D channels independent, num_heads is not used) and N/2 complex modes n (conjugate pairs):

    h_t = A_bar h_{t-1} + u_t,   y_t = 2 Re(sum_n C'_n h_t,n) + D_c u_t     (recurrent step, decoding)
    y = K * u + D u,  K_l = 2 Re(sum_n C'_n A_bar_n^l)                      (causal convolution, training)

with zero-order-hold discretisation A_bar = exp(dt A), C' = C (exp(dt A) - 1) / A, S4D-Lin initialisation
A_n = -1/2 + i pi n, dt log-uniform in [dt_min, dt_max]. The convolution is done with an FFT (O(T log T)); the
kernel is built from A^(a c + j) = A^(a c) A^j (c ~ sqrt(T)) as a batched matmul, so the [D, N/2, T] Vandermonde
tensor is never formed and only O(D N sqrt(T)) complex exponentials are taken. Noncausal: bidirectional (a second
kernel runs over the reversed sequence and the two are added), as S4's ``bidirectional`` option. Output:
out_proj(GELU(y)). Padded tokens are zeroed at input.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import Attention, StreamingState


@dataclass
class S4DState(StreamingState):
    """Streaming state of causal S4D: the SSM state after the last token."""

    h: torch.Tensor  # [B, D, N/2] complex


@register_attention("s4d")
class S4DAttention(Attention):
    """S4D diagonal SSM (Gu et al. 2022): FFT convolution for training, recurrent step for decoding.

    Streaming state (causal): :class:`S4DState` (fixed size, D x N/2 complex).
    """

    family = "state space model (diagonal, time-invariant)"
    decoding_state = "D x N/2 complex"
    patterns = ("causal", "noncausal")
    streaming = True
    description = "S4D diagonal state-space layer (FFT convolution; recurrent state for streaming)"
    test_options: ClassVar[dict[str, Any]] = {"state_size": 8}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", state_size: int = 64,
                 dt_min: float = 1e-3, dt_max: float = 1e-1, bias: bool = True) -> None:
        """S4D.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            state_size: N, the SSM state per channel (even: N/2 complex conjugate pairs).
            dt_min: the smallest initial step dt (steps are drawn log-uniform in [dt_min, dt_max]).
            dt_max: the largest initial step dt.
            bias: a bias in the output projection.
        """
        super().__init__(embed_dim, num_heads, pattern)
        if state_size < 2 or state_size % 2:
            raise ValueError(f"state_size must be an even number >= 2 (complex conjugate pairs), got {state_size}")
        self.state_size = state_size
        n2 = state_size // 2
        ndir = 2 if pattern == "noncausal" else 1
        D = embed_dim
        log_dt = torch.rand(ndir, D) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        self.log_dt = nn.Parameter(log_dt)  # [ndir, D]
        self.log_A_real = nn.Parameter(torch.full((ndir, D, n2), math.log(0.5)))  # Re A = -exp(.)
        self.A_imag = nn.Parameter(math.pi * torch.arange(n2, dtype=torch.float32).repeat(ndir, D, 1))
        self.C = nn.Parameter(torch.randn(ndir, D, n2, 2) * math.sqrt(0.5))  # complex C as (re, im)
        self.skip = nn.Parameter(torch.randn(D))  # D_c
        self.out_proj = nn.Linear(D, D, bias=bias)

    def discretize(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(dt A, C') each [ndir, D, N/2] complex."""
        dt = torch.exp(self.log_dt)[..., None]  # [ndir, D, 1]
        A = torch.complex(-torch.exp(self.log_A_real), self.A_imag)  # [ndir, D, N2]
        dtA = A * dt
        cb = torch.view_as_complex(self.C.contiguous()) * (torch.exp(dtA) - 1.0) / A
        return dtA, cb

    @staticmethod
    def vandermonde(coef: torch.Tensor, dtA: torch.Tensor, L: int) -> torch.Tensor:
        """2 Re(sum_n coef_n exp(dtA_n l)) for l = 0..L-1: coef [..., D, N2] (broadcast with dtA [..., D, N2])
        -> [..., D, L] real. With l = a*c + j (c ~ sqrt(L)), A^l = A^(a c) A^j, so it is one batched complex matmul
        [nb, N2] x [N2, c] per channel: O(D N L) multiply-adds but only O(D N sqrt(L)) exponentials, and no
        [D, N2, L] tensor is formed (the direct Vandermonde form is :func:`naive_kernel`)."""
        c = max(1, math.isqrt(max(L - 1, 0)) + 1)
        nb = -(-L // c)
        j = torch.arange(c, device=dtA.device).to(dtA.dtype)
        a = (torch.arange(nb, device=dtA.device) * c).to(dtA.dtype)
        inner = torch.exp(dtA[..., None] * j)  # [..., D, N2, c]
        outer = coef[..., None] * torch.exp(dtA[..., None] * a)  # [..., D, N2, nb]
        return 2 * (outer.transpose(-1, -2) @ inner).real.flatten(-2)[..., :L]  # [..., D, L]

    def kernel(self, dtA: torch.Tensor, cb: torch.Tensor, L: int) -> torch.Tensor:
        """Convolution kernel K_l = 2 Re(sum_n C'_n A_bar_n^l): [ndir, D, L]."""
        return self.vandermonde(cb, dtA, L)

    @staticmethod
    def decayed_sum(u: torch.Tensor, dtA: torch.Tensor) -> torch.Tensor:
        """sum_l A_bar^l u_l: u [B, D, L] real, dtA [D, N2] -> [B, D, N2] complex (same factorisation as
        :meth:`vandermonde`)."""
        B, D, L = u.shape
        c = max(1, math.isqrt(max(L - 1, 0)) + 1)
        nb = -(-L // c)
        j = torch.arange(c, device=dtA.device).to(dtA.dtype)
        a = (torch.arange(nb, device=dtA.device) * c).to(dtA.dtype)
        inner = torch.exp(dtA[..., None] * j)  # [D, N2, c]
        outer = torch.exp(dtA[..., None] * a)  # [D, N2, nb]
        blocks = F.pad(u, (0, nb * c - L)).view(B, D, nb, c).to(dtA.dtype)  # [B, D, nb, c]
        partial = blocks @ inner.transpose(-1, -2)  # [B, D, nb, N2]: sum_j A^j u[a*c + j]
        return (partial * outer.transpose(-1, -2)).sum(-2)  # [B, D, N2]

    @staticmethod
    def fft_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Causal convolution y_t = sum_{s<=t} k_{t-s} u_s: u [B, D, L], k [D, L] -> [B, D, L]."""
        L = u.shape[-1]
        n = 2 * L
        return torch.fft.irfft(torch.fft.rfft(u, n=n) * torch.fft.rfft(k, n=n), n=n)[..., :L]

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        if padding_mask is not None:
            x = x * padding_mask[..., None].to(x.dtype)
        u = x.transpose(1, 2)  # [B, D, T]
        T = u.shape[-1]
        dtA, cb = self.discretize()  # [ndir, D, N2]
        new_state = None
        if self.pattern == "causal" and T == 1 and (state is not None or return_state):
            # decoding: one recurrent step h = A_bar h + u_t, y_t = 2 Re(C' h)
            h = u.to(dtA.dtype).expand(-1, -1, dtA.shape[-1])  # [B, D, N2]
            if state is not None:
                h = h + torch.exp(dtA[0]) * state.h
            new_state = h if return_state else None
            y = 2 * (cb[0] * h).sum(-1, keepdim=True).real  # [B, D, 1]
        elif T == 0:
            y = u
            if self.pattern == "causal" and return_state:
                new_state = state.h if state is not None else u.new_zeros(
                    u.shape[0], u.shape[1], dtA.shape[-1], dtype=dtA.dtype)
        else:
            kern = self.kernel(dtA, cb, T)  # [ndir, D, T]
            y = self.fft_conv(u, kern[0])
            if self.pattern == "noncausal":
                y = y + self.fft_conv(u.flip(-1), kern[1]).flip(-1)
        if self.pattern == "causal" and T > 1 and (state is not None or return_state):
            dtA0, cb0 = dtA[0], cb[0]  # [D, N2]
            if state is not None:  # contribution of the carried state: 2 Re(sum_n C'_n A_bar_n^(l+1) h_n)
                y = y + self.vandermonde(cb0 * torch.exp(dtA0) * state.h, dtA0, T)
            if return_state:  # h_T = A_bar^T h + sum_l A_bar^(T-1-l) u_l
                new_state = self.decayed_sum(u.flip(-1), dtA0)
                if state is not None:
                    new_state = new_state + torch.exp(dtA0 * T) * state.h
        y = y + self.skip[:, None] * u
        y = self.out_proj(F.gelu(y.transpose(1, 2)))  # [B, T, D]
        return (y, S4DState(new_state)) if return_state else y


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None, state=None, return_state=False):
    """S4D by its recurrence h_t = A_bar h_{t-1} + u_t, y_t = 2 Re(C' h_t) + D u_t (noncausal: plus the same
    recurrence run backwards with the second parameter set), then out_proj(GELU(y)).

    Its arguments are stated in `lavo_zoo.attention.ops.naive`; ``state`` is the complex recurrence state before
    the chunk (None: zeros) and with ``return_state`` it also returns the state after the chunk, as the module
    streams.
    """
    if padding_mask is not None:
        x = x * padding_mask[..., None]
    B, T, D = x.shape
    dtA, cb = m.discretize()
    a_bar = torch.exp(dtA)  # [ndir, D, N2]
    y = torch.zeros(B, T, D, dtype=x.dtype)
    h = torch.zeros(B, D, a_bar.shape[-1], dtype=a_bar.dtype) if state is None else state
    for t in range(T):
        h = a_bar[0] * h + x[:, t, :, None]
        y[:, t] = 2 * (cb[0] * h).sum(-1).real
    h_last = h
    if m.pattern == "noncausal":
        h = torch.zeros_like(h)
        for t in reversed(range(T)):
            h = a_bar[1] * h + x[:, t, :, None]
            y[:, t] += 2 * (cb[1] * h).sum(-1).real
    y = m.out_proj(F.gelu(y + m.skip * x))
    return (y, h_last) if return_state else y


def naive_kernel(dtA: torch.Tensor, cb: torch.Tensor, L: int) -> torch.Tensor:
    """The direct Vandermonde form K_l = 2 Re(sum_n C'_n exp(dtA_n l)): [..., N2] -> [..., L]."""
    pos = torch.arange(L).to(dtA.dtype)
    return 2 * (cb[..., None] * torch.exp(dtA[..., None] * pos)).sum(-2).real
