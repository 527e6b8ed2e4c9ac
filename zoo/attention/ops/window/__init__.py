"""Exact sliding-window softmax attention, the op shared by LAVO's local branch and the ``local`` mechanism.

Window of query t: causal keys s in [t-w+1, t]; noncausal keys s in [t-w+1, t+w-1]. The optional relative bias
``bias[h, s - t + w - 1]`` (shape [H, 2w-1]) is LAVO's embedded position encoding.

:func:`window_attention` is the one entry; its ``backend`` ('auto' or a kernel name) is resolved by the kernel choice,
:func:`lavo_zoo.attention.ops.dispatch.choose_kernels` (where each kernel runs, and the fallbacks), then runs:
- ``recompute``: :class:`~lavo_zoo.attention.ops.window.blocked.WindowAttentionFunction` (``blocked.py``), which
  saves only its inputs and recomputes each chunk's scores in backward (attention dropout included: each chunk's
  mask is regenerated from the call's seed). The default on CPU, for short CUDA chunks and with dropout in training.
- ``autograd``: :func:`~lavo_zoo.attention.ops.window.blocked.window_autograd`, the same blocked computation left to
  autograd (torch's own dropout); only when requested.
- ``flex``: the fused CUDA kernel of ``flex.py``; 'auto' takes it on CUDA without dropout in training. If it cannot
  be compiled on the device, the call runs ``recompute`` instead.
- ``triton``: the Triton kernels of ``triton.py`` (forward and backward, streaming prefix and dropout included);
  taken when requested (LAVO's layer, and its 'auto' with ``LAVO_ZOO_TRITON=1``); requested where they do not run,
  or if they cannot be compiled on the device (warned once), the call runs ``recompute``.
:func:`window_attention_step` is one query's window (a decoding step); ``naive.py`` holds the dense masked O(T^2)
reference the tests compare with.
"""
from __future__ import annotations

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops.dispatch import BACKENDS, FALLBACK, choose_kernels
from lavo_zoo.attention.ops.dropout import new_seed
from lavo_zoo.attention.ops.window import flex
from lavo_zoo.attention.ops.window.blocked import CHUNK, WindowAttentionFunction, window_autograd


def last_positions(prefix: torch.Tensor | None, t: torch.Tensor, window: int) -> torch.Tensor:
    """The last min(w-1, P+T) time steps of cat(prefix, t) as a fresh small tensor: the streaming ring of keys or
    values (prefix [B, H, P, d] or None, t [B, H, T, d])."""
    keep = window - 1
    tail = torch.cat(([prefix] if prefix is not None else []) + [t[:, :, max(0, t.shape[2] - keep):]], 2)
    return tail[:, :, max(0, tail.shape[2] - keep):].clone()


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                     bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                     prefix: tuple[torch.Tensor, torch.Tensor] | None = None,
                     dropout: float = 0.0, training: bool = False, backend: str = "auto",
                     chunk: int = CHUNK) -> torch.Tensor:
    """Exact sliding-window attention.

    Args:
        q, k, v: [B, H, T, d].
        window: w, the keys per causal window (2w - 1 noncausal).
        causal: keys [t-w+1, t] (True) or [t-w+1, t+w-1].
        bias: [H, 2w-1] relative bias added to the scaled scores, or None.
        key_mask: [B, T] bool (True = real key), or None.
        prefix: (keys, values) [B, H, P, d], P < w: the previous chunk's last keys and values (causal streaming; no
            key_mask then), sitting before position 0.
        dropout, training: attention dropout on the probabilities (in training only).
        backend: 'auto' or a kernel name, resolved by :func:`~lavo_zoo.attention.ops.dispatch.choose_kernels`
            (whose 'auto' here keeps flex_attention on CUDA, never Triton); callers that chose already (LAVO's layer)
            pass the kernel's name.
        chunk: queries per recomputed chunk of the ``recompute`` kernel.

    Returns:
        [B, H, T, d] in :func:`compute_dtype`. A query whose window holds no real key (only possible for padded
        queries) gets finite garbage, never NaN.
    """
    ct = compute_dtype(q.dtype)
    if prefix is not None and (not causal or key_mask is not None):
        raise ValueError("window_attention: a key prefix needs causal=True and no key_mask")
    kernel = choose_kernels(q, backend, dropout=dropout, training=training, auto_triton=False).window
    p = dropout if training else 0.0
    if kernel == "triton":
        from lavo_zoo.attention.ops import triton_utils
        from lavo_zoo.attention.ops.window import triton as window_triton
        try:
            return window_triton.triton_window_attention(q, k, v, window, causal=causal, bias=bias,
                                                         key_mask=key_mask, prefix=prefix, dropout=p,
                                                         seed=new_seed() if p else 0)
        except triton_utils.KernelUnavailable:  # cannot be compiled on this device (warned once): recompute below
            kernel = FALLBACK
    if kernel == "flex":
        fk, fv = (torch.cat([prefix[0], k], 2), torch.cat([prefix[1], v], 2)) if prefix is not None else (k, v)
        out = flex.flex_window_attention(q, fk, fv, window, causal=causal, bias=bias, key_mask=key_mask)
        if out is not None:  # None: the kernel cannot be compiled on this device (warned once); recompute below
            return out.to(ct)
        kernel = FALLBACK
    past_k, past_v = prefix if prefix is not None else (None, None)
    if kernel == "recompute":
        return WindowAttentionFunction.apply(q, k, v, past_k, past_v, bias, key_mask, window, causal, chunk, p,
                                             new_seed() if p else 0)
    P = 0 if past_k is None else past_k.shape[2]
    return window_autograd(q, [p for p in (past_k, k) if p is not None], [p for p in (past_v, v) if p is not None],
                           window, causal, bias, key_mask, P, dropout, training)


def window_attention_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *,
                          prefix: tuple[torch.Tensor, torch.Tensor], bias: torch.Tensor | None = None
                          ) -> torch.Tensor:
    """One causal query's window (a decoding step), in a handful of small operations.

    Args:
        q, k, v: [B, H, 1, d], the step's query, key and value.
        window: w.
        prefix: (keys, values) [B, H, P, d], P < w: the last keys and values before the step.
        bias: [H, 2w-1] relative bias, or None.

    Returns:
        [B, H, 1, d] in :func:`compute_dtype`: what :func:`window_attention` gives for the last query of
        cat(prefix, k), to rounding.
    """
    ct = compute_dtype(q.dtype)
    keys, values = torch.cat([prefix[0], k], 2).to(ct), torch.cat([prefix[1], v], 2).to(ct)   # [B, H, L, d]
    L = keys.shape[2]                                                            # keys t-L+1..t, L <= w
    scores = (q.to(ct) * q.shape[-1] ** -0.5) @ keys.transpose(-1, -2)           # [B, H, 1, L]
    if bias is not None:                                                         # key s: bias[s - t + w - 1]
        scores = scores + bias[:, window - L:window].to(ct)[None, :, None]
    return scores.softmax(-1) @ values                                           # [B, H, 1, d]


__all__ = ["BACKENDS", "CHUNK", "last_positions", "window_attention", "window_attention_step"]
