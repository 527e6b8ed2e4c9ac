"""Slow, obviously-correct versions of LAVO, ``sdpa`` and ``local``, used only by tests.

Dense T x T score matrices with explicit masks, and a Python loop over query positions for LAVO's memory. They reuse
the module's parameters (projections, bases, biases), so outputs and all gradients can be compared with the fast path.
Computed in float64 whenever the input is float64; padded query rows are zero before the output projection.
"""
from __future__ import annotations

import torch

from lavo_zoo.attention.base import Attention


def _heads(attn: Attention, t: torch.Tensor) -> torch.Tensor:
    B, T, _ = t.shape
    return t.view(B, T, attn.num_heads, attn.head_dim).transpose(1, 2)  # [B, H, T, d]


def _merge(attn: Attention, out: torch.Tensor, padding_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    if padding_mask is not None:
        out = out * padding_mask[:, None, :, None]
    B, H, T, d = out.shape
    return attn.out_proj(out.transpose(1, 2).reshape(B, T, H * d).to(dtype))


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias, over allowed keys) v. allowed [B, 1, Tq, Tk] bool; bias [H, Tq, Tk].

    Rows with no allowed key (padded queries only) get uniform weights; callers zero those rows."""
    q, k, v = q.double(), k.double(), v.double()
    a = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5            # [B, H, Tq, Tk]
    if bias is not None:
        a = a + bias.double()
    a = a.masked_fill(~allowed, torch.finfo(a.dtype).min)
    return torch.softmax(a, -1) @ v


def window_mask(T: int, w: int, causal: bool) -> torch.Tensor:
    """[T, T] bool: key s is in query t's window ([t-w+1, t] causal, [t-w+1, t+w-1] noncausal)."""
    t = torch.arange(T)[:, None]
    s = torch.arange(T)[None, :]
    return (s > t - w) & ((s <= t) if causal else (s < t + w))


def relative_bias(table: torch.Tensor, T: int, w: int) -> torch.Tensor:
    """[H, 2w-1] table -> [H, T, T] with entry [h, t, s] = table[h, s - t + w - 1] (0 outside the window)."""
    out = torch.zeros(table.shape[0], T, T, dtype=table.dtype)
    for t in range(T):
        for s in range(max(0, t - w + 1), min(T, t + w)):
            out[:, t, s] = table[:, s - t + w - 1]
    return out


def _key_mask(mask: torch.Tensor | None, B: int, T: int) -> torch.Tensor:
    return (torch.ones(B, T, dtype=torch.bool) if mask is None else mask)[:, None, None, :]  # [B, 1, 1, T]


def local_window(attn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor | None,
                 padding_mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """Exact w-key window attention with a dense [T, T] mask and optional relative-bias table."""
    B, _, T, _ = q.shape
    w = attn.window_size
    allowed = window_mask(T, w, causal)[None, None] & _key_mask(padding_mask, B, T)
    return dense_attention(q, k, v, allowed, None if table is None else relative_bias(table, T, w))


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


def lavo_reference(attn: Attention, x: torch.Tensor, padding_mask: torch.Tensor | None = None,
                   context: torch.Tensor | None = None, context_mask: torch.Tensor | None = None) -> torch.Tensor:
    """LAVO by the letter of docs/lavo.md, one query position at a time."""
    B, T, _ = x.shape
    q = _heads(attn, attn.q_proj(x)).double()
    if attn.pattern == "cross":
        src = _heads(attn, attn.v_proj(context) if attn.memory_source == "value" else context).double()
        valid = torch.ones(B, src.shape[2], dtype=torch.bool) if context_mask is None else context_mask
        m = torch.stack([src[b][:, valid[b]].mean(1) if valid[b].any() else torch.zeros_like(src[b, :, 0])
                         for b in range(B)])                                          # [B, H, d]
        out = torch.stack([memory_read(attn.bases, q[:, :, t], m) for t in range(T)], 2)
        return _merge(attn, out, padding_mask, x.dtype)
    k, v = _heads(attn, attn.k_proj(x)).double(), _heads(attn, attn.v_proj(x)).double()
    local = local_window(attn, q, k, v, attn.epe, padding_mask, attn.pattern == "causal")
    f = {"local_out": local, "value": v, "input": _heads(attn, x).double()}[attn.memory_source]
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
                out[b, :, t] = local[b, :, t] * (1.0 if attn.empty_memory == "local" else 0.5)
                continue
            m = f[b][:, sources[b]].mean(1)                         # [H, d]
            g = memory_read(attn.bases, q[b:b + 1, :, t], m[None])[0]
            out[b, :, t] = 0.5 * (local[b, :, t] + g)
    return _merge(attn, out, padding_mask, x.dtype)


def local_reference(attn: Attention, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The ``local`` baseline: exact sliding window of w keys, optional relative bias."""
    q, k, v = (_heads(attn, p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    out = local_window(attn, q, k, v, attn.rel_bias, padding_mask, attn.pattern == "causal")
    return _merge(attn, out, padding_mask, x.dtype)


def rotate(t: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary embedding, rotate-half layout: channel i pairs with i + d/2, angle pos * base^(-2i/d)."""
    d = t.shape[-1]
    out = t.double().clone()
    for i in range(d // 2):
        angle = positions.double() * base ** (-2 * i / d)            # [T]
        a, b = t[..., i].double(), t[..., i + d // 2].double()
        out[..., i] = a * torch.cos(angle) - b * torch.sin(angle)
        out[..., i + d // 2] = b * torch.cos(angle) + a * torch.sin(angle)
    return out


def sdpa_reference(attn: Attention, x: torch.Tensor, padding_mask: torch.Tensor | None = None,
                   context: torch.Tensor | None = None, context_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Full softmax attention with a dense mask (and rotary embedding when the module has rope=True)."""
    B, T, _ = x.shape
    src = x if context is None else context
    S = src.shape[1]
    q, k, v = _heads(attn, attn.q_proj(x)), _heads(attn, attn.k_proj(src)), _heads(attn, attn.v_proj(src))
    if attn.rope:
        q, k = rotate(q, torch.arange(T), attn.rope_base), rotate(k, torch.arange(S), attn.rope_base)
    allowed = _key_mask(context_mask if context is not None else padding_mask, B, S)
    if attn.pattern == "causal":
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
    return _merge(attn, dense_attention(q, k, v, allowed), padding_mask, x.dtype)
