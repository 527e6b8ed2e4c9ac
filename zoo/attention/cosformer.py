"""cosFormer (Qin et al., ICLR 2022, "cosFormer: Rethinking softmax in attention").

Linear attention with ReLU features and a cos-based re-weighting of position distance:

    sim(q_i, k_j) = relu(q_i) . relu(k_j) * cos(pi/2 * (i - j) / M)
                  = relu(q_i)cos(a_i) . relu(k_j)cos(a_j) + relu(q_i)sin(a_i) . relu(k_j)sin(a_j),  a_i = pi/2 * i/M
    o_i = sum_j sim(q_i, k_j) v_j / max(sum_j sim(q_i, k_j), eps)

so sums of cos- and sin-weighted key features give O(T d^2) cost. Positions i = 1, 2, ... count real tokens
only (padding does not shift them).

How M (the length-dependent reweighting) is chosen:
- noncausal: M = the number of real tokens of the sequence (the paper's M = sequence length);
- cross: M = max(number of real target tokens, number of real source tokens) (as the official code);
- causal: the total length is unknown while decoding, and making M depend on the length of the current call would
  change every earlier output whenever the sequence grows (breaking causality of the running output and
  streaming == full). We therefore use a fixed horizon M = ``max_length`` (default 32768), independent of the
  data: the weight cos(pi/2 (i-j)/M) stays in [0, 1] for every distance below M, decays with distance as in the
  paper, and is the same in one pass, chunked, and streamed. Positions beyond ``max_length`` are refused (the
  weights would turn negative); build with a larger ``max_length`` for longer sequences. The causal form is
  computed chunk-wise with prefix sums (state: the four sums and the position count).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.base import StreamingState
from lavo_zoo.attention.common import ProjectedAttention
from lavo_zoo.attention.ops.naive import merge, ones, qkv


@dataclass
class CosFormerState(StreamingState):
    """Streaming state of causal cosFormer: cos/sin-weighted prefix sums and the number of tokens seen."""

    s_cos: torch.Tensor  # [B, H, d, d] sum_j relu(k_j) cos(a_j) v_j^T
    s_sin: torch.Tensor  # [B, H, d, d]
    z_cos: torch.Tensor  # [B, H, d] sum_j relu(k_j) cos(a_j)
    z_sin: torch.Tensor  # [B, H, d]
    n: int  # tokens seen


@register_attention("cosformer")
class CosFormerAttention(ProjectedAttention):
    """cosFormer (Qin et al. 2022): ReLU linear attention with cos re-weighting; causal via prefix sums.

    Streaming state (causal): :class:`CosFormerState` (fixed size, d x d per head).
    """

    family = "linear attention (ReLU, cos re-weighting)"
    decoding_state = "2 H x (D/H) x (D/H + 1)"
    patterns = ("causal", "noncausal", "cross")
    streaming = True
    mixes_queries = ("cross",)  # cross reweighting horizon M = max(#queries, #keys)
    description = "cosFormer (ReLU features, cos re-weighting; causal prefix sums with a fixed horizon)"
    test_options: ClassVar[dict[str, Any]] = {"chunk_size": 8, "max_length": 64}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", max_length: int = 32768,
                 chunk_size: int = 64, eps: float = 1e-6, bias: bool = True) -> None:
        """cosFormer; the re-weighting horizon M is the module docstring's.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            max_length: the causal horizon M (positions past it are refused; build with a larger one for longer
                sequences).
            chunk_size: tokens per chunk of the causal prefix sums.
            eps: the smallest normaliser (a query that sees no weight reads zeros, not NaN).
            bias: biases in the q, k, v and output projections.
        """
        super().__init__(embed_dim, num_heads, pattern, bias)
        if max_length <= 0 or chunk_size <= 0:
            raise ValueError(f"max_length ({max_length}) and chunk_size ({chunk_size}) must be positive")
        self.max_length = max_length
        self.chunk_size = chunk_size
        self.eps = eps

    @staticmethod
    def positions(mask: torch.Tensor | None, B: int, T: int, device: torch.device) -> torch.Tensor:
        """1-based positions counting real tokens only: [B, T] (int64).

        Args:
            mask: [B, T] bool, True = real token, or None (all real).
            B: the batch size.
            T: the sequence length.
            device: where the positions are made.
        """
        if mask is None:
            return torch.arange(1, T + 1, device=device).expand(B, T)
        return mask.long().cumsum(1)

    def cos_sin(self, f: torch.Tensor, pos: torch.Tensor, M: torch.Tensor | float
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """f [B, H, T, d] features, pos [B, T], M [B] or float -> f*cos(a), f*sin(a) with a = pi/2 * pos / M."""
        if isinstance(M, torch.Tensor):
            M = M[:, None].to(f.dtype)
        angle = (math.pi / 2) * pos.to(f.dtype) / M  # [B, T]
        return f * torch.cos(angle)[:, None, :, None], f * torch.sin(angle)[:, None, :, None]

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool
               ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        q, k, v = self.qkv(x, context)  # [B, H, T, d], [B, H, S, d]
        fq, fk = torch.relu(q), torch.relu(k)
        B, T, S = x.shape[0], q.shape[2], k.shape[2]
        key_mask = context_mask if self.pattern == "cross" else padding_mask
        if key_mask is not None:
            fk = fk * key_mask[:, None, :, None].to(fk.dtype)
        if self.pattern == "causal":
            o, state = self._causal(fq, fk, v, padding_mask, state)
            y = self.output(o)
            return (y, state) if return_state else y
        pq = self.positions(padding_mask, B, T, x.device)
        pk = self.positions(key_mask, B, S, x.device)
        nq = pq[:, -1] if T else torch.zeros(B, dtype=torch.long, device=x.device)  # real target tokens [B]
        nk = pk[:, -1] if S else torch.zeros(B, dtype=torch.long, device=x.device)  # real source tokens [B]
        M = (torch.maximum(nq, nk) if self.pattern == "cross" else nk).clamp_min(1)  # [B]
        qc, qs = self.cos_sin(fq, pq, M)
        kc, ks = self.cos_sin(fk, pk, M)
        num = qc @ (kc.transpose(-1, -2) @ v) + qs @ (ks.transpose(-1, -2) @ v)  # [B, H, T, d]
        den = qc @ kc.sum(2)[..., None] + qs @ ks.sum(2)[..., None]  # [B, H, T, 1]
        return self.output(num / den.clamp_min(self.eps))

    def _causal(self, fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                state: Any) -> tuple[torch.Tensor, Any]:
        B, H, T, d = fq.shape
        if state is None:
            s_cos, s_sin = fq.new_zeros(B, H, d, d), fq.new_zeros(B, H, d, d)
            z_cos, z_sin = fq.new_zeros(B, H, d), fq.new_zeros(B, H, d)
            n = 0
        else:
            s_cos, s_sin, z_cos, z_sin, n = state.s_cos, state.s_sin, state.z_cos, state.z_sin, state.n
        pos = n + self.positions(mask, B, T, fq.device)  # [B, T]
        if T and n + T > self.max_length and int(pos.max()) > self.max_length:  # cheap check first
            raise ValueError(f"cosformer (causal) reweights distances up to max_length={self.max_length} "
                             f"positions, got position {int(pos.max())}; build it with a larger max_length")
        qc, qs = self.cos_sin(fq, pos, float(self.max_length))
        kc, ks = self.cos_sin(fk, pos, float(self.max_length))
        outs = []
        # split (not slice) so that backward is one concatenation, not a full-size zero tensor per chunk
        for qcc, qsc, kcc, ksc, vc in zip(*(t.split(self.chunk_size, 2) for t in (qc, qs, kc, ks, v))):
            L = qcc.shape[2]
            tril = torch.ones(L, L, dtype=torch.bool, device=fq.device).tril()
            a_in = (qcc @ kcc.transpose(-1, -2) + qsc @ ksc.transpose(-1, -2)).masked_fill(~tril, 0.0)  # [B,H,L,L]
            num = qcc @ s_cos + qsc @ s_sin + a_in @ vc  # [B, H, L, d]
            den = qcc @ z_cos[..., None] + qsc @ z_sin[..., None] + a_in.sum(-1, keepdim=True)  # [B, H, L, 1]
            outs.append(num / den.clamp_min(self.eps))
            s_cos = s_cos + kcc.transpose(-1, -2) @ vc
            s_sin = s_sin + ksc.transpose(-1, -2) @ vc
            z_cos = z_cos + kcc.sum(2)
            z_sin = z_sin + ksc.sum(2)
        o = torch.cat(outs, 2) if outs else v.new_zeros(B, H, 0, d)
        return o, CosFormerState(s_cos, s_sin, z_cos, z_sin, n + T)  # (streaming takes no padding mask)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """cosFormer quadratic form: sim_ij = relu(q_i).relu(k_j) cos(pi/2 (i-j)/M), positions counting real tokens.

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    q, k, v = qkv(m, x, context)
    B, _, T, _ = q.shape
    S = k.shape[2]
    key_mask = context_mask if m.pattern == "cross" else padding_mask
    qm = ones(B, T) if padding_mask is None else padding_mask
    km = ones(B, S) if key_mask is None else key_mask
    out = torch.zeros_like(q)
    for b in range(B):
        pq = qm[b].long().cumsum(0).double()
        pk = km[b].long().cumsum(0).double()
        if m.pattern == "causal":
            M = float(m.max_length)
        elif m.pattern == "cross":
            M = float(max(int(qm[b].sum()), int(km[b].sum()), 1))
        else:
            M = float(max(int(km[b].sum()), 1))
        rew = torch.cos(math.pi / 2 * (pq[:, None] - pk[None, :]) / M)  # [T, S]
        sim = torch.relu(q[b]) @ torch.relu(k[b]).transpose(-1, -2) * rew * km[b]  # [H, T, S]
        if m.pattern == "causal":
            sim = sim * torch.ones(T, S, dtype=torch.bool).tril()
        out[b] = (sim @ v[b]) / sim.sum(-1, keepdim=True).clamp_min(m.eps)
    return merge(m, out)
