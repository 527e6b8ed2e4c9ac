"""Exact sliding-window softmax attention, the op shared by LAVO's local branch and the ``local`` mechanism.

Window of query t: causal keys s in [t-w+1, t]; noncausal keys s in [t-w+1, t+w-1]. The optional relative bias
``bias[h, s - t + w - 1]`` (shape [H, 2w-1]) is LAVO's embedded position encoding.

:func:`window_attention` is the one entry. Its kernels, one signature (q, k, v, window, causal, bias, key_mask,
prefix, dropout, chunk), declared for the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`, which chooses among
them and falls back) as :data:`WINDOW`:

- ``recompute`` (:func:`recompute_window`): the autograd Function of ``blocked.py``, which saves only its inputs and
  recomputes each chunk's scores in backward (attention dropout included: each chunk's mask is regenerated from the
  call's seed). Every device and dtype: the fallback.
- ``autograd`` (:func:`autograd_window`): the same blocked computation left to autograd (torch's own dropout); only
  when requested.
- ``flex`` (:func:`flex_window`): the fused kernel of ``flex.py`` (no dropout); 'auto' takes it on CUDA for chunks
  of at least ``flex.MIN_QUERIES`` queries.
- ``triton`` (:func:`triton_window`): the Triton kernels of ``triton.py`` (forward and backward, streaming prefix
  and dropout included), where the dispatch's Triton rule lets 'auto' take them (LAVO's layer) or on request.

:data:`WINDOW_KERNELS` is the window alone, as :func:`window_attention`'s 'auto' and the ``local`` mechanism choose
it: Triton on request only. :func:`window_attention_step` is one query's window (a decoding step); ``naive.py``
holds the dense masked O(T^2) reference the tests compare with.
"""
from __future__ import annotations

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops import dispatch
from lavo_zoo.attention.ops.dispatch import AUTO, Chosen, Kernel, KernelSet, Op
from lavo_zoo.attention.ops.dropout import new_seed
from lavo_zoo.attention.ops.window import flex
from lavo_zoo.attention.ops.window.blocked import CHUNK, WindowAttentionFunction, window_autograd

Prefix = tuple[torch.Tensor, torch.Tensor]


# ------------------------------------------------------------------------------------------------- the kernels
# Each: q, k, v [B, H, T, d]; prefix (keys, values) [B, H, P, d] or None; dropout p already 0 outside training.
def recompute_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                     bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                     prefix: Prefix | None = None, dropout: float = 0.0, chunk: int = CHUNK) -> torch.Tensor:
    """The blocked window that recomputes in backward: [B, H, T, d] in :func:`compute_dtype`, a fresh tensor.

    Its arguments are stated on `window_attention` (``dropout`` already 0 outside training; ``prefix``: (keys,
    values) [B, H, P, d] or None).
    """
    past_k, past_v = prefix if prefix is not None else (None, None)
    return WindowAttentionFunction.apply(q, k, v, past_k, past_v, bias, key_mask, window, causal, chunk, dropout,
                                         new_seed() if dropout else 0)


def autograd_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                    bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                    prefix: Prefix | None = None, dropout: float = 0.0, chunk: int = CHUNK) -> torch.Tensor:
    """The blocked window left to autograd (keeps the [T, 2w] probabilities): [B, H, T, d] in the compute dtype.

    Its arguments are stated on `window_attention` (``dropout`` already 0 outside training; ``chunk`` unused).
    """
    keys, values = ([prefix[0], k], [prefix[1], v]) if prefix is not None else ([k], [v])
    P = 0 if prefix is None else prefix[0].shape[2]
    return window_autograd(q, keys, values, window, causal, bias, key_mask, P, dropout, dropout > 0)


def flex_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                prefix: Prefix | None = None, dropout: float = 0.0, chunk: int = CHUNK) -> torch.Tensor:
    """flex_attention's fused window (no dropout: the dispatch does not take it then): [B, H, T, d] in the compute
    dtype. Raises :class:`~lavo_zoo.attention.ops.KernelUnavailable` where it cannot be compiled (warned once).

    Its arguments are stated on `window_attention` (``dropout`` and ``chunk`` unused).
    """
    fk, fv = (torch.cat([prefix[0], k], 2), torch.cat([prefix[1], v], 2)) if prefix is not None else (k, v)
    out = flex.flex_window_attention(q, fk, fv, window, causal=causal, bias=bias, key_mask=key_mask)
    return out.to(compute_dtype(q.dtype))


def triton_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                  bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                  prefix: Prefix | None = None, dropout: float = 0.0, chunk: int = CHUNK) -> torch.Tensor:
    """The Triton window kernels: [B, H, T, d] in q's dtype. Raises :class:`~lavo_zoo.attention.ops.
    KernelUnavailable` where a kernel cannot be compiled on this device (warned once).

    Its arguments are stated on `window_attention` (``dropout`` already 0 outside training; ``chunk`` unused).
    """
    from lavo_zoo.attention.ops.window import triton as window_triton

    return window_triton.triton_window_attention(q, k, v, window, causal=causal, bias=bias, key_mask=key_mask,
                                                 prefix=prefix, dropout=dropout, seed=new_seed() if dropout else 0)


def _flex_auto(q: torch.Tensor) -> bool:
    return dispatch.on_cuda(q) and flex.enabled(q)


RECOMPUTE = Kernel("recompute", recompute_window, fresh=True)
AUTOGRAD = Kernel("autograd", autograd_window)
FLEX = Kernel("flex", flex_window, runs=flex.usable, auto=_flex_auto, dropout=False, min_queries=flex.MIN_QUERIES,
              compiled=True)
TRITON = Kernel("triton", triton_window, runs=dispatch.triton_runs, auto=dispatch.triton_auto, compiled=True)
WINDOW = Op("window", (TRITON, FLEX, RECOMPUTE, AUTOGRAD), fallback=RECOMPUTE)
WINDOW_KERNELS = KernelSet("window", window=WINDOW.without_auto("triton"))


# ------------------------------------------------------------------------------------------------- the entry
def last_positions(prefix: torch.Tensor | None, t: torch.Tensor, window: int) -> torch.Tensor:
    """The last min(w-1, P+T) time steps of cat(prefix, t) as a fresh small tensor: the streaming ring of keys or
    values (prefix [B, H, P, d] or None, t [B, H, T, d])."""
    keep = window - 1
    tail = torch.cat(([prefix] if prefix is not None else []) + [t[:, :, max(0, t.shape[2] - keep):]], 2)
    return tail[:, :, max(0, tail.shape[2] - keep):].clone()


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                     bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                     prefix: Prefix | None = None, dropout: float = 0.0, training: bool = False,
                     kernel: str | Chosen = AUTO, chunk: int = CHUNK) -> torch.Tensor:
    """Exact sliding-window attention.

    Args:
        q: queries [B, H, T, d].
        k: keys [B, H, T, d].
        v: values [B, H, T, d].
        window: w, the keys per causal window (2w - 1 noncausal).
        causal: keys [t-w+1, t] (True) or [t-w+1, t+w-1].
        bias: [H, 2w-1] relative bias added to the scaled scores, or None.
        key_mask: [B, T] bool (True = real key), or None.
        prefix: (keys, values) [B, H, P, d], P < w: the previous chunk's last keys and values (causal streaming; no
            key_mask then), sitting before position 0.
        dropout: attention dropout p on the probabilities (in training only).
        training: whether the call is in training (False: no dropout).
        kernel: 'auto' or a kernel name, chosen from :data:`WINDOW_KERNELS`; or a kernel a layer chose already
            (its :class:`~lavo_zoo.attention.ops.dispatch.Choice`'s ``window``).
        chunk: queries per recomputed chunk of the ``recompute`` kernel.

    Returns:
        [B, H, T, d] in :func:`compute_dtype` (in q's dtype from the Triton kernels). A query whose window holds no
        real key (only possible for padded queries) gets finite garbage, never NaN.
    """
    if prefix is not None and (not causal or key_mask is not None):
        raise ValueError("window_attention: a key prefix needs causal=True and no key_mask")
    run = kernel if isinstance(kernel, Chosen) else \
        WINDOW_KERNELS.choose(q, kernel, dropout=dropout, training=training).window
    return run(q, k, v, window, causal=causal, bias=bias, key_mask=key_mask, prefix=prefix,
               dropout=dropout if training else 0.0, chunk=chunk)


def window_attention_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *,
                          prefix: tuple[torch.Tensor, torch.Tensor], bias: torch.Tensor | None = None
                          ) -> torch.Tensor:
    """One causal query's window (a decoding step), in a handful of small operations.

    Args:
        q: [B, H, 1, d], the step's query.
        k: [B, H, 1, d], the step's key.
        v: [B, H, 1, d], the step's value.
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


__all__ = ["CHUNK", "WINDOW", "WINDOW_KERNELS", "last_positions", "window_attention", "window_attention_step"]
