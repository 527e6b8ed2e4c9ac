"""LAVO's slow, obviously-correct forms, used only by tests: Python loops over query positions, in float64.

- :func:`memory_read` / :func:`read`: one query per head reads the orthogonal memory (without / with the reading's
  options), the per-position form of :func:`lavo_zoo.attention.lavo.ops.read`;
- :func:`binding_memory` / :func:`binding_read`: the binding memory of a set of tokens, by its definition (per basis,
  the mean over the tokens of the features weighted by the key's projection on it), and one query's read of it (the
  softmax over the bases of its projections on them, each basis holding its row), head by head and basis by basis;
- :func:`memory_branch`: the memory of each position built from its definition (the mean features of the tokens it
  may see), read and joined with the local branch, the per-position form of
  :func:`lavo_zoo.attention.lavo.ops.memory_branch`;
- :func:`naive`: the whole layer, with the dense window of :mod:`lavo_zoo.attention.ops.window.naive` for the local
  branch. It reuses the module's parameters (projections, bases, EPE), so outputs and all gradients can be compared
  with the fast path; padded query rows are zero before the output projection.
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


def read(q: torch.Tensor, m: torch.Tensor, bases: torch.Tensor, log_temperature: torch.Tensor | None = None,
         memory_norm: str = "mean") -> torch.Tensor:
    """``memory_read`` with the reading's options: q times exp(t_h) (``log_temperature`` [H]), m over its rms
    (``memory_norm='rms'``). q/m [B, H, d] -> [B, H, d].

    Args:
        q: [B, H, d] one query per head.
        m: [B, H, d] the memory's mean feature.
        bases: [H, r, d].
        log_temperature: [H], or None.
        memory_norm: 'mean' or 'rms'.
    """
    if log_temperature is not None:
        q = q * log_temperature.double().exp()[None, :, None]
    if memory_norm == "rms":
        m = m / (m.double().pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    return memory_read(bases, q, m)


def binding_memory(keys: torch.Tensor, feats: torch.Tensor, bases: torch.Tensor) -> torch.Tensor:
    """The binding memory of n tokens: M[h, i] = (1/n) sum_s (b_hi . k_hs) f_hs. keys/feats [H, n, d], bases
    [H, r, d] -> [H, r, d] float64."""
    rows = []
    for h in range(feats.shape[0]):
        for basis in bases[h].double():
            weight = keys[h].double() @ basis                        # [n]  b_i . k_s
            rows.append((weight[:, None] * feats[h].double()).mean(0))  # [d]  mean_s (b_i . k_s) f_s
    return torch.stack(rows).view(bases.shape[0], bases.shape[1], feats.shape[-1])


def binding_read(q: torch.Tensor, M: torch.Tensor, bases: torch.Tensor, log_temperature: torch.Tensor | None = None,
                 memory_norm: str = "mean") -> torch.Tensor:
    """One query per head reads a binding memory: s_i = scale (b_i . q) (q times exp(t_h) with ``log_temperature``),
    p = softmax(s) over the r bases, o = sum_i p_i M_i (M_i over its rms with ``memory_norm='rms'``). q [B, H, d],
    M [B, H, r, d] -> [B, H, d] float64.

    Args:
        q: [B, H, d] one query per head.
        M: [B, H, r, d] the binding memory (:func:`binding_memory`).
        bases: [H, r, d].
        log_temperature: [H], or None.
        memory_norm: 'mean' or 'rms'.
    """
    B, H, d = q.shape
    out = torch.zeros(B, H, d, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            qh = q[b, h].double() * (log_temperature[h].double().exp() if log_temperature is not None else 1.0)
            rows = M[b, h].double()
            if memory_norm == "rms":
                rows = torch.stack([row / (row.pow(2).mean() + 1e-6).sqrt() for row in rows])
            s = torch.stack([torch.dot(basis.double(), qh) for basis in bases[h]]) / d ** 0.5
            p = torch.softmax(s, 0)
            out[b, h] = sum(p[i] * rows[i] for i in range(len(rows)))
    return out


def memory_branch(q: torch.Tensor, local: torch.Tensor, feats: torch.Tensor, bases: torch.Tensor, window: int, *,
                  padding_mask: torch.Tensor | None = None, causal: bool = True, context_dissection: bool = True,
                  combine: str = "sum", gain: float | torch.Tensor = 1.0, empty_memory: str = "local",
                  log_temperature: torch.Tensor | None = None, memory_norm: str = "mean",
                  keys: torch.Tensor | None = None) -> torch.Tensor:
    """The output of every position t from its definition (q, local, feats [B, H, T, d]; padding_mask [B, T]):
    the memory is the mean of the features of the real tokens t may see (noncausal: all; causal with context
    dissection: those of the complete windows before t's, windows counted from the row's first real token; without:
    0..t); where that is nobody, the output is the local branch (0.5 of it for combine='half' with
    empty_memory='half'); else 0.5 (local + read) ('half') or local + gain * read. With ``keys`` [B, H, T, d] the
    memory of the same tokens is the binding memory (:func:`binding_memory`, read by :func:`binding_read`).
    [B, H, T, d] float64.

    Its arguments are stated on `lavo_zoo.attention.lavo.ops.memory_branch`, the function it checks.
    """
    B, _, T, _ = q.shape
    q, local, feats = q.double(), local.double(), feats.double()
    valid = torch.ones(B, T, dtype=torch.bool) if padding_mask is None else padding_mask
    first = valid.to(torch.uint8).argmax(1)[:, None]                # [B, 1] each row's windows start at its first token
    out = torch.zeros_like(local)
    for t in range(T):
        if not causal:
            sources = valid.clone()                                  # every real token
        elif context_dissection:  # real tokens of the complete windows before t's, windows counted from `first`
            sources = valid & (torch.arange(T) < first + (t - first).div(window, rounding_mode="floor") * window)
        else:
            sources = valid & (torch.arange(T) <= t)                # real tokens 0..t
        for b in range(B):
            if not sources[b].any():                                 # empty memory (window 0)
                out[b, :, t] = local[b, :, t] * (0.5 if combine == "half" and empty_memory == "half" else 1.0)
                continue
            if keys is not None:                                     # the binding memory of the same tokens
                M = binding_memory(keys[b][:, sources[b]], feats[b][:, sources[b]], bases)      # [H, r, d]
                g = binding_read(q[b:b + 1, :, t], M[None], bases, log_temperature, memory_norm)[0]
            else:
                m = feats[b][:, sources[b]].mean(1)                 # [H, d]
                g = read(q[b:b + 1, :, t], m[None], bases, log_temperature, memory_norm)[0]  # [H, d]
            if combine == "half":
                out[b, :, t] = 0.5 * (local[b, :, t] + g)
            else:
                factor = gain.double()[:, None] if isinstance(gain, torch.Tensor) else gain
                out[b, :, t] = local[b, :, t] + factor * g
    return out


def naive(attn: Attention, x: torch.Tensor, padding_mask: torch.Tensor | None = None,
          context: torch.Tensor | None = None, context_mask: torch.Tensor | None = None) -> torch.Tensor:
    """LAVO by the letter of docs/lavo.md, one query position at a time.

    Its arguments are stated in `lavo_zoo.attention.ops.naive` (``attn``: the module, there ``m``).
    """
    B, T, _ = x.shape
    q = heads(attn, attn.q_proj(x)).double()
    reading = {"log_temperature": attn.log_read_temperature, "memory_norm": attn.memory_norm}
    if attn.pattern == "cross":
        src = heads(attn, attn.v_proj(context) if attn.memory_source == "value" else context).double()
        valid = torch.ones(B, src.shape[2], dtype=torch.bool) if context_mask is None else context_mask
        if attn.memory == "binding":                                                 # [B, H, r, d]
            ks = heads(attn, attn.k_proj(context)).double()
            zero = torch.zeros(attn.num_heads, attn.num_bases, attn.head_dim, dtype=torch.float64)
            M = torch.stack([binding_memory(ks[b][:, valid[b]], src[b][:, valid[b]], attn.bases)
                             if valid[b].any() else zero for b in range(B)])
            out = torch.stack([binding_read(q[:, :, t], M, attn.bases, **reading) for t in range(T)], 2)
            return merge(attn, out, padding_mask, x.dtype)
        m = torch.stack([src[b][:, valid[b]].mean(1) if valid[b].any() else torch.zeros_like(src[b, :, 0])
                         for b in range(B)])                                          # [B, H, d]
        out = torch.stack([read(q[:, :, t], m, attn.bases, **reading) for t in range(T)], 2)
        return merge(attn, out, padding_mask, x.dtype)
    k, v = heads(attn, attn.k_proj(x)).double(), heads(attn, attn.v_proj(x)).double()
    local = local_window(attn, q, k, v, attn.epe, padding_mask, attn.pattern == "causal")
    if not attn.global_read:
        return merge(attn, local, padding_mask, x.dtype)
    f = {"local_out": local, "value": v, "input": heads(attn, x).double()}[attn.memory_source]
    gain = attn._gain()
    out = memory_branch(q, local, f, attn.bases, attn.window_size, padding_mask=padding_mask,
                        causal=attn.pattern == "causal", context_dissection=attn.context_dissection,
                        combine=attn.combine, gain=gain, empty_memory=attn.empty_memory, **reading,
                        keys=k if attn.memory == "binding" else None)
    return merge(attn, out, padding_mask, x.dtype)
