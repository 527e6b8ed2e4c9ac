"""Triton kernels of LAVO's memory rows (context dissection's cumulative sums, the noncausal mean) and their
gradient: what :func:`..ops.dissected_memory` and :func:`..ops.mean_memory` compute in about 20 torch operations
(window sums, counts, two cumulative sums, paddings, a division), and their backward in about 25 more, in one
kernel each. The fused layer (``fused.py``) runs them between the window and the read kernels.

- ``_memory_fwd``: one program per (b, h) walks the sequence in tiles of ``WPT`` windows of w tokens ([WPT, BW, BD]
  loads, fp32 sums): causal, row j = the mean of the real tokens' features in the windows before window j
  (``before_j / count_j``, zero where no token is); noncausal, the one row = the mean over the real tokens. Rows are
  written unnormalised (fp32); the read kernel applies the rms normalisation as it loads them.
- ``_memory_bwd``: one program per (b, h) walks back: the read's per-query gradient of h (dh [T, r], from the read's
  backward) summed per window row, through the bases (dm^ = B^T dh_row), the rms normalisation and the division by
  the count, gives dL/dbefore_j; a token of window i feeds every before_j with j > i, so its feature's gradient is
  the suffix sum sum_{j > i} dL/dbefore_j: ``dwin[i]`` (noncausal: the one row's, every real token's). The window's
  backward kernels add it to the local branch's gradient as they load it (``ops/window/triton.py``:
  ``_load_grad``), so no [T, d] gradient is written here.

Each program scans its (b, h) sequentially (a tile's loads do not wait on the running sum); B x H programs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lavo_zoo.attention.lavo.triton import RMS_EPS
from lavo_zoo.attention.ops.triton_utils import block_dim, grid, launch

NONCAUSAL_TILE = 16  # tokens per "window" of the noncausal scan (its rows are summed whole)
NUM_WARPS = 8


def windows_per_tile(extent: int) -> int:
    """Windows per tile for windows of ``extent`` (a power of two) tokens: 16 up to 16 tokens (the backward's product
    through the bases is then a tl.dot, which takes 16 rows at least), else at most 4 and 256 tokens (a [windows, r,
    d] product in registers)."""
    return 16 if extent <= 16 else max(1, min(4, 256 // extent))


@triton.jit(do_not_specialize=["T", "n", "tiles"])
def _memory_fwd(FEAT, KMASK, MEM, sfb, sfh, sft, smk, H, T, D, n, tiles, W: tl.constexpr, CAUSAL: tl.constexpr,
                HAS_MASK: tl.constexpr, BD: tl.constexpr, BW: tl.constexpr, WPT: tl.constexpr):
    """Program (b, h): MEM [B H, n, D] fp32, row j = (sum of the real features of windows < j) / their count (causal;
    n = cdiv(T, W)), or the one row = the mean of every real feature (noncausal; n = 1)."""
    bh = tl.program_id(0).to(tl.int64)
    b, h = bh // H, bh % H
    dd, jj, ii = tl.arange(0, BD), tl.arange(0, WPT), tl.arange(0, BW)
    dm = dd < D
    carry = tl.zeros([BD], tl.float32)
    carry_count = tl.zeros([1], tl.float32)
    tile = 0
    while tile < tiles:  # cdiv(T, W WPT) tiles (a while loop: Triton 3.6's interpreter takes no runtime range)
        j = (tile * WPT + jj).to(tl.int64)                                          # [WPT] windows
        t = j[:, None] * W + ii[None, :]                                            # [WPT, BW] tokens
        ok = (ii < W)[None, :] & (t < T)
        if HAS_MASK:
            ok = ok & (tl.load(KMASK + b * smk + t, mask=ok, other=0) != 0)
        f = tl.load(FEAT + b * sfb + h * sfh + t[:, :, None] * sft + dd[None, None, :],
                    mask=ok[:, :, None] & dm[None, None, :], other=0.0).to(tl.float32)  # [WPT, BW, BD]
        sums = tl.sum(f, 1)                                                         # [WPT, BD]
        counts = tl.sum(ok.to(tl.float32), 1)                                       # [WPT]
        if CAUSAL:
            before = carry[None, :] + tl.cumsum(sums, 0) - sums                     # windows < j
            count = carry_count + tl.cumsum(counts, 0) - counts
            tl.store(MEM + (bh * n + j)[:, None] * D + dd[None, :], before / tl.maximum(count, 1.0)[:, None],
                     mask=(j < n)[:, None] & dm[None, :])
        carry += tl.sum(sums, 0)
        carry_count += tl.sum(counts, 0)
        tile += 1
    if not CAUSAL:
        tl.store(MEM + bh * D + dd, carry / tl.maximum(carry_count, 1.0), mask=dm)


@triton.jit(do_not_specialize=["T", "n", "tiles"])
def _memory_bwd(DH, BASES, MEM, KMASK, DWIN, sbh, sbr, smk, H, T, D, R, n, tiles, W: tl.constexpr, CAUSAL: tl.constexpr,
                RMS: tl.constexpr, HAS_MASK: tl.constexpr, BD: tl.constexpr, BR: tl.constexpr, BW: tl.constexpr,
                WPT: tl.constexpr):
    """Program (b, h): from DH [B H, T, BR] fp32 (dL/dh of each query's read, h = B m^ of the row it read) and the
    rows MEM of the forward, DWIN [B H, n, D] fp32: the gradient of the features of window i's tokens (causal), or
    of every real token (noncausal, n = 1)."""
    bh = tl.program_id(0).to(tl.int64)
    b, h = bh // H, bh % H
    dd, rr, jj, ii = tl.arange(0, BD), tl.arange(0, BR), tl.arange(0, WPT), tl.arange(0, BW)
    dm = dd < D
    basis = tl.load(BASES + h * sbh + rr[:, None] * sbr + dd[None, :], mask=(rr < R)[:, None] & dm[None, :],
                    other=0.0).to(tl.float32)                                       # [BR, BD]
    total = tl.zeros([1], tl.float32) + T                                           # real tokens of the row
    if HAS_MASK:
        total = tl.zeros([1], tl.float32)
        start = 0
        while start < T:
            t = start + tl.arange(0, 1024).to(tl.int64)
            total += tl.sum((tl.load(KMASK + b * smk + t, mask=t < T, other=0) != 0).to(tl.float32), 0)
            start += 1024
    carry = tl.zeros([BD], tl.float32)                  # causal: sum of dL/dbefore_j over the windows after the tile
    carry_count = tl.zeros([1], tl.float32)             # real tokens of the windows after the tile
    acc = tl.zeros([BR], tl.float32)                    # noncausal: dh summed over every query
    k = 0
    while k < tiles:
        tile = k
        if CAUSAL:
            tile = tiles - 1 - k                                                    # backwards
        j = (tile * WPT + jj).to(tl.int64)                                          # [WPT] windows
        t = j[:, None] * W + ii[None, :]                                            # [WPT, BW] queries
        ok = (ii < W)[None, :] & (t < T)
        dhq = tl.load(DH + bh * T * BR + t[:, :, None] * BR + rr[None, None, :],
                      mask=ok[:, :, None] & (rr < R)[None, None, :], other=0.0)     # [WPT, BW, BR]
        if CAUSAL:
            dh_rows = tl.sum(dhq, 1)                                                # [WPT, BR] per window row
            if WPT >= 16:
                dmh = tl.dot(dh_rows, basis, input_precision="ieee")                # [WPT, BD] dL/dm^
            else:
                dmh = tl.sum(dh_rows[:, :, None] * basis[None, :, :], 1)
            m = tl.load(MEM + (bh * n + j)[:, None] * D + dd[None, :], mask=(j < n)[:, None] & dm[None, :],
                        other=0.0)                                                  # [WPT, BD] the rows' means
            if RMS:
                s = 1.0 / tl.sqrt(tl.sum(m * m, 1) / D + RMS_EPS)                   # m^ = m s
                dmh = s[:, None] * dmh - (s * s * s * tl.sum(m * dmh, 1) / D)[:, None] * m
            real = ok
            if HAS_MASK:
                real = ok & (tl.load(KMASK + b * smk + t, mask=ok, other=0) != 0)
            counts = tl.sum(real.to(tl.float32), 1)                                 # [WPT]
            count = total - carry_count - tl.cumsum(counts, 0, reverse=True)        # real tokens before window j
            # [WPT, BD]; a row of no real token (window 0) reads zeros and feeds no feature: zero, not dL/dm^ (up
            # to 1e3 dL/dm^ through the rms of a zero row), which the exclusive suffix below would subtract again
            dbefore = tl.where((count > 0)[:, None], dmh / tl.maximum(count, 1.0)[:, None], 0.0)
            suffix = carry[None, :] + tl.cumsum(dbefore, 0, reverse=True) - dbefore  # windows after j
            tl.store(DWIN + (bh * n + j)[:, None] * D + dd[None, :], suffix, mask=(j < n)[:, None] & dm[None, :])
            carry += tl.sum(dbefore, 0)
            carry_count += tl.sum(counts, 0)
        else:
            acc += tl.sum(tl.sum(dhq, 1), 0)
        k += 1
    if not CAUSAL:
        dmh = tl.sum(acc[:, None] * basis, 0)                                       # [BD]
        m = tl.load(MEM + bh * D + dd, mask=dm, other=0.0)
        if RMS:
            s = 1.0 / tl.sqrt(tl.sum(m * m, 0) / D + RMS_EPS)
            dmh = s * dmh - s * s * s * tl.sum(m * dmh, 0) / D * m
        tl.store(DWIN + bh * D + dd, dmh / tl.maximum(total, 1.0), mask=dm)


def _tiling(window: int, causal: bool) -> tuple[int, int, int]:
    """(W, BW, WPT): the scan's window (w causal, :data:`NONCAUSAL_TILE` noncausal), its power-of-two extent and the
    windows per tile."""
    W = window if causal else NONCAUSAL_TILE
    BW = triton.next_power_of_2(W)
    return W, BW, windows_per_tile(BW)


def memory_rows(feats: torch.Tensor, mask: torch.Tensor | None, window: int, causal: bool) -> torch.Tensor:
    """The memory rows of features feats [B, H, T, d] (any strides, unit column stride; zero or not at padded
    positions: the mask [B, T] int8 excludes them): [B, H, n, d] fp32, unnormalised means (causal: n = cdiv(T, w),
    row j of the windows before window j; noncausal: n = 1).

    Args:
        feats: [B, H, T, d] the features.
        mask: [B, T] int8 (1 real), or None.
        window: w.
        causal: context dissection's rows (True), or the noncausal mean.
    """
    B, H, T, d = feats.shape
    n = triton.cdiv(T, window) if causal else 1
    mem = torch.empty(B, H, n, d, dtype=torch.float32, device=feats.device)
    W, BW, WPT = _tiling(window, causal)
    launch("memory_fwd", _memory_fwd, grid(B * H, "the memory rows"), feats, mask if mask is not None else feats,
           mem, feats.stride(0), feats.stride(1), feats.stride(2), mask.stride(0) if mask is not None else 0, H, T, d,
           n, triton.cdiv(T, W * WPT), W=W, CAUSAL=causal, HAS_MASK=mask is not None, BD=block_dim(d), BW=BW,
           WPT=WPT, num_warps=NUM_WARPS)
    return mem


def memory_rows_backward(dh: torch.Tensor, bases: torch.Tensor, mem: torch.Tensor, mask: torch.Tensor | None,
                         window: int, causal: bool, rms: bool) -> torch.Tensor:
    """The features' gradient of :func:`memory_rows` from the read's per-query dh [B, H, T, BR] fp32 (BR >= r) with
    bases [H, r, d] and the forward's rows mem [B, H, n, d] (``rms``: the read normalised them): dwin [B H, n, d]
    fp32, the gradient of each feature of window i's real tokens (causal), of every real token (noncausal, n = 1).

    Args:
        dh: [B, H, T, BR] fp32, the read's per-query gradient of h = B m.
        bases: [H, r, d].
        mem: [B, H, n, d] the forward's rows.
        mask: [B, T] int8 (1 real), or None.
        window: w.
        causal: as in the forward.
        rms: the read normalised the rows.
    """
    B, H, T, BR = dh.shape
    n, d = mem.shape[2], mem.shape[3]
    dwin = torch.empty(B * H, n, d, dtype=torch.float32, device=dh.device)
    W, BW, WPT = _tiling(window, causal)
    launch("memory_bwd", _memory_bwd, grid(B * H, "the memory rows' gradient"), dh, bases,
           mem, mask if mask is not None else dh, dwin, bases.stride(0), bases.stride(1),
           mask.stride(0) if mask is not None else 0, H, T, d, bases.shape[1], n, triton.cdiv(T, W * WPT), W=W,
           CAUSAL=causal, RMS=rms, HAS_MASK=mask is not None, BD=block_dim(d), BR=BR, BW=BW, WPT=WPT,
           num_warps=NUM_WARPS)
    return dwin
