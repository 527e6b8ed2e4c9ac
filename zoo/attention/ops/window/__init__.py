"""Exact sliding-window softmax attention, the op shared by LAVO's local branch and the ``local`` mechanism.

Window of query t: causal keys s in [t-w+1, t]; noncausal keys s in [t-w+1, t+w-1]. The optional relative bias
``bias[h, s - t + w - 1]`` (shape [H, 2w-1]) is LAVO's embedded position encoding.

:func:`window_attention` is the one entry; ``backend`` picks how it runs:
- ``recompute``: :class:`~lavo_zoo.attention.ops.window.blocked.WindowAttentionFunction` (``blocked.py``), which
  saves only its inputs and recomputes each chunk's scores in backward. The default on CPU and for short CUDA chunks.
- ``autograd``: :func:`~lavo_zoo.attention.ops.window.blocked.window_autograd`, the same blocked computation left to
  autograd; needed with attention dropout in training.
- ``flex``: the fused CUDA kernel of ``flex.py``.
- ``triton``: the Triton kernels of ``triton.py`` (forward and backward, streaming prefix included; LAVO's layer picks
  them on CUDA). Where they do not apply (fp64; a CPU tensor outside Triton's interpreter; Triton missing; attention
  dropout in training; ``LAVO_ZOO_TRITON=0``: :func:`triton_applies`) the call runs as 'auto' would: on
  ``flex`` where it is enabled (CUDA, at least ``flex.MIN_QUERIES`` queries), else ``recompute`` (``autograd`` with
  dropout). 'auto' never picks it (the ``local`` mechanism keeps ``flex`` on CUDA).
``naive.py`` holds the dense masked O(T^2) reference the tests compare with.
"""
from __future__ import annotations

import os

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops.window import flex
from lavo_zoo.attention.ops.window.blocked import CHUNK, WindowAttentionFunction, window_autograd

BACKENDS = ("auto", "recompute", "autograd", "flex", "triton")


def triton_applies(q: torch.Tensor, dropout: float, training: bool) -> bool:
    """Whether the ``triton`` backend runs for these queries (else it falls back to the blocked kernels)."""
    if (dropout and training) or os.environ.get("LAVO_ZOO_TRITON", "1") == "0":
        return False
    try:
        from lavo_zoo.attention.ops.window import triton as window_triton
    except ImportError:  # no Triton on this platform
        return False
    return window_triton.usable(q)


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
    """Exact sliding-window attention; returns ``[B, H, T, d]`` in :func:`compute_dtype`.

    q, k, v [B, H, T, d]; key_mask [B, T] bool (True = real key). ``prefix`` = (keys, values) [B, H, P, d], P < w:
    the previous chunk's last keys and values (causal streaming; no key_mask then), sitting before position 0.
    A query whose window holds no real key (only possible for padded queries) gets finite garbage, never NaN.
    ``backend`` (see the module docstring): 'auto' = 'flex' where :func:`flex.enabled`, 'autograd' with dropout
    in training, else 'recompute'. Callers that choose explicitly (LAVO's layer does) pass the name.
    """
    ct = compute_dtype(q.dtype)
    if prefix is not None and (not causal or key_mask is not None):
        raise ValueError("window_attention: a key prefix needs causal=True and no key_mask")
    if backend not in BACKENDS:
        raise ValueError(f"window_attention: backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    if backend == "auto":
        backend = "flex" if flex.enabled(q, dropout, training) else "autograd" if dropout and training \
            else "recompute"
    if backend == "triton":
        if triton_applies(q, dropout, training):
            from lavo_zoo.attention.ops.window import triton as window_triton
            return window_triton.triton_window_attention(q, k, v, window, causal=causal, bias=bias, key_mask=key_mask,
                                                         prefix=prefix)
        backend = "flex" if flex.enabled(q, dropout, training) else "autograd" if dropout and training else "recompute"
    if backend == "flex":
        fk, fv = (torch.cat([prefix[0], k], 2), torch.cat([prefix[1], v], 2)) if prefix is not None else (k, v)
        out = flex.flex_window_attention(q, fk, fv, window, causal=causal, bias=bias, key_mask=key_mask)
        if out is not None:  # None: the kernel cannot be compiled on this device (warned once); recompute below
            return out.to(ct)
        backend = "autograd" if dropout and training else "recompute"
    past_k, past_v = prefix if prefix is not None else (None, None)
    if backend == "recompute":
        if dropout and training:
            raise ValueError("window_attention: the recompute backend has no attention dropout; use 'autograd'")
        return WindowAttentionFunction.apply(q, k, v, past_k, past_v, bias, key_mask, window, causal, chunk)
    P = 0 if past_k is None else past_k.shape[2]
    return window_autograd(q, [p for p in (past_k, k) if p is not None], [p for p in (past_v, v) if p is not None],
                        window, causal, bias, key_mask, P, dropout, training)


__all__ = ["BACKENDS", "CHUNK", "last_positions", "triton_applies", "window_attention"]
