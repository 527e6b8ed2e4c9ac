"""Performer / FAVOR+ (Choromanski et al., ICLR 2021, "Rethinking attention with Performers").

Softmax attention exp(q.k / sqrt(d)) is estimated with m positive orthogonal random features

    phi(x) = exp(W x - |x|^2 / 2) / sqrt(m),   x = d^(-1/4) q or d^(-1/4) k,   W [m, d] block-orthogonal
    o_t = phi(q_t)^T sum_s phi(k_s) v_s^T / phi(q_t)^T sum_s phi(k_s)

Noncausal and cross sum over all (valid) keys. The causal form is computed chunk-wise: the prefix sums
S = sum phi(k) v^T [m, d] and z = sum phi(k) [m] of the previous chunks plus a C x C term inside the chunk, so no
T x m x d tensor is ever stored (the paper's benchmark library silently ran its causal mode as noncausal).
Numerical stabilisation: the query features are divided by their row maximum and the key features by a running
maximum (both cancel exactly in the ratio). The features are fixed after construction (``redraw_features()`` draws
new ones), so the module is deterministic in eval and train mode.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import StreamingState
from lavo_zoo.attention.common import ProjectedAttention
from lavo_zoo.attention.ops.naive import merge, qkv


def orthogonal_gaussian(num_features: int, dim: int, dtype: torch.dtype = torch.float32,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """[num_features, dim] random matrix: blocks of orthonormal rows, each row rescaled to the norm of a Gaussian
    vector (so every row is marginally N(0, I) while rows in a block are exactly orthogonal).

    Args:
        num_features: the rows (random features).
        dim: the columns (the head dim); rows come in blocks of ``dim``.
        dtype: the result's dtype (drawn in float64).
        device: where it is drawn (None: the default device).
    """
    blocks = []
    for _ in range(math.ceil(num_features / dim)):
        qmat, _ = torch.linalg.qr(torch.randn(dim, dim, dtype=torch.float64, device=device))
        blocks.append(qmat.T)
    w = torch.cat(blocks, 0)[:num_features]
    norms = torch.randn(num_features, dim, dtype=torch.float64, device=device).norm(dim=1, keepdim=True)
    return (w * norms).to(dtype)


@dataclass
class PerformerState(StreamingState):
    """Streaming state of causal Performer: key-feature prefix sums scaled by exp(-m)."""

    kv: torch.Tensor  # [B, H, m, d] sum_s phi(k_s) v_s^T
    z: torch.Tensor  # [B, H, m] sum_s phi(k_s)
    m: torch.Tensor  # [B, H] running stabiliser (max log-feature)


@register_attention("performer")
class PerformerAttention(ProjectedAttention):
    """Performer FAVOR+ (Choromanski et al. 2021) with ``num_features`` positive orthogonal random features.

    Streaming state (causal): :class:`PerformerState` (fixed size, m x d per head).
    """

    family = "linear attention (random features)"
    decoding_state = "H x m x (D/H + 1) + H"
    patterns = ("causal", "noncausal", "cross")
    streaming = True
    description = "Performer FAVOR+ (positive orthogonal random features, chunked causal prefix sums)"
    test_options: ClassVar[dict[str, Any]] = {"num_features": 12, "chunk_size": 8}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", num_features: int = 64,
                 chunk_size: int = 64, bias: bool = True) -> None:
        """Performer FAVOR+.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            num_features: m, the positive orthogonal random features per head.
            chunk_size: tokens per chunk of the causal prefix sums.
            bias: biases in the q, k, v and output projections.
        """
        super().__init__(embed_dim, num_heads, pattern, bias)
        if num_features <= 0 or chunk_size <= 0:
            raise ValueError(f"num_features ({num_features}) and chunk_size ({chunk_size}) must be positive")
        self.num_features = num_features
        self.chunk_size = chunk_size
        self.register_buffer("features", torch.empty(num_heads, num_features, self.head_dim))  # W [H, m, d]
        self.redraw_features()

    @torch.no_grad()
    def redraw_features(self) -> None:
        """Draw a fresh block-orthogonal feature matrix for every head (uses torch's global RNG)."""
        for h in range(self.num_heads):
            self.features[h] = orthogonal_gaussian(self.num_features, self.head_dim, self.features.dtype,
                                                   self.features.device)

    def log_features(self, x: torch.Tensor) -> torch.Tensor:
        """log phi(x) up to the constant -log sqrt(m): x [B, H, T, d] (unscaled q or k) -> [B, H, T, m]."""
        x = x * self.head_dim ** -0.25
        return x @ self.features.to(x.dtype).transpose(-1, -2)[None] - 0.5 * (x * x).sum(-1, keepdim=True)

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        q, k, v = self.qkv(x, context)  # [B, H, T, d], [B, H, S, d]
        key_mask = context_mask if self.pattern == "cross" else padding_mask
        lq = self.log_features(q)
        phi_q = torch.exp(lq - lq.amax(-1, keepdim=True).detach())  # [B, H, T, m], row max cancels
        lk = self.log_features(k)  # [B, H, S, m]
        if key_mask is not None:
            lk = lk.masked_fill(~key_mask[:, None, :, None], float("-inf"))
        if self.pattern == "causal":
            o, state = self._causal(phi_q, lk, v, state)
            y = self.output(o)
            return (y, state) if return_state else y
        with torch.no_grad():
            m = lk.amax((2, 3), keepdim=True)  # [B, H, 1, 1]
            m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        phi_k = torch.exp(lk - m)  # [B, H, S, m]; 0 for padded keys
        kv = phi_k.transpose(-1, -2) @ v  # [B, H, m, d]
        z = phi_k.sum(2)  # [B, H, m]
        den = phi_q @ z[..., None]  # [B, H, T, 1]
        den = den.masked_fill(den == 0, 1.0)  # no valid key: the numerator is 0 too
        return self.output((phi_q @ kv) / den)

    def _causal(self, phi_q: torch.Tensor, lk: torch.Tensor, v: torch.Tensor, state: Any
                ) -> tuple[torch.Tensor, Any]:
        B, H, _, mf = phi_q.shape
        d = v.shape[-1]
        if state is None:
            kv = v.new_zeros(B, H, mf, d)
            z = v.new_zeros(B, H, mf)
            m = v.new_full((B, H), float("-inf"))
        else:
            kv, z, m = state.kv, state.z, state.m
        outs = []
        # split (not slice) so that backward is one concatenation, not a full-size zero tensor per chunk
        for pq, lkc, vc in zip(*(t.split(self.chunk_size, 2) for t in (phi_q, lk, v))):  # [B, H, L, .]
            L = pq.shape[2]
            with torch.no_grad():  # running stabiliser: a constant factor on every key feature, cancels
                m_new = torch.maximum(m, lkc.amax((2, 3)))  # [B, H]
                m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
                decay = torch.exp(m - m_safe)  # [B, H]
            kv = kv * decay[..., None, None]
            z = z * decay[..., None]
            pk = torch.exp(lkc - m_safe[..., None, None])  # [B, H, L, m]
            tril = torch.ones(L, L, dtype=torch.bool, device=v.device).tril()
            a_in = (pq @ pk.transpose(-1, -2)).masked_fill(~tril, 0.0)  # [B, H, L, L]
            num = pq @ kv + a_in @ vc  # [B, H, L, d]
            den = pq @ z[..., None] + a_in.sum(-1, keepdim=True)  # [B, H, L, 1]
            den = den.masked_fill(den == 0, 1.0)  # no valid key yet: the numerator is 0 too
            outs.append(num / den)
            kv = kv + pk.transpose(-1, -2) @ vc
            z = z + pk.sum(2)
            m = m_new
        o = torch.cat(outs, 2) if outs else v.new_zeros(B, H, 0, d)
        return o, PerformerState(kv, z, m)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """FAVOR+ quadratic form with the module's random features: A = phi(Q) phi(K)^T (causally masked),
    o = A V / A 1, phi(x) = exp(W x' - |x'|^2/2), x' = d^(-1/4) x (no stabilisation).

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    q, k, v = qkv(m, x, context)
    _, _, T, d = q.shape
    S = k.shape[2]
    w = m.features.to(q.dtype)  # [H, mf, d]

    def phi(z):
        z = z * d ** -0.25
        return torch.exp(torch.einsum("bhtd,hfd->bhtf", z, w) - 0.5 * (z * z).sum(-1, keepdim=True))

    a = phi(q) @ phi(k).transpose(-1, -2)  # [B, H, T, S]
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    if key_mask is not None:
        a = a * key_mask[:, None, None, :]
    if m.pattern == "causal":
        a = a * torch.ones(T, S, dtype=torch.bool).tril()
    den = a.sum(-1, keepdim=True)
    return merge(m, (a @ v) / torch.where(den == 0, torch.ones_like(den), den))
