"""Triton kernels of LAVO's orthogonal-memory read (backend ``triton`` of the read; docs/lavo.md, "Kernels").

The same computation as :func:`lavo_zoo.attention.lavo.read.read_memory`: query t of head h reads memory row
m = mem[(offset + t) // group] (the one row when mem has one), through the bases B [r, d] of its head:
h = B m, s = scale h * (B q), p = softmax(s) over the r slots, o = B^T (p * h). That covers context dissection
(one row per window: group = w, offset = the chunk's start inside its first window), the running mean (one row per
token: group = 1) and noncausal / cross attention (one row per sequence).

- ``_fwd``: one program per (block of ``block_m`` queries, batch x head); it gathers each query's memory row, and
  h, B q, the softmax and the output are computed in registers (fp32; ``tl.dot`` with IEEE products for fp32
  inputs unless torch allows TF32, TF32 for half inputs), so nothing [T, r] reaches memory.
- ``_bwd``: one program per run of ``blocks`` query blocks of one head recomputes the same and writes dq, the
  per-query gradient of h (dh [T, r], fp32) and its partial gradient of the bases (summed over its queries: no
  atomics, so the result is deterministic). Torch then sums dh per memory row (an index_add over T / group rows)
  and forms dmem = dh_rows B.

Attention dropout (``dropout`` p > 0) multiplies the slot probabilities by the factor Z of the call's seed and each
(query, slot)'s offset in a [B H, T, r] layout (:func:`lavo_zoo.attention.ops.triton_utils.dropout_factor`),
regenerated in backward: o = B^T (p Z h). Both kernels run on a one-axis grid with 64-bit offsets through
:func:`~lavo_zoo.attention.ops.triton_utils.launch`; a backward kernel that cannot be compiled on the device leaves
the gradients to the autograd read under the same mask.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lavo_zoo.attention.common import heads_major_empty
from lavo_zoo.attention.ops.triton_utils import (
    NEG,
    KernelUnavailable,
    block_dim,
    dropout_factor,
    dropout_mask,
    grid,
    launch,
    precision,
    rowmajor,
    strides,
)

BLOCK_M = 64  # queries per block
BLOCKS = 16  # query blocks per backward program (one partial bases gradient per program)


@triton.jit
def _probs(Q, MEM, BASES, b, h, t, dd, rr, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, T, D, R, n_rows, offset, group,
           scale, PREC: tl.constexpr):
    """Queries t [BM] of head (b, h): q [BM, BD], their memory rows [BM, BD], the bases [BR, BD], h = m B^T and
    B q [BM, BR], and the probabilities p [BM, BR] (all fp32; zero outside t < T, rr < R, dd < D)."""
    tq, dm = t < T, dd < D
    q = tl.load(Q + b * sqb + h * sqh + t[:, None] * sqt + dd[None, :], mask=tq[:, None] & dm[None, :],
                other=0.0).to(tl.float32)
    row = tl.where(n_rows == 1, 0, (offset + t) // group)                               # [BM] memory row read
    m = tl.load(MEM + b * smb + h * smh + row[:, None] * smt + dd[None, :],
                mask=(tq & (row < n_rows))[:, None] & dm[None, :], other=0.0).to(tl.float32)
    basis = tl.load(BASES + h * sbh + rr[:, None] * sbr + dd[None, :], mask=(rr < R)[:, None] & dm[None, :],
                    other=0.0).to(tl.float32)                                           # [BR, BD]
    hm = tl.dot(m, tl.trans(basis), input_precision=PREC)                              # [BM, BR]  h = B m
    qb = tl.dot(q, tl.trans(basis), input_precision=PREC)                              # [BM, BR]  B q
    s = tl.where((rr < R)[None, :], scale * hm * qb, NEG)
    e = tl.exp(s - tl.max(s, 1)[:, None])
    return q, m, basis, hm, qb, e / tl.sum(e, 1)[:, None]


@triton.jit
def _drop(seed, p_drop, bh, t, rr, T, R):
    """Dropout factors [BM, BR] of queries t [BM] and slots rr [BR]: element (bh, t, slot) of the call's
    [B H, T, r] mask."""
    return dropout_factor(seed, (bh * T + t[:, None]) * R + rr[None, :], p_drop)


@triton.jit
def _fwd(Q, MEM, BASES, O, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, sob, soh, sot, H, T, D, R, n_rows, offset,
         group, NB, scale, seed, p_drop, DROPOUT: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr,
         BR: tl.constexpr, PREC: tl.constexpr):
    prog = tl.program_id(0).to(tl.int64)                  # one axis: (b h, query block); 64-bit offsets throughout
    bh, pid = prog // NB, prog % NB
    b, h = bh // H, bh % H
    t = pid * BM + tl.arange(0, BM)
    dd, rr = tl.arange(0, BD), tl.arange(0, BR)
    _, _, basis, hm, _, p = _probs(Q, MEM, BASES, b, h, t, dd, rr, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, T, D, R,
                                   n_rows, offset, group, scale, PREC)
    if DROPOUT:
        p = p * _drop(seed, p_drop, bh, t, rr, T, R)
    o = tl.dot(p * hm, basis, input_precision=PREC)                                    # [BM, BD]  B^T (p Z h)
    tl.store(O + b * sob + h * soh + t[:, None] * sot + dd[None, :], o, mask=(t < T)[:, None] & (dd < D)[None, :])


@triton.jit
def _bwd(Q, MEM, BASES, G, DQ, DH, PART, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, sgb, sgh, sgt, sdb, sdh, sdt,
         H, T, D, R, n_rows, offset, group, NP, scale, seed, p_drop, blocks: tl.constexpr, DROPOUT: tl.constexpr,
         BM: tl.constexpr, BD: tl.constexpr, BR: tl.constexpr, PREC: tl.constexpr):
    """dq [B, H, T, d]; DH [B H, T, BR] = dL/dh per query; PART [B H, NP, BR, BD] = this program's part of
    dL/dB from o = B^T (p Z h) and s = scale h (B q), plus dh^T m (h = B m)."""
    prog = tl.program_id(0).to(tl.int64)                  # one axis: (b h, run of blocks); 64-bit offsets throughout
    bh, pid = prog // NP, prog % NP
    b, h = bh // H, bh % H
    dd, rr = tl.arange(0, BD), tl.arange(0, BR)
    dm = dd < D
    dbases = tl.zeros([BR, BD], tl.float32)
    for i in range(blocks):
        t = (pid * blocks + i) * BM + tl.arange(0, BM)
        tq = t < T
        q, m, basis, hm, qb, p = _probs(Q, MEM, BASES, b, h, t, dd, rr, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, T, D,
                                        R, n_rows, offset, group, scale, PREC)
        go = tl.load(G + b * sgb + h * sgh + t[:, None] * sgt + dd[None, :], mask=tq[:, None] & dm[None, :],
                     other=0.0).to(tl.float32)                                          # [BM, BD]
        du = tl.dot(go, tl.trans(basis), input_precision=PREC)                          # [BM, BR]  d(p Z h)
        dp = du * hm
        kept = p
        if DROPOUT:
            z = _drop(seed, p_drop, bh, t, rr, T, R)
            dp, kept = dp * z, p * z
        ds = p * (dp - tl.sum(p * dp, 1)[:, None]) * scale                              # d(h * Bq)
        dq = tl.dot(ds * hm, basis, input_precision=PREC)                               # [BM, BD]
        tl.store(DQ + b * sdb + h * sdh + t[:, None] * sdt + dd[None, :], dq, mask=tq[:, None] & dm[None, :])
        dh = du * kept + ds * qb                                                        # [BM, BR]
        tl.store(DH + bh * T * BR + t[:, None] * BR + rr[None, :], dh, mask=tq[:, None])
        dbases += tl.dot(tl.trans(kept * hm), go, input_precision=PREC)
        dbases += tl.dot(tl.trans(ds * hm), q, input_precision=PREC)
        dbases += tl.dot(tl.trans(dh), m, input_precision=PREC)
    tl.store(PART + (prog * BR + rr[:, None]) * BD + dd[None, :], dbases)


class MemoryReadTritonFunction(torch.autograd.Function):
    """forward(q [B, H, T, d], mem [B, H, n, d], bases [H, r, d], offset, group, block_m, dropout, seed) ->
    [B, H, T, d] fp32 (laid out [B, T, H, d]); saves q, mem and the bases only (backward recomputes, like the
    recompute kernel, the dropout mask of ``seed`` included)."""

    @staticmethod
    def _config(q, bases, block_m):
        return {"BM": block_m, "BD": block_dim(q.shape[-1]), "BR": block_dim(bases.shape[1]),
                "PREC": precision(q.dtype)}

    @staticmethod
    def forward(ctx, q, mem, bases, offset, group, block_m, dropout=0.0, seed=0):
        q, mem, bases = rowmajor(q), rowmajor(mem), rowmajor(bases)
        B, H, T, d = q.shape
        n, r = mem.shape[2], bases.shape[1]
        out = heads_major_empty(B, H, T, d, q, torch.float32)
        nb = triton.cdiv(T, block_m)
        launch("read_fwd", _fwd, grid(nb * B * H, "the memory read's forward"),
               q, mem, bases, out, *strides(q), *strides(mem), *strides(bases), *strides(out), H, T, d, r, n,
               offset, group, nb, d ** -0.5, seed, dropout, DROPOUT=dropout > 0, num_warps=8,
               **MemoryReadTritonFunction._config(q, bases, block_m))
        ctx.save_for_backward(q, mem, bases)
        ctx.config = (offset, group, block_m, dropout, seed)
        return out

    @staticmethod
    def backward(ctx, grad):
        try:
            return MemoryReadTritonFunction._backward(ctx, grad)
        except KernelUnavailable:  # the backward kernel cannot be compiled here (warned once): autograd's read
            q, mem, bases = ctx.saved_tensors
            offset, group, _, dropout, seed = ctx.config
            from lavo_zoo.attention.lavo.read import read_memory_autograd

            keep = dropout_mask(seed, (*q.shape[:3], bases.shape[1]), dropout, q.device) if dropout else None
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_() for t in (q, mem, bases)]
                out = read_memory_autograd(*leaves, offset, group, keep=keep)
                grads = torch.autograd.grad(out, leaves, grad.to(out.dtype))
            return (*(g.to(t.dtype) for g, t in zip(grads, (q, mem, bases))), None, None, None, None, None)

    @staticmethod
    def _backward(ctx, grad):
        q, mem, bases = ctx.saved_tensors
        offset, group, block_m, dropout, seed = ctx.config
        B, H, T, d = q.shape
        n, r = mem.shape[2], bases.shape[1]
        cfg = MemoryReadTritonFunction._config(q, bases, block_m)
        g = rowmajor(grad)
        nblocks = triton.cdiv(T, block_m)
        blocks = min(BLOCKS, nblocks)
        programs = triton.cdiv(nblocks, blocks)
        dq = torch.empty(B, H, T, d, dtype=torch.float32, device=q.device)
        dh = torch.empty(B, H, T, cfg["BR"], dtype=torch.float32, device=q.device)
        part = torch.empty(B * H, programs, cfg["BR"], cfg["BD"], dtype=torch.float32, device=q.device)
        launch("read_bwd", _bwd, grid(programs * B * H, "the memory read's backward"),
               q, mem, bases, g, dq, dh, part, *strides(q), *strides(mem), *strides(bases), *strides(g),
               *strides(dq), H, T, d, r, n, offset, group, programs, d ** -0.5, seed, dropout, blocks,
               DROPOUT=dropout > 0, num_warps=8, **cfg)
        dh = dh[..., :r]                                                                 # [B, H, T, r]
        if n == 1:
            dh_rows = dh.sum(2, keepdim=True)                                            # [B, H, 1, r]
        else:
            rows = (torch.arange(T, device=q.device) + offset) // group
            dh_rows = torch.zeros(B, H, n, r, dtype=torch.float32, device=q.device).index_add_(2, rows, dh)
        b32 = bases.float()
        dmem = dh_rows @ b32                                                             # [B, H, n, d]
        dbases = part.view(B, H, programs, cfg["BR"], cfg["BD"]).sum((0, 2))[:, :r, :d]
        return dq.to(q.dtype), dmem.to(mem.dtype), dbases.to(bases.dtype), None, None, None, None, None


@torch.compiler.disable  # torch.compile runs it as is (a graph break), not traced into the launches
def read_memory_triton(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, offset: int = 0, group: int = 1,
                       block_m: int = BLOCK_M, dropout: float = 0.0, seed: int = 0) -> torch.Tensor:
    """q [B, H, T, d] reads mem [B, H, n, d] (query t: row (offset + t) // group; n == 1: the one row) through bases
    [H, r, d]; [B, H, T, d] fp32. ``block_m``: a power of two >= 16 (tests use 16). ``dropout`` p > 0 drops slot
    probabilities with the mask of ``seed`` (:func:`lavo_zoo.attention.ops.triton_utils.dropout_mask` of shape
    [B, H, T, r]). Raises :class:`~lavo_zoo.attention.ops.triton_utils.KernelUnavailable` where the forward kernel
    cannot be compiled on this device."""
    return MemoryReadTritonFunction.apply(q, mem, bases, offset, group, block_m, dropout, seed)
