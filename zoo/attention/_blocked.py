"""Exact sliding-window softmax attention, computed blockwise: the w queries of block j against the keys of blocks
j-1 and j (causal) or j-1, j and j+1 (noncausal). No T x T tensor and no gather of a T x w x d tensor; scores and
softmax in fp32 (or the input's wider dtype). Shared by LAVO's local branch and the ``local`` baseline.

Window of query t: causal keys s in [t-w+1, t]; noncausal keys s in [t-w+1, t+w-1]. The optional relative bias
``bias[h, s - t + w - 1]`` (shape [H, 2w-1]) is LAVO's embedded position encoding.

Three ways to run it (``backend`` of :func:`window_attention`):
- ``recompute``: :class:`WindowAttentionFunction`, chunks of ``chunk`` queries; saves only q, k, v (and the bias,
  mask, prefix) for backward and recomputes each chunk's scores there, like FlashAttention. No [T, 2w] scores and
  no 2w-key blocks survive the forward pass. The default on CPU and for short CUDA chunks.
- ``autograd``: the same blocked computation on the whole sequence, differentiated by autograd (it keeps the
  [T, 2w] probabilities and the key/value blocks). Needed with attention dropout in training: the dropout mask
  must be the one backward sees.
- ``flex``: the fused CUDA kernel of :mod:`lavo_zoo.attention._flex`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from lavo_zoo.attention import _flex

BACKENDS = ("auto", "recompute", "autograd", "flex")
CHUNK = 256  # queries per recomputed block: temporaries ~ H * CHUNK * (2w + 4d) numbers; smaller costs time


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for half/bf16/fp32 inputs, fp64 for fp64: the dtype of every sum and softmax."""
    return torch.promote_types(dtype, torch.float32)


def heads_major_empty(B: int, H: int, T: int, d: int, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised [B, H, T, d] tensor laid out as [B, T, H, d] in memory, so that merging the heads afterwards
    (``transpose(1, 2).reshape(B, T, H * d)``) is a view, not a copy. Not a view itself (autograd allows in-place
    ops on it when a custom Function returns it)."""
    return torch.empty_strided((B, H, T, d), (T * H * d, d, H * d, 1), dtype=dtype, device=like.device)


def _blocks(t: torch.Tensor, w: int, n: int, num: int) -> torch.Tensor:
    """[..., L, c] padded so that L = (n + num - 1) * w  ->  [..., n, num * w, c]: block j sees blocks j..j+num-1."""
    b = t.unflatten(-2, (n + num - 1, w))  # [..., n+num-1, w, c]
    return torch.cat([b[..., i:i + n, :, :] for i in range(num)], dim=-2)


def pad_time(t: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Zero-pad the time axis (-2) of t; no copy when there is nothing to pad."""
    return t if before == after == 0 else F.pad(t, (0, 0, before, after))


def last_positions(prefix: torch.Tensor | None, t: torch.Tensor, window: int) -> torch.Tensor:
    """The last min(w-1, P+T) time steps of cat(prefix, t) as a fresh small tensor: the streaming ring of keys or
    values (prefix [B, H, P, d] or None, t [B, H, T, d])."""
    keep = window - 1
    tail = torch.cat(([prefix] if prefix is not None else []) + [t[:, :, max(0, t.shape[2] - keep):]], 2)
    return tail[:, :, max(0, tail.shape[2] - keep):].clone()


def _pad_cat(parts: Sequence[torch.Tensor], before: int, after: int, dtype: torch.dtype) -> torch.Tensor:
    """[zeros(before), *parts, zeros(after)] along time (dim 2), in one copy."""
    t = parts[-1]
    zeros = t.new_zeros(*t.shape[:2], before + after, t.shape[3], dtype=dtype)
    return torch.cat([zeros[:, :, :before], *(p.to(dtype) for p in parts), zeros[:, :, before:]], 2)


def _window_core(q: torch.Tensor, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], w: int,
                 causal: bool, bias: torch.Tensor | None, key_real: torch.Tensor | None, lead: int,
                 dropout: float = 0.0, training: bool = False) -> torch.Tensor:
    """Blocked window attention of q [B, H, Tq, d] over the keys/values that ``keys``/``values`` concatenate to
    ([B, H, Tk, d] pieces); query i sits at key position lead + i, Tk - lead - Tq < w (trailing keys, noncausal).
    key_real [B, Tk] bool or None. Returns [B, H, Tq, d] in :func:`compute_dtype`. Differentiable by autograd."""
    ct = compute_dtype(q.dtype)
    B, _, Tq, d = q.shape
    Tk = sum(k.shape[2] for k in keys)
    num = 2 if causal else 3
    n = math.ceil((lead + Tq) / w)
    end = n * w - lead - Tq
    after = (n + num - 2) * w - Tk
    qb = pad_time(q.to(ct), lead, end).unflatten(2, (n, w))          # [B, H, n, w, d]
    kb = _blocks(_pad_cat(keys, w, after, ct), w, n, num)            # [B, H, n, K, d], K = num * w
    vb = _blocks(_pad_cat(values, w, after, ct), w, n, num)          # [B, H, n, K, d]
    real = torch.ones(B, Tk, dtype=torch.bool, device=q.device) if key_real is None else key_real
    real = _blocks(F.pad(real, (w, after))[..., None], w, n, num)[..., 0]  # [B, n, K]
    K = num * w
    rel = (torch.arange(K, device=q.device) - w)[None, :] - torch.arange(w, device=q.device)[:, None]  # [w, K]: s-t
    in_window = (rel > -w) & ((rel <= 0) if causal else (rel < w))                                    # [w, K]
    allowed = in_window[None, None] & real[:, :, None, :]                                             # [B, n, w, K]
    scores = (qb @ kb.transpose(-1, -2)) * d ** -0.5                                                  # [B, H, n, w, K]
    if bias is not None:
        scores = scores + bias.to(ct)[:, (rel + w - 1).clamp(0, 2 * w - 2)][None, :, None]           # [1, H, 1, w, K]
    scores = scores.masked_fill(~allowed[:, None], torch.finfo(ct).min)
    p = torch.softmax(scores, dim=-1)
    if dropout and training:
        p = F.dropout(p, dropout, training=True)
    out = (p @ vb).flatten(2, 3)                                                                      # [B, H, n*w, d]
    return out[:, :, lead:lead + Tq]


def _key_range(t0: int, t1: int, P: int, T: int, w: int, causal: bool) -> tuple[int, int]:
    """Keys [lo, hi) (positions in cat(prefix, k), P prefix keys) that queries t0..t1-1 (at P + t) can see."""
    return max(0, P + t0 - (w - 1)), (P + t1 if causal else min(P + T, P + t1 + w - 1))


def _key_pieces(prefix: torch.Tensor | None, k: torch.Tensor, lo: int, hi: int) -> list[torch.Tensor]:
    """Positions [lo, hi) of cat(prefix, k) along time as views of prefix and k (no copy)."""
    P = 0 if prefix is None else prefix.shape[2]
    pieces = [prefix[:, :, lo:min(hi, P)]] if lo < P else []
    return pieces + ([k[:, :, max(lo, P) - P:hi - P]] if hi > P else [])


class WindowAttentionFunction(torch.autograd.Function):
    """Blocked window attention that saves only its inputs and recomputes each chunk of queries in backward.

    forward(q, k, v [B, H, T, d], prefix_k, prefix_v [B, H, P, d] | None, bias [H, 2w-1] | None,
    key_mask [B, T] bool | None, window, causal, chunk) -> [B, H, T, d] in compute_dtype (laid out [B, T, H, d]).
    Backward: per chunk of ``chunk`` queries, the chunk's forward is recomputed under autograd and differentiated
    (the same ops as the ``autograd`` backend, so gradients agree to rounding); the temporaries are chunk-sized.
    """

    @staticmethod
    def forward(ctx, q, k, v, prefix_k, prefix_v, bias, key_mask, window, causal, chunk):
        B, H, T, d = q.shape
        P = 0 if prefix_k is None else prefix_k.shape[2]
        out = heads_major_empty(B, H, T, d, q, compute_dtype(q.dtype))
        for t0 in range(0, T, chunk):
            t1 = min(T, t0 + chunk)
            lo, hi = _key_range(t0, t1, P, T, window, causal)
            real = None if key_mask is None else key_mask[:, lo - P:hi - P]
            out[:, :, t0:t1] = _window_core(q[:, :, t0:t1], _key_pieces(prefix_k, k, lo, hi),
                                            _key_pieces(prefix_v, v, lo, hi), window, causal, bias, real, P + t0 - lo)
        ctx.save_for_backward(q, k, v, prefix_k, prefix_v, bias, key_mask)
        ctx.config = (window, causal, chunk)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, prefix_k, prefix_v, bias, key_mask = ctx.saved_tensors
        window, causal, chunk = ctx.config
        need = ctx.needs_input_grad
        T = q.shape[2]
        P = 0 if prefix_k is None else prefix_k.shape[2]
        dq = torch.zeros_like(q) if need[0] else None
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)                       # [B, H, T, d]
        dpk = torch.zeros_like(prefix_k) if prefix_k is not None else None     # [B, H, P, d]
        dpv = torch.zeros_like(prefix_v) if prefix_v is not None else None
        dbias = torch.zeros_like(bias) if bias is not None and need[5] else None
        for t0 in range(0, T, chunk):
            t1 = min(T, t0 + chunk)
            lo, hi = _key_range(t0, t1, P, T, window, causal)
            real = None if key_mask is None else key_mask[:, lo - P:hi - P]
            with torch.enable_grad():
                qc = q[:, :, t0:t1].detach().requires_grad_(need[0])
                kc = torch.cat(_key_pieces(prefix_k, k, lo, hi), 2).detach().requires_grad_()  # [B, H, hi-lo, d]
                vc = torch.cat(_key_pieces(prefix_v, v, lo, hi), 2).detach().requires_grad_()
                bc = bias.detach().requires_grad_() if dbias is not None else bias
                inputs = [t for t in (qc, kc, vc, bc) if t is not None and t.requires_grad]
                out = _window_core(qc, [kc], [vc], window, causal, bc, real, P + t0 - lo)
                grads = list(torch.autograd.grad(out, inputs, grad[:, :, t0:t1]))
            if dq is not None:
                dq[:, :, t0:t1] = grads.pop(0)
            gk, gv = grads.pop(0), grads.pop(0)
            for full, pre, g in ((dk, dpk, gk), (dv, dpv, gv)):
                if lo < P:
                    pre[:, :, lo:min(hi, P)] += g[:, :, :min(hi, P) - lo]
                if hi > P:
                    full[:, :, max(lo, P) - P:hi - P] += g[:, :, max(lo, P) - lo:]
            if dbias is not None:
                dbias += grads.pop(0)
        return dq, dk, dv, dpk, dpv, dbias, None, None, None, None


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                     bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                     prefix: tuple[torch.Tensor, torch.Tensor] | None = None,
                     dropout: float = 0.0, training: bool = False, backend: str = "auto",
                     chunk: int = CHUNK) -> torch.Tensor:
    """Exact sliding-window attention; returns ``[B, H, T, d]`` in :func:`compute_dtype`.

    q, k, v [B, H, T, d]; key_mask [B, T] bool (True = real key). ``prefix`` = (keys, values) [B, H, P, d], P < w:
    the previous chunk's last keys and values (causal streaming; no key_mask then), sitting before position 0.
    A query whose window holds no real key (only possible for padded queries) gets finite garbage, never NaN.
    ``backend`` (see the module docstring): 'auto' = 'flex' where :func:`_flex.enabled`, 'autograd' with dropout
    in training, else 'recompute'. Callers that choose explicitly (LAVO's layer does) pass the name.
    """
    ct = compute_dtype(q.dtype)
    if prefix is not None and (not causal or key_mask is not None):
        raise ValueError("window_attention: a key prefix needs causal=True and no key_mask")
    if backend not in BACKENDS:
        raise ValueError(f"window_attention: backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    if backend == "auto":
        backend = "flex" if _flex.enabled(q, dropout, training) else "autograd" if dropout and training \
            else "recompute"
    if backend == "flex":
        fk, fv = (torch.cat([prefix[0], k], 2), torch.cat([prefix[1], v], 2)) if prefix is not None else (k, v)
        out = _flex.flex_window_attention(q, fk, fv, window, causal=causal, bias=bias, key_mask=key_mask)
        if out is not None:  # None: the kernel cannot be compiled on this device (warned once); recompute below
            return out.to(ct)
        backend = "autograd" if dropout and training else "recompute"
    past_k, past_v = prefix if prefix is not None else (None, None)
    if backend == "recompute":
        if dropout and training:
            raise ValueError("window_attention: the recompute backend has no attention dropout; use 'autograd'")
        return WindowAttentionFunction.apply(q, k, v, past_k, past_v, bias, key_mask, window, causal, chunk)
    P = 0 if past_k is None else past_k.shape[2]
    return _window_core(q, [p for p in (past_k, k) if p is not None], [p for p in (past_v, v) if p is not None],
                        window, causal, bias, key_mask, P, dropout, training)
