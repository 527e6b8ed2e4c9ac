"""CUDA fused sliding window: ``flex_attention`` with a banded block mask and a ``score_mod`` for the relative
bias, the window op's ``flex`` kernel (``ops/window/__init__.py``). 'auto' takes it on CUDA for chunks of at least
``MIN_QUERIES`` queries (:func:`enabled`) without attention dropout in training (LAVO's default there, and the
``local`` mechanism's); ``LAVO_ZOO_FLEX=0`` turns that off (the blocked path everywhere).

Variable lengths: flex_attention is compiled with dynamic shapes, so a new length reuses the compiled kernel
(compiled with static shapes it would recompile for every length and, past torch's recompile limit of 8, run its
unfused eager form with [B, H, T, T] scores). A streaming chunk's key prefix is folded away by giving the chunk P
leading dummy queries (queries and keys then have one length, and P is not a compile-time constant either).

The block mask is built from block indices (:func:`band_block_mask`): the band of a w-token window touches at most
three 128-key blocks per 128-query block, so the mask is built from O(T / 128) numbers. (``create_block_mask``
evaluates ``mask_mod`` on the whole T x T grid: 10 GB at 32K tokens, measured on an H100.) If the kernel cannot be
compiled on this device (e.g. its shared memory is too small for a tile configuration), the fused path is switched
off for the process with one warning and :class:`~lavo_zoo.attention.ops.KernelUnavailable`, and the dispatch runs
the blocked path.
"""
from __future__ import annotations

import functools
import math
import os
import warnings

import torch

from lavo_zoo.attention.ops import KernelUnavailable

MIN_QUERIES = 256  # shorter chunks (decoding) stay on the blocked path
BLOCK = 128  # flex_attention's sparse block size (queries and keys)
COMPILE_BACKEND = "inductor"  # torch.compile's backend (the tests count compilations with a stand-in)
_failure: str | None = None  # why the fused kernel is off in this process, once it failed to compile


def usable(q: torch.Tensor) -> bool:
    """Whether the kernel can run: it did not fail to compile in this process."""
    return _failure is None


def enabled(q: torch.Tensor) -> bool:
    """Whether 'auto' may take the kernel for queries q [B, H, T, d] on a CUDA device (the dispatch asks for the
    device): at least ``MIN_QUERIES`` queries, ``LAVO_ZOO_FLEX`` not 0, and :func:`usable`. (It has no attention
    dropout: the dispatch does not take it in training with dropout.)"""
    return q.shape[2] >= MIN_QUERIES and usable(q) and os.environ.get("LAVO_ZOO_FLEX", "1") != "0"


@functools.cache
def _compiled_flex(backend):
    """flex_attention compiled once for all lengths (dynamic shapes), per torch.compile backend."""
    from torch.nn.attention.flex_attention import flex_attention
    return torch.compile(flex_attention, dynamic=True, backend=backend)


def band_block_mask(q_len: int, kv_len: int, window: int, *, causal: bool, mask_mod, device: torch.device,
                    block: int = BLOCK):
    """The sliding-window band as a ``BlockMask``: for every block of ``block`` queries, the key blocks its windows
    touch (queries sit at key positions P..P+q_len-1, P = kv_len - q_len). Every listed block is partial, so
    ``mask_mod`` decides each (query, key) pair inside it.

    Args:
        q_len: the queries.
        kv_len: the keys (P + q_len).
        window: w.
        causal: keys [t-w+1, t] (True) or [t-w+1, t+w-1].
        mask_mod: flex_attention's mask function (b, h, q_idx, kv_idx) -> bool.
        device: where the block indices live.
        block: queries (and keys) per block.
    """
    from torch.nn.attention.flex_attention import BlockMask

    P = kv_len - q_len
    nq, nk = math.ceil(q_len / block), math.ceil(kv_len / block)
    starts = torch.arange(nq, device=device) * block                              # [nq] first query of each block
    first = starts + P                                                            # its key position
    last = (starts + block).clamp(max=q_len) - 1 + P                              # the block's last query
    lo = (first - window + 1).clamp(min=0) // block                               # first key block in any window
    hi = (last if causal else (last + window - 1).clamp(max=kv_len - 1)) // block  # last key block
    count = hi - lo + 1                                                           # [nq], at most 3 + w // block
    # BlockMask wants one row of nk indices per query block (the first `count` used): O((T / block)^2) int32, which
    # is what create_block_mask returns too, but without evaluating mask_mod on T x T pairs to build it.
    indices = (lo[:, None] + torch.arange(nk, device=device)).clamp(max=nk - 1)    # [nq, nk]
    return BlockMask.from_kv_blocks(count.view(1, 1, nq).to(torch.int32), indices.view(1, 1, nq, nk).to(torch.int32),
                                    BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(q_len, kv_len))


def flex_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                          bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                          compiled: bool = True, block: int = BLOCK) -> torch.Tensor:
    """Same contract as ``window_attention`` (q [B, H, Tq, d], k/v [B, H, P+Tq, d]); returns [B, H, Tq, d] in q's
    dtype (softmax in fp32 inside the kernel). Rows with no real key give zeros. Raises
    :class:`~lavo_zoo.attention.ops.KernelUnavailable` (after one warning, and from then on :func:`usable` is False)
    when the compiled kernel cannot be built here.

    Its arguments are stated on `lavo_zoo.attention.ops.window.window_attention` (``k`` and ``v`` with the prefix
    joined in front); ``compiled``: run the compiled kernel (False: eager flex_attention, for tests); ``block``:
    queries per block of :func:`band_block_mask`.
    """
    global _failure
    from torch.nn.attention.flex_attention import flex_attention

    Tq, Tk, w = q.shape[2], k.shape[2], window
    P = Tk - Tq
    if P:  # P leading dummy queries: query i of the chunk is query P + i, at key position P + i; no offset left
        q = torch.cat([q.new_zeros(*q.shape[:2], P, q.shape[3]), q], 2)             # [B, H, Tk, d]
    mask_mod, score_mod = _band_mods(w, causal, key_mask, bias)
    block_mask = band_block_mask(Tk, Tk, w, causal=causal, mask_mod=mask_mod, device=q.device, block=block)
    run = flex_attention if not compiled else _compiled_flex(COMPILE_BACKEND)
    try:
        return run(q, k, v, score_mod=score_mod, block_mask=block_mask)[:, :, P:]
    except torch.OutOfMemoryError:  # out of device memory at run time: not a compile failure
        raise
    except RuntimeError as e:  # inductor/triton compile failures (InductorError, BackendCompilerFailed, ...)
        if not compiled:
            raise
        _failure = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        warnings.warn(f"LAVO's fused flex_attention window kernel could not be compiled on this device ({_failure}); "
                      "using the blocked window path for the rest of this process (set LAVO_ZOO_FLEX=0 to skip the "
                      "attempt)", RuntimeWarning, stacklevel=2)
        raise KernelUnavailable(f"flex_attention window: {_failure}") from e


def _band_mods(w: int, causal: bool, key_mask: torch.Tensor | None, bias: torch.Tensor | None):
    """flex_attention's ``mask_mod`` (key kv in query qi's window, and real) and ``score_mod`` (plus the relative
    bias ``bias[h, kv - qi + w - 1]``; None without bias) for queries and keys of one length."""
    def mask_mod(b, h, qi, kv):
        ok = (kv > qi - w) & ((kv <= qi) if causal else (kv < qi + w))
        return ok & key_mask[b, kv] if key_mask is not None else ok

    def score_mod(score, b, h, qi, kv):
        return score + bias[h, (kv - qi + w - 1).clamp(0, 2 * w - 2)].to(score.dtype)

    return mask_mod, score_mod if bias is not None else None
