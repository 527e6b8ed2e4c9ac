"""Transformer-LS, long-short attention (Zhu et al., NeurIPS 2021, "Long-Short Transformer: Efficient
Transformers for Language and Vision").

Each query attends, with ONE softmax, to the union of
- short-term keys: a segment-wise sliding window (queries of segment j = [jw, (j+1)w) see the keys of that
  segment and w/2 on each side; causal: the keys of segments j-1 and j up to the query), and
- long-term keys: a dynamic low-rank projection of all keys, K_bar = P^T K with P = softmax_over_tokens(K W_P)
  ([r, d] per head); causal: every segment of w tokens is projected to ``segment_rank`` keys on its own and a query
  in segment j sees the projections of the complete segments < j only.
Both key sets (and value sets) go through their own LayerNorm ("DualLN") before the softmax. Segments are counted
from each row's first real token (left padding is moved to the end for the call: ``ops/padding.py``).
Cost: O(T (w + r) d) noncausal; causal O(T (w + T r / w) d).
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention import register_attention
from lavo_zoo.attention.common import ProjectedAttention, masked_softmax
from lavo_zoo.attention.ops.naive import merge, ones, qkv
from lavo_zoo.attention.ops.padding import left_aligned


@register_attention("longshort")
class LongShortAttention(ProjectedAttention):
    """Transformer-LS (Zhu et al. 2021): sliding window (``window_size``) + dynamic projection (``num_landmarks``)."""

    family = "window + low-rank long-range"
    decoding_state = "T D inputs (no streaming: re-runs the prefix)"
    patterns = ("causal", "noncausal")
    streaming = False
    description = "Transformer-LS long-short attention (segment window + dynamic projection, DualLN)"
    test_options: ClassVar[dict[str, Any]] = {"window_size": 6, "num_landmarks": 5, "segment_rank": 2}

    def __init__(self, embed_dim: int, num_heads: int, pattern: str = "causal", window_size: int = 16,
                 num_landmarks: int = 64, segment_rank: int = 1, bias: bool = True) -> None:
        """Transformer-LS.

        Args:
            embed_dim: D, the model width (the contract's three arguments, stated on
                :meth:`Attention.__init__ <lavo_zoo.attention.base.Attention.__init__>`).
            num_heads: H, the number of heads.
            pattern: causal, noncausal or cross, one of the class's ``patterns``.
            window_size: w, the segment length of the short-term window.
            num_landmarks: r, the keys the dynamic projection makes of the whole sequence (noncausal).
            segment_rank: the keys each w-token segment is projected to (causal).
            bias: biases in the q, k, v and output projections.
        """
        super().__init__(embed_dim, num_heads, pattern, bias)
        if window_size <= 0 or num_landmarks <= 0 or segment_rank <= 0:
            raise ValueError("window_size, num_landmarks and segment_rank must be positive")
        self.window_size = window_size
        self.num_landmarks = num_landmarks
        self.segment_rank = segment_rank
        r = segment_rank if pattern == "causal" else num_landmarks
        self.dyn_proj = nn.Parameter(torch.randn(num_heads, self.head_dim, r) * self.head_dim ** -0.5)  # W_P
        self.ln_short = nn.LayerNorm(self.head_dim)
        self.ln_long = nn.LayerNorm(self.head_dim)

    def attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None, context: torch.Tensor | None,
               context_mask: torch.Tensor | None, state: Any, return_state: bool) -> torch.Tensor:
        if padding_mask is not None:  # segments start at each row's first real token (lavo_zoo.attention.ops.padding)
            return left_aligned(self._attend, x, padding_mask)
        return self._attend(x, None)

    def _attend(self, x: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        """x [B, T, D] with segments cut at multiples of w from position 0 -> [B, T, D]."""
        q, k, v = self.qkv(x, None)  # [B, H, T, d]
        B, H, T, d = q.shape
        w = self.window_size
        mask = padding_mask if padding_mask is not None else torch.ones(B, T, dtype=torch.bool, device=x.device)
        nseg = math.ceil(T / w)
        Tp = nseg * w
        scale = d ** -0.5
        logits = torch.einsum("bhtd,hdr->bhtr", k, self.dyn_proj)  # [B, H, T, r]
        ks, vs = self.ln_short(k), self.ln_short(v)
        q_seg = F.pad(q, (0, 0, 0, Tp - T)).view(B, H, nseg, w, d)  # [B, H, nseg, w, d]
        if self.pattern == "noncausal":
            half = w // 2
            W2 = w + 2 * half
            # long: one projection of all real tokens
            p = masked_softmax(logits, mask[:, None, :, None], dim=2)  # [B, H, T, r]
            k_long = self.ln_long(p.transpose(-1, -2) @ k)  # [B, H, r, d]
            v_long = self.ln_long(p.transpose(-1, -2) @ v)
            scores_long = (q_seg @ k_long.transpose(-1, -2)[:, :, None]) * scale  # [B, H, nseg, w, r]
            allowed_long = None
            # short: segment j sees keys [jw - w/2, (j+1)w + w/2)
            k_win = F.pad(ks, (0, 0, half, Tp - T + half)).unfold(2, W2, w).transpose(-1, -2)  # [B,H,nseg,W2,d]
            v_win = F.pad(vs, (0, 0, half, Tp - T + half)).unfold(2, W2, w).transpose(-1, -2)
            allowed_short = F.pad(mask, (half, Tp - T + half), value=False).unfold(1, W2, w)  # [B, nseg, W2]
            allowed_short = allowed_short[:, None, :, None, :]  # [B, 1, nseg, 1, W2]
        else:
            rk = self.segment_rank
            # long: each complete segment is projected on its own; segment j reads segments < j
            valid_seg = F.pad(mask, (0, Tp - T), value=False).view(B, nseg, w)  # [B, nseg, w]
            p = masked_softmax(F.pad(logits, (0, 0, 0, Tp - T)).view(B, H, nseg, w, rk),
                               valid_seg[:, None, :, :, None], dim=3)  # [B, H, nseg, w, rk]
            k_long = self.ln_long(torch.einsum("bhjwr,bhjwd->bhjrd", p, F.pad(k, (0, 0, 0, Tp - T)).view(
                B, H, nseg, w, d))).reshape(B, H, nseg * rk, d)  # [B, H, nseg*rk, d]
            v_long = self.ln_long(torch.einsum("bhjwr,bhjwd->bhjrd", p, F.pad(v, (0, 0, 0, Tp - T)).view(
                B, H, nseg, w, d))).reshape(B, H, nseg * rk, d)
            scores_long = torch.einsum("bhjwd,bhld->bhjwl", q_seg, k_long) * scale  # [B, H, nseg, w, nseg*rk]
            seg_idx = torch.arange(nseg, device=x.device)
            earlier = (seg_idx[None, :] < seg_idx[:, None]).repeat_interleave(rk, dim=1)  # [nseg, nseg*rk]
            land_valid = valid_seg.any(-1).repeat_interleave(rk, dim=1)  # [B, nseg*rk]
            allowed_long = earlier[None, None, :, None, :] & land_valid[:, None, None, None, :]
            # short: segment j sees keys of segments j-1 and j up to the query
            W2 = 2 * w
            k_win = F.pad(ks, (0, 0, w, Tp - T)).unfold(2, W2, w).transpose(-1, -2)  # [B, H, nseg, 2w, d]
            v_win = F.pad(vs, (0, 0, w, Tp - T)).unfold(2, W2, w).transpose(-1, -2)
            key_valid = F.pad(mask, (w, Tp - T), value=False).unfold(1, W2, w)  # [B, nseg, 2w]
            qi = torch.arange(w, device=x.device)[:, None]
            ki = torch.arange(W2, device=x.device)[None, :]
            causal = ki <= qi + w  # key (j-1)w + ki <= query jw + qi
            allowed_short = key_valid[:, None, :, None, :] & causal  # [B, 1, nseg, w, 2w]
        scores_short = (q_seg @ k_win.transpose(-1, -2)) * scale  # [B, H, nseg, w, W2]
        scores = torch.cat([scores_short, scores_long], -1)
        ones_long = torch.ones(scores_long.shape[-1], dtype=torch.bool, device=x.device)
        allowed = torch.cat([allowed_short.expand(B, 1, nseg, w, W2),
                             (ones_long if allowed_long is None else allowed_long).expand(
                                 B, 1, nseg, w, scores_long.shape[-1])], -1)
        attn = masked_softmax(scores, allowed)
        o = attn[..., :W2] @ v_win
        if self.pattern == "noncausal":
            o = o + attn[..., W2:] @ v_long[:, :, None]
        else:
            o = o + torch.einsum("bhjwl,bhld->bhjwd", attn[..., W2:], v_long)
        o = o.reshape(B, H, Tp, d)[:, :, :T]
        return self.output(o)


# -------------------------------------------------------------------------------- slow reference, used by tests
def naive(m, x, padding_mask=None, context=None, context_mask=None):
    """Transformer-LS per query: one softmax over [window keys (LN_short); projected keys (LN_long)].

    Its arguments are stated in `lavo_zoo.attention.ops.naive`.
    """
    q, k, v = qkv(m, x, None)
    B, H, T, d = q.shape
    w = m.window_size
    mask = ones(B, T) if padding_mask is None else padding_mask
    logits = torch.einsum("bhtd,hdr->bhtr", k, m.dyn_proj)  # [B, H, T, r]
    ks, vs = m.ln_short(k), m.ln_short(v)
    out = torch.zeros_like(q)
    for b in range(B):
        real = [s for s in range(T) if bool(mask[b, s])]
        s0 = real[0] if real else 0  # segments are counted from the row's first real token
        if m.pattern == "noncausal" and real:
            p = torch.softmax(logits[b, :, real], dim=1)  # [H, n, r]
            kl_all = m.ln_long(p.transpose(-1, -2) @ k[b, :, real])  # [H, r, d]
            vl_all = m.ln_long(p.transpose(-1, -2) @ v[b, :, real])
        for t in range(s0, T):
            j = (t - s0) // w
            if m.pattern == "noncausal":
                lo, hi = s0 + j * w - w // 2, s0 + (j + 1) * w + w // 2
                win = [s for s in range(max(lo, 0), min(hi, T)) if bool(mask[b, s])]
                kl, vl = (kl_all, vl_all) if real else (q.new_zeros(H, 0, d),) * 2
            else:
                win = [s for s in range(max(s0 + (j - 1) * w, 0), t + 1) if bool(mask[b, s])]
                kls, vls = [], []
                for jj in range(j):  # complete earlier segments, each projected on its own
                    seg = [s for s in range(s0 + jj * w, s0 + (jj + 1) * w) if bool(mask[b, s])]
                    if seg:
                        p = torch.softmax(logits[b, :, seg], dim=1)  # [H, n, rk]
                        kls.append(m.ln_long(p.transpose(-1, -2) @ k[b, :, seg]))
                        vls.append(m.ln_long(p.transpose(-1, -2) @ v[b, :, seg]))
                kl = torch.cat(kls, 1) if kls else q.new_zeros(H, 0, d)
                vl = torch.cat(vls, 1) if vls else q.new_zeros(H, 0, d)
            keys = torch.cat([ks[b, :, win], kl], 1)  # [H, n, d]
            vals = torch.cat([vs[b, :, win], vl], 1)
            if keys.shape[1]:
                p = torch.softmax(keys @ q[b, :, t, :, None] * d ** -0.5, dim=1)  # [H, n, 1]
                out[b, :, t] = (p.transpose(-1, -2) @ vals)[:, 0]
    return merge(m, out)
