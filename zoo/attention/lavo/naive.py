"""LAVO's slow, obviously-correct form, used only by tests: a Python loop over query positions for the memory, the
dense window of :mod:`lavo_zoo.attention.ops.window.naive` for the local branch.

It reuses the module's parameters (projections, bases, EPE), so outputs and all gradients can be compared with the
fast path. Computed in float64 whenever the input is float64; padded query rows are zero before the output
projection.
"""
from __future__ import annotations

import torch

from lavo_zoo.attention.base import Attention
from lavo_zoo.attention.ops.naive import heads, merge
from lavo_zoo.attention.ops.window.naive import local_window


def memory_read(bases: torch.Tensor, q: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """One query per head reads the orthogonal memory of mean feature m. bases [H, r, d], q/m [B, H, d] -> [B, H, d]."""
    bases = bases.double()
    out = torch.zeros_like(q, dtype=torch.float64)
    for h in range(bases.shape[0]):
        Hm = m[:, h].double() @ bases[h].T                         # [B, r]   H_i = b_i . m
        s = Hm * (q[:, h].double() @ bases[h].T) / q.shape[-1] ** 0.5  # [B, r]   scale H_i (b_i . q)
        p = torch.softmax(s, -1)
        out[:, h] = (p * Hm) @ bases[h]                             # [B, d]   sum_i p_i H_i b_i
    return out


def read(attn: Attention, q: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``memory_read`` with the layer's reading options: q times exp(t_h) (``read_temperature``), m over its rms
    (``memory_norm='rms'``). q/m [B, H, d] -> [B, H, d]."""
    if attn.read_temp is not None:
        q = q * attn.read_temp.double().exp()[None, :, None]
    if attn.memory_norm == "rms":
        m = m / (m.double().pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    return memory_read(attn.bases, q, m)


def naive(attn: Attention, x: torch.Tensor, padding_mask: torch.Tensor | None = None,
          context: torch.Tensor | None = None, context_mask: torch.Tensor | None = None) -> torch.Tensor:
    """LAVO by the letter of docs/lavo.md, one query position at a time."""
    B, T, _ = x.shape
    q = heads(attn, attn.q_proj(x)).double()
    if attn.pattern == "cross":
        src = heads(attn, attn.v_proj(context) if attn.memory_source == "value" else context).double()
        valid = torch.ones(B, src.shape[2], dtype=torch.bool) if context_mask is None else context_mask
        m = torch.stack([src[b][:, valid[b]].mean(1) if valid[b].any() else torch.zeros_like(src[b, :, 0])
                         for b in range(B)])                                          # [B, H, d]
        out = torch.stack([read(attn, q[:, :, t], m) for t in range(T)], 2)
        return merge(attn, out, padding_mask, x.dtype)
    k, v = heads(attn, attn.k_proj(x)).double(), heads(attn, attn.v_proj(x)).double()
    local = local_window(attn, q, k, v, attn.epe, padding_mask, attn.pattern == "causal")
    if not attn.global_read:
        return merge(attn, local, padding_mask, x.dtype)
    f = {"local_out": local, "value": v, "input": heads(attn, x).double()}[attn.memory_source]
    valid = torch.ones(B, T, dtype=torch.bool) if padding_mask is None else padding_mask
    w = attn.window_size
    out = torch.zeros_like(local)
    for t in range(T):
        if attn.pattern == "noncausal":
            sources = valid.clone()                                  # every real token
        elif attn.context_dissection:
            sources = valid & (torch.arange(T) < (t // w) * w)      # real tokens of complete windows before t's
        else:
            sources = valid & (torch.arange(T) <= t)                # real tokens 0..t
        for b in range(B):
            if not sources[b].any():                                 # empty memory (window 0)
                out[b, :, t] = local[b, :, t] * (0.5 if attn.empty_memory == "half" else 1.0)
                continue
            m = f[b][:, sources[b]].mean(1)                         # [H, d]
            g = read(attn, q[b:b + 1, :, t], m[None])[0]            # [H, d]
            if attn.combine == "half":
                out[b, :, t] = 0.5 * (local[b, :, t] + g)
            else:
                gain = attn.read_gain.double()[:, None] if attn.combine == "gain" else attn.fixed_gain
                out[b, :, t] = local[b, :, t] + gain * g
    return merge(attn, out, padding_mask, x.dtype)
