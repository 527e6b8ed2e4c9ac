"""Nystromformer (Xiong et al., AAAI 2021, "Nystromformer: A Nystrom-based algorithm for approximating
self-attention").

With landmarks Q~, K~ = means of C contiguous segments of the (scaled) queries and keys:

    softmax(Q K^T) V  ~=  softmax(Q K~^T) pinv(softmax(Q~ K~^T)) softmax(Q~ K^T) V

pinv by the paper's iterative (cubic Newton-Schulz) method, or exact (``pinv_iterations=0``). With C >= T the
landmarks are the tokens themselves and (with an exact pinv of an invertible matrix) the output is exactly softmax
attention. Landmarks are means over real tokens only; empty segments are dropped, so padding never matters.
Unlike the official code, the pinv initialisation is scaled per matrix, not by a maximum over the whole batch.
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.common import ProjectedAttention, masked_softmax, segment_means
from lavo_zoo.attention.ops.naive import merge, ones, qkv, seg_means


def iterative_pinv(a: torch.Tensor, iterations: int = 6) -> torch.Tensor:
    """Moore-Penrose pseudo-inverse of a [..., n, m] by the Nystromformer iteration
    Z <- 1/4 Z (13 I - A Z (15 I - A Z (7 I - A Z))), Z_0 = A^T / (||A||_1 ||A||_inf)."""
    if iterations <= 0:
        return torch.linalg.pinv(a)
    eye = torch.eye(a.shape[-2], dtype=a.dtype, device=a.device)
    norm = a.abs().sum(-2).amax(-1) * a.abs().sum(-1).amax(-1)  # [...]
    z = a.transpose(-1, -2) / norm.masked_fill(norm == 0, 1.0)[..., None, None]
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


@register_attention("nystromformer")
class NystromAttention(ProjectedAttention):
    """Nystromformer (Xiong et al. 2021) with ``num_landmarks`` segment-mean landmarks."""

    family = "low-rank (Nystrom landmarks)"
    decoding_state = "none (no causal pattern)"
    patterns = ("noncausal", "cross")
    streaming = False
    mixes_queries = ("cross",)  # query landmarks are segment means
    description = "Nystromformer (segment-mean landmarks, iterative pseudo-inverse)"
    test_options: ClassVar[dict[str, Any]] = {"num_landmarks": 6, "pinv_iterations": 0}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "noncausal", num_landmarks: int = 64,
                 pinv_iterations: int = 6, bias: bool = True) -> None:
        """Nystromformer.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            num_landmarks: C, the segment-mean landmarks (with C >= T the attention is exact).
            pinv_iterations: the iterations of the paper's pseudo-inverse; 0: the exact one.
            bias: biases in the q, k, v and output projections.
        """
        super().__init__(embed_dim, num_heads, pattern, bias)
        if num_landmarks <= 0:
            raise ValueError(f"num_landmarks must be positive, got {num_landmarks}")
        self.num_landmarks = num_landmarks
        self.pinv_iterations = pinv_iterations

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool) -> torch.Tensor:
        q, k, v = self.qkv(x, context)  # [B, H, T, d], [B, H, S, d]
        q = q * self.head_dim ** -0.5
        key_mask = context_mask if self.pattern == "cross" else padding_mask
        q_land, q_ok = segment_means(q, padding_mask, self.num_landmarks)  # [B, H, Cq, d], [B, Cq]
        k_land, k_ok = segment_means(k, key_mask, self.num_landmarks)  # [B, H, Ck, d], [B, Ck]
        f = masked_softmax(q @ k_land.transpose(-1, -2), k_ok[:, None, None, :])  # [B, H, T, Ck]
        a = masked_softmax(q_land @ k_land.transpose(-1, -2), k_ok[:, None, None, :])  # [B, H, Cq, Ck]
        a = a * q_ok[:, None, :, None].to(a.dtype)  # empty query landmarks: zero rows
        kmask = None if key_mask is None else key_mask[:, None, None, :]
        b = masked_softmax(q_land @ k.transpose(-1, -2), kmask) * q_ok[:, None, :, None].to(a.dtype)  # [B,H,Cq,S]
        o = f @ (iterative_pinv(a, self.pinv_iterations) @ (b @ v))  # [B, H, T, d]
        return self.output(o)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """Nystrom formula with explicitly looped landmarks and the exact pseudo-inverse.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    q, k, v = qkv(m, x, context)
    B, H, T, d = q.shape
    S = k.shape[2]
    q = q * d ** -0.5
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    qm = ones(B, T) if padding_mask is None else padding_mask
    km = ones(B, S) if key_mask is None else key_mask
    out = torch.zeros_like(q)
    for b in range(B):
        keys = [s for s in range(S) if bool(km[b, s])]
        for h in range(H):
            ql, qok = seg_means(q[b, h], qm[b], m.num_landmarks)
            kl, kok = seg_means(k[b, h], km[b], m.num_landmarks)
            ql = ql[[c for c, ok in enumerate(qok) if ok]]
            kl = kl[[c for c, ok in enumerate(kok) if ok]]
            f = torch.softmax(q[b, h] @ kl.T, -1)
            a = torch.softmax(ql @ kl.T, -1)
            bm = torch.softmax(ql @ k[b, h, keys].T, -1)
            out[b, h] = f @ torch.linalg.pinv(a) @ bm @ v[b, h, keys]
    return merge(m, out)
