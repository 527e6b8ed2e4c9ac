"""S4D: diagonal state-space layer (Gu et al., NeurIPS 2022, "On the parameterization and initialization of
diagonal state space models"), used as a drop-in token mixer in place of attention.

Per channel c (all D channels independent, num_heads is not used) and N/2 complex modes n (conjugate pairs):

    h_t = A_bar h_{t-1} + u_t,   y_t = 2 Re(sum_n C'_n h_t,n) + D_c u_t     (recurrent step, decoding)
    y = K * u + D u,  K_l = 2 Re(sum_n C'_n A_bar_n^l)                      (causal convolution, training)

with zero-order-hold discretisation A_bar = exp(dt A), C' = C (exp(dt A) - 1) / A, S4D-Lin initialisation
A_n = -1/2 + i pi n, dt log-uniform in [dt_min, dt_max]. The convolution is done with an FFT (O(T log T)); the
kernel is built in chunks of positions (recomputed in the backward pass) so that the [D, N/2, T] Vandermonde
tensor is never held whole. Noncausal: bidirectional (a second kernel runs over the reversed sequence and the
two are added), as S4's ``bidirectional`` option. Output: out_proj(GELU(y)). Padded tokens are zeroed at input.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import Attention


def _kernel_chunk(dtA: torch.Tensor, cb: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """K at positions pos: dtA, cb [..., N2] complex, pos [L] -> [..., L] real."""
    return 2 * torch.einsum("...n,...nl->...l", cb, torch.exp(dtA[..., None] * pos.to(dtA.dtype))).real


@register_attention("s4d")
class S4DAttention(Attention):
    """S4D diagonal SSM (Gu et al. 2022): FFT convolution for training, recurrent step for decoding.

    Streaming state (causal): h [B, D, N/2] complex, the SSM state after the last token.
    """

    patterns = ("causal", "noncausal")
    streaming = True
    description = "S4D diagonal state-space layer (FFT convolution; recurrent state for streaming)"
    kernel_chunk_elems: int = 1 << 22  # complex numbers of the Vandermonde tensor built at once

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", state_size: int = 64,
                 dt_min: float = 1e-3, dt_max: float = 1e-1, bias: bool = True) -> None:
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

    def kernel(self, dtA: torch.Tensor, cb: torch.Tensor, L: int) -> torch.Tensor:
        """Convolution kernel [ndir, D, L], built in position chunks (each recomputed in backward)."""
        per = max(1, self.kernel_chunk_elems // max(1, dtA.numel()))
        pos = torch.arange(L, device=dtA.device)
        parts = []
        for a in range(0, L, per):
            p = pos[a:a + per]
            if torch.is_grad_enabled() and (dtA.requires_grad or cb.requires_grad) and L > per:
                parts.append(checkpoint(_kernel_chunk, dtA, cb, p, use_reentrant=False))
            else:
                parts.append(_kernel_chunk(dtA, cb, p))
        return torch.cat(parts, -1)

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
        B, D, T = u.shape
        dtA, cb = self.discretize()  # [ndir, D, N2]
        if T == 0:
            y = u
        else:
            kern = self.kernel(dtA, cb, T)  # [ndir, D, T]
            y = self.fft_conv(u, kern[0])
            if self.pattern == "noncausal":
                y = y + self.fft_conv(u.flip(-1), kern[1]).flip(-1)
        new_state = None
        if self.pattern == "causal" and (state is not None or return_state):
            dtA0, cb0 = dtA[0], cb[0]  # [D, N2]
            pos = torch.arange(T + 1, device=x.device).to(dtA0.dtype)
            powers = torch.exp(dtA0[..., None] * pos)  # [D, N2, T+1]: A_bar^0 .. A_bar^T
            if state is not None:  # contribution of the carried state: 2 Re(C' A_bar^(l+1) h)
                y = y + 2 * torch.einsum("bdn,dn,dnl->bdl", state, cb0, powers[..., 1:]).real
            if return_state:  # h_T = A_bar^T h + sum_l A_bar^(T-1-l) u_l
                new_state = torch.einsum("bdl,dnl->bdn", u.to(powers.dtype), powers[..., :T].flip(-1))
                if state is not None:
                    new_state = new_state + powers[..., T] * state
        y = y + self.skip[:, None] * u
        y = self.out_proj(F.gelu(y.transpose(1, 2)))  # [B, T, D]
        return (y, new_state) if return_state else y
