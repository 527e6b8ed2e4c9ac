"""Triton kernels of LAVO's orthogonal-memory read (the read's ``triton`` kernel; docs/lavo.md, "Kernels").

The same computation as :func:`lavo_zoo.attention.lavo.read.read_memory`: query t of head h reads memory row
m = mem[(offset + t) // group] (the one row when mem has one), through the bases B [r, d] of its head:
h = B m, s = scale h * (B q), p = softmax(s) over the r slots, o = B^T (p * h). That covers context dissection
(one row per window: group = w, offset = the chunk's start inside its first window), the running mean (one row per
token: group = 1) and noncausal / cross attention (one row per sequence).

- ``_fwd``: one program per (batch x head, block of BM queries); it gathers each query's memory row, and h, B q,
  the softmax and the output are computed in registers (fp32; ``tl.dot`` with IEEE products for fp32 inputs unless
  torch allows TF32, TF32 for half inputs), so nothing [T, r] reaches memory; the output is stored in q's dtype.
  On a GPU its block (32, 64 or 128 queries) and warps are autotuned (``T`` not specialised).
- ``_bwd``: one program per run of ``blocks`` query blocks of one head recomputes the same and writes dq, the
  per-query gradient of h (dh [T, r], fp32) and its partial gradient of the bases (summed over its queries: no
  atomics, so the result is deterministic). It works slots-first ([r, queries] tiles: h^T = B m^T, p^T, ...), so
  that each product takes loaded tiles or a result as it stands, never a result transposed (docs/lavo.md, "No
  product's result is transposed"). Torch then sums dh per memory row (an index_add over T / group rows)
  and forms dmem = dh_rows B.

- ``_decode`` (:func:`decode_step_triton`): a whole causal decoding step of the layer in one program per (b, h),
  no autograd: the window over the stored keys and the step's (with the EPE), the read of the complete windows'
  mean (rms, temperature), the joined output, and the new state (the last keys and values, the sums, a completed
  window's partial sum folded in), where the torch ops take about 20 launches per token.

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
from triton.runtime.errors import OutOfResources

from lavo_zoo.attention.common import heads_major_empty
from lavo_zoo.attention.lavo.read import RMS_EPS as MEMORY_RMS_EPS
from lavo_zoo.attention.ops.triton_utils import (
    NEG,
    KernelUnavailable,
    autotuned,
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
# queries per block of the backward, the largest first: the next is tried where a block needs more shared memory
# than the device has (fp32 with d = 128 needs 248 KiB at 64 rows; an H100 or H200 has 227 KiB per block)
BACKWARD_BLOCKS = (BLOCK_M, BLOCK_M // 2, 16)
RMS_EPS = tl.constexpr(MEMORY_RMS_EPS)  # the rms of the memory rows normalised in the kernels (a constexpr global)


@triton.jit
def _operands(Q, MEM, BASES, b, h, t, dd, rr, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, T, D, R, n_rows, offset,
              group, qscale, RMS: tl.constexpr):
    """Queries t [BM] of head (b, h), times ``qscale`` (the read temperature's factor): q [BM, BD], their memory
    rows m [BM, BD] (RMS: m / rms(m), eps 1e-6, as ``ops.read``'s 'rms') and the bases [BR, BD] (fp32; zero outside
    t < T, rr < R, dd < D)."""
    tq, dm = t < T, dd < D
    q = tl.load(Q + b * sqb + h * sqh + t[:, None] * sqt + dd[None, :], mask=tq[:, None] & dm[None, :],
                other=0.0).to(tl.float32) * qscale
    row = tl.where(n_rows == 1, 0, (offset + t) // group)                               # [BM] memory row read
    m = tl.load(MEM + b * smb + h * smh + row[:, None] * smt + dd[None, :],
                mask=(tq & (row < n_rows))[:, None] & dm[None, :], other=0.0).to(tl.float32)
    if RMS:
        m = m * (1.0 / tl.sqrt(tl.sum(m * m, 1) / D + RMS_EPS))[:, None]
    basis = tl.load(BASES + h * sbh + rr[:, None] * sbr + dd[None, :], mask=(rr < R)[:, None] & dm[None, :],
                    other=0.0).to(tl.float32)                                           # [BR, BD]
    return q, m, basis


@triton.jit
def _probs(q, m, basis, rr, R, scale, PREC: tl.constexpr):
    """h = B m and B q [BM, BR] of the operands, and the probabilities p [BM, BR] over the slots (fp32)."""
    hm = tl.dot(m, tl.trans(basis), input_precision=PREC)                              # [BM, BR]  h = B m
    qb = tl.dot(q, tl.trans(basis), input_precision=PREC)                              # [BM, BR]  B q
    s = tl.where((rr < R)[None, :], scale * hm * qb, NEG)
    e = tl.exp(s - tl.max(s, 1)[:, None])
    return hm, qb, e / tl.sum(e, 1)[:, None]


@triton.jit
def _probs_t(q, m, basis, rr, R, scale, PREC: tl.constexpr):
    """:func:`_probs` slots-first, for backward: h^T = B m^T and (B q)^T [BR, BM] and p^T [BR, BM] (the products
    of loaded tiles, so that backward transposes no product's result: ``_bwd``)."""
    hm = tl.dot(basis, tl.trans(m), input_precision=PREC)                              # [BR, BM]
    qb = tl.dot(basis, tl.trans(q), input_precision=PREC)                              # [BR, BM]
    s = tl.where((rr < R)[:, None], scale * hm * qb, NEG)
    e = tl.exp(s - tl.max(s, 0)[None, :])
    return hm, qb, e / tl.sum(e, 0)[None, :]


@triton.jit
def _drop(seed, p_drop, bh, tt, rs, T, R):
    """Dropout factors of queries tt and slots rs, broadcast against each other (t[:, None] and rr[None, :], or
    slots-first): element (bh, t, slot) of the call's [B H, T, r] mask."""
    return dropout_factor(seed, (bh * T + tt) * R + rs, p_drop)


@triton.jit
def _real(KMASK, b, t, T, smk, HAS_PAD: tl.constexpr):
    """Whether queries t [N] are real tokens (HAS_PAD: the padding mask KMASK [B, T] int8; else t < T)."""
    ok = t < T
    if HAS_PAD:
        ok = ok & (tl.load(KMASK + b * smk + t, mask=ok, other=0) != 0)
    return ok


@triton.jit
def _head_factors(TEMP, GAIN, h, gain, HAS_TEMP: tl.constexpr, GAIN_PER_HEAD: tl.constexpr):
    """Head h's factor on q, exp(t_h) (1 without a temperature), and its gain on the read (``gain`` when shared)."""
    qscale = 1.0
    if HAS_TEMP:
        qscale = tl.exp(tl.load(TEMP + h).to(tl.float32))
    g = gain
    if GAIN_PER_HEAD:
        g = tl.load(GAIN + h).to(tl.float32)
    return qscale, g


@autotuned(blocks=(64, 32, 128), warps=(4, 8), key=["D", "R", "DROPOUT", "HAS_TEMP", "HAS_LOCAL", "RMS"])
@triton.jit(do_not_specialize=["T", "n_rows", "offset", "group", "seed"])
def _fwd(Q, MEM, BASES, TEMP, LOCAL, GAIN, O, KMASK, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, slb, slh, slt, sob, soh,
         sot, smk, H, T, D, R, n_rows, offset, group, scale, gain, ls, seed, p_drop, HAS_TEMP: tl.constexpr,
         HAS_LOCAL: tl.constexpr, GAIN_PER_HEAD: tl.constexpr, DROPOUT: tl.constexpr, RMS: tl.constexpr,
         HAS_PAD: tl.constexpr, BD: tl.constexpr, BR: tl.constexpr, PREC: tl.constexpr, BM: tl.constexpr):
    """Program (b h, block of BM queries): o = B^T (p Z h) of the queries times exp(t_h); with LOCAL, ls local + g o
    (the branches joined here, in fp32); stored in O's dtype (HAS_PAD: zero at padded queries)."""
    nb = tl.cdiv(T, BM)
    prog = tl.program_id(0).to(tl.int64)                  # one axis: (b h, query block); 64-bit offsets throughout
    bh, pid = prog // nb, prog % nb
    b, h = bh // H, bh % H
    t = pid * BM + tl.arange(0, BM)
    dd, rr = tl.arange(0, BD), tl.arange(0, BR)
    keep = (t < T)[:, None] & (dd < D)[None, :]
    qscale, g = _head_factors(TEMP, GAIN, h, gain, HAS_TEMP, GAIN_PER_HEAD)
    q, m, basis = _operands(Q, MEM, BASES, b, h, t, dd, rr, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, T, D, R,
                            n_rows, offset, group, qscale, RMS)
    hm, _, p = _probs(q, m, basis, rr, R, scale, PREC)
    if DROPOUT:
        p = p * _drop(seed, p_drop, bh, t[:, None], rr[None, :], T, R)
    o = tl.dot(p * hm, basis, input_precision=PREC)                                    # [BM, BD]  B^T (p Z h)
    if HAS_LOCAL:
        local = tl.load(LOCAL + b * slb + h * slh + t[:, None] * slt + dd[None, :], mask=keep, other=0.0)
        o = ls * local.to(tl.float32) + g * o
    if HAS_PAD:
        o = tl.where(_real(KMASK, b, t, T, smk, HAS_PAD)[:, None], o, 0.0)
    tl.store(O + b * sob + h * soh + t[:, None] * sot + dd[None, :], o.to(O.dtype.element_ty), mask=keep)


@triton.jit(do_not_specialize=["T", "n_rows", "offset", "group", "NP", "seed"])
def _bwd(Q, MEM, BASES, TEMP, GAIN, G, DQ, DH, PART, PART_HEAD, KMASK, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, sgb,
         sgh, sgt, sdb, sdh, sdt, smk, H, T, D, R, n_rows, offset, group, NP, scale, gain, seed, p_drop,
         blocks: tl.constexpr, HAS_TEMP: tl.constexpr, HAS_LOCAL: tl.constexpr, GAIN_PER_HEAD: tl.constexpr,
         DROPOUT: tl.constexpr, RMS: tl.constexpr, HAS_PAD: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr,
         BR: tl.constexpr, PREC: tl.constexpr):
    """G: the gradient of the output (of ls local + g o with LOCAL; zero at padded queries with HAS_PAD); RMS: the
    memory rows are read normalised, and the gradients below are those of the normalised rows. dq [B, H, T, d];
    DH [B H, T, BR] = dL/dh per query; PART [B H, NP, BR, BD] = this program's part of dL/dB from o = B^T (p Z h)
    and s = scale h (B q), plus dh^T m (h = B m); PART_HEAD [2, B H, NP] its part of dL/dt_h (sum of dq' . q' over
    the scaled queries q') and of dL/dg_h (sum of dO . o)."""
    prog = tl.program_id(0).to(tl.int64)                  # one axis: (b h, run of blocks); 64-bit offsets throughout
    bh, pid = prog // NP, prog % NP
    b, h = bh // H, bh % H
    dd, rr = tl.arange(0, BD), tl.arange(0, BR)
    dm = dd < D
    qscale, g = _head_factors(TEMP, GAIN, h, gain, HAS_TEMP, GAIN_PER_HEAD)
    dbases = tl.zeros([BR, BD], tl.float32)
    dtemp = tl.zeros([BM], tl.float32)
    dgain = tl.zeros([BM], tl.float32)
    for i in range(blocks):
        t = (pid * blocks + i) * BM + tl.arange(0, BM)
        tq = t < T
        q, m, basis = _operands(Q, MEM, BASES, b, h, t, dd, rr, sqb, sqh, sqt, smb, smh, smt, sbh, sbr, T, D, R,
                                n_rows, offset, group, qscale, RMS)
        hm, qb, p = _probs_t(q, m, basis, rr, R, scale, PREC)                          # [BR, BM] each
        real = _real(KMASK, b, t, T, smk, HAS_PAD)
        go = tl.load(G + b * sgb + h * sgh + t[:, None] * sgt + dd[None, :], mask=real[:, None] & dm[None, :],
                     other=0.0).to(tl.float32)                                          # [BM, BD]
        kept = p
        if DROPOUT:
            z = _drop(seed, p_drop, bh, t[None, :], rr[:, None], T, R)
            kept = p * z
        du = tl.dot(basis, tl.trans(go), input_precision=PREC)                          # [BR, BM]  B dO^T
        if HAS_LOCAL:                                                                   # out = local + g o
            if GAIN_PER_HEAD:
                dgain += tl.sum(kept * hm * du, 0)                                      # dO . o per query
            go = go * g                                                                 # dL/do
            du = du * g
        dp = du * hm                                                                    # d(p Z) h
        if DROPOUT:
            dp = dp * z
        ds = p * (dp - tl.sum(p * dp, 0)[None, :]) * scale                              # d(h * Bq)
        if HAS_TEMP:
            dtemp += tl.sum(ds * hm * qb, 0)                                            # dq' . q' per query
        dq = tl.dot(tl.trans(basis), ds * hm, input_precision=PREC)                     # [BD, BM] w.r.t. q'
        tl.store(DQ + b * sdb + h * sdh + t[None, :] * sdt + dd[:, None], (dq * qscale).to(DQ.dtype.element_ty),
                 mask=dm[:, None] & tq[None, :])
        dh = du * kept + ds * qb                                                        # [BR, BM]
        tl.store(DH + bh * T * BR + t[None, :] * BR + rr[:, None], dh, mask=tq[None, :])
        dbases += tl.dot(kept * hm, go, input_precision=PREC)
        dbases += tl.dot(ds * hm, q, input_precision=PREC)
        dbases += tl.dot(dh, m, input_precision=PREC)
    tl.store(PART + (prog * BR + rr[:, None]) * BD + dd[None, :], dbases)
    tl.store(PART_HEAD + prog, tl.sum(dtemp, 0))
    tl.store(PART_HEAD + tl.num_programs(0) + prog, tl.sum(dgain, 0))


def _read_config(q: torch.Tensor, bases: torch.Tensor) -> dict:
    return {"BD": block_dim(q.shape[-1]), "BR": block_dim(bases.shape[1]), "PREC": precision(q.dtype)}


def _pointer(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """t, or any tensor where the kernel takes no such input (its flag is off)."""
    return t if t is not None else like


def read_forward(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, out: torch.Tensor, *,
                 log_temperature: torch.Tensor | None = None, local: torch.Tensor | None = None,
                 gain: torch.Tensor | None = None, shared_gain: float = 1.0, local_scale: float = 1.0,
                 offset: int = 0, group: int = 1, block_m: int | None = None, dropout: float = 0.0, seed: int = 0,
                 rms: bool = False, pad: torch.Tensor | None = None,
                 out_strides: tuple[int, int, int] | None = None) -> torch.Tensor:
    """The forward kernel: q [B, H, T, d] reads mem [B, H, n, d] (query t: row (offset + t) // group; n == 1: the
    one row; ``rms``: each row normalised in the kernel) through bases [H, r, d], q scaled by exp(log_temperature);
    with ``local``, ``local_scale`` local + g read, g the per-head ``gain`` [H] or ``shared_gain``; written into
    ``out`` [B, H, T, d] (any strides with a unit column stride; or any tensor and its [B, H, T, d] (batch, head,
    time) ``out_strides``), zero at the padded queries of ``pad`` [B, T] int8. Every tensor with a unit column
    stride.

    Args:
        q: [B, H, T, d] queries.
        mem: [B, H, n, d] the memory rows.
        bases: [H, r, d].
        out: where the output is written (above).
        log_temperature: [H], or None.
        local: [B, H, T, d] the local branch, or None (the read alone).
        gain: [H] the per-head gain, or None (``shared_gain``).
        shared_gain: g where no per-head gain is given.
        local_scale: the local branch's factor (0.5 for combine 'half').
        offset: the position of query 0 within its group.
        group: queries per memory row.
        block_m: queries per program, or None (autotuned).
        dropout: the slot probabilities' dropout p (0: none).
        seed: the call's dropout seed.
        rms: normalise each row by its rms in the kernel.
        pad: [B, T] int8 padding (1 real), or None.
        out_strides: ``out``'s (batch, head, time) strides where it is not [B, H, T, d], or None.
    """
    B, H, T, d = q.shape
    launch("read_fwd", _fwd, lambda meta: grid(triton.cdiv(T, meta["BM"]) * B * H, "the memory read's forward"),
           q, mem, bases, _pointer(log_temperature, q), _pointer(local, q), _pointer(gain, q), out,
           _pointer(pad, q), *strides(q), *strides(mem), *strides(bases), *strides(_pointer(local, q)),
           *(out_strides or strides(out)), pad.stride(0) if pad is not None else 0, H, T, d, bases.shape[1],
           mem.shape[2], offset, group, d ** -0.5, float(shared_gain), float(local_scale), seed, dropout,
           HAS_TEMP=log_temperature is not None, HAS_LOCAL=local is not None, GAIN_PER_HEAD=gain is not None,
           DROPOUT=dropout > 0, RMS=rms, HAS_PAD=pad is not None, config={"BM": block_m} if block_m else None,
           **_read_config(q, bases))
    return out


def read_backward(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, grad: torch.Tensor, dq: torch.Tensor,
                  *, log_temperature: torch.Tensor | None = None, gain: torch.Tensor | None = None,
                  shared_gain: float = 1.0, has_local: bool = False, offset: int = 0, group: int = 1,
                  block_m: int | None = None, dropout: float = 0.0, seed: int = 0, rms: bool = False,
                  pad: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward kernel of :func:`read_forward`'s call, in the largest block of :data:`BACKWARD_BLOCKS` that fits
    the device (``block_m`` alone where the caller fixed one): writes dq into ``dq`` (any strides, unit column
    stride) and returns dh [B, H, T, BR] fp32 (dL/dh per query, h = B m of the row it read, normalised with
    ``rms``), the per-program partial sums of the bases' gradient [B H, NP, BR, BD] and of the temperature's and the
    gain's [2, B H, NP] (no atomics: the sums are deterministic).

    Args:
        q: the forward's queries.
        mem: the forward's memory rows.
        bases: the forward's bases.
        grad: the output's gradient [B, H, T, d].
        dq: where dq is written.
        log_temperature: the forward's, or None.
        gain: the forward's per-head gain, or None.
        shared_gain: the forward's.
        has_local: the forward joined a local branch (its gradient is the output's: nothing to compute here).
        offset: the forward's.
        group: the forward's.
        block_m: queries per program, or None (the largest that fits).
        dropout: the forward's dropout p (the same ``seed`` redraws its mask).
        seed: the forward's dropout seed.
        rms: the forward's.
        pad: the forward's padding, or None.
    """
    sizes = (block_m,) if block_m else BACKWARD_BLOCKS
    for size in sizes[:-1]:
        try:
            return _read_backward_in(q, mem, bases, grad, dq, size, True, log_temperature, gain, shared_gain,
                                     has_local, offset, group, dropout, seed, rms, pad)
        except OutOfResources:  # the next, smaller block
            continue
    return _read_backward_in(q, mem, bases, grad, dq, sizes[-1], False, log_temperature, gain, shared_gain,
                             has_local, offset, group, dropout, seed, rms, pad)


def _read_backward_in(q, mem, bases, grad, dq, block_m, smaller_fits, log_temperature, gain, shared_gain, has_local,
                      offset, group, dropout, seed, rms, pad):
    B, H, T, d = q.shape
    cfg = {**_read_config(q, bases), "BM": block_m}
    nblocks = triton.cdiv(T, block_m)
    blocks = min(BLOCKS, nblocks)
    programs = triton.cdiv(nblocks, blocks)
    dh = torch.empty(B, H, T, cfg["BR"], dtype=torch.float32, device=q.device)
    part = torch.empty(B * H, programs, cfg["BR"], cfg["BD"], dtype=torch.float32, device=q.device)
    part_head = torch.empty(2, B * H, programs, dtype=torch.float32, device=q.device)
    launch("read_bwd", _bwd, grid(programs * B * H, "the memory read's backward"),
           q, mem, bases, _pointer(log_temperature, q), _pointer(gain, q), grad, dq, dh, part, part_head,
           _pointer(pad, q), *strides(q), *strides(mem), *strides(bases), *strides(grad), *strides(dq),
           pad.stride(0) if pad is not None else 0, H, T, d, bases.shape[1], mem.shape[2], offset, group, programs,
           d ** -0.5, float(shared_gain), seed, dropout, blocks, HAS_TEMP=log_temperature is not None,
           HAS_LOCAL=has_local, GAIN_PER_HEAD=gain is not None, DROPOUT=dropout > 0, RMS=rms, HAS_PAD=pad is not None,
           num_warps=8, smaller_fits=smaller_fits, **cfg)
    return dh, part, part_head


def head_sums(part: torch.Tensor, part_head: torch.Tensor, B: int, H: int, r: int, d: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The bases' gradient [H, r, d] and the per-head [2, H] gradients of the temperature (row 0) and the gain (row 1)
    from :func:`read_backward`'s per-program partial sums (fp32).

    Args:
        part: the bases' partial sums [B H, NP, BR, BD].
        part_head: the temperature's and the gain's partial sums [2, B H, NP].
        B: the batch size.
        H: the heads.
        r: the bases per head (BR may pad it).
        d: the head dim (BD may pad it).
    """
    dbases = part.view(B, H, -1, *part.shape[2:]).sum((0, 2))
    if dbases.shape[1:] != (r, d):
        dbases = dbases[:, :r, :d].contiguous()
    return dbases, part_head.view(2, B, H, -1).sum((1, 3))


def _read_grads(grad, q, mem, bases, log_temperature, gain, offset, group, block_m, dropout, seed, has_local,
                shared_gain, needs_mem):
    """The read's gradients (dq, dmem, dbases, dtemperature, dgain) by the backward kernel, or where it cannot be
    compiled here (warned once) by autograd on the inputs (:func:`_fallback_grads`)."""
    B, H, T, d = q.shape
    n, r = mem.shape[2], bases.shape[1]
    try:
        dq = torch.empty(B, H, T, d, dtype=q.dtype, device=q.device)
        dh, part, part_head = read_backward(q, mem, bases, rowmajor(grad), dq, log_temperature=log_temperature,
                                            gain=gain, shared_gain=shared_gain, has_local=has_local, offset=offset,
                                            group=group, block_m=block_m, dropout=dropout, seed=seed)
    except KernelUnavailable:
        return _fallback_grads(grad, q, mem, bases, log_temperature, gain, offset, group, dropout, seed, has_local,
                               shared_gain)
    dh = dh[..., :r]                                                                 # [B, H, T, r]
    dmem = None
    if needs_mem:
        if n == 1:
            dh_rows = dh.sum(2, keepdim=True)                                        # [B, H, 1, r]
        else:
            rows = (torch.arange(T, device=q.device) + offset) // group
            dh_rows = torch.zeros(B, H, n, r, dtype=torch.float32, device=q.device).index_add_(2, rows, dh)
        dmem = (dh_rows @ bases.float()).to(mem.dtype)                               # [B, H, n, d]
    dbases, per_head = head_sums(part, part_head, B, H, r, d)
    dtemp = per_head[0].to(log_temperature.dtype) if log_temperature is not None else None
    dgain = per_head[1].to(gain.dtype) if gain is not None else None
    return dq, dmem, dbases.to(bases.dtype), dtemp, dgain


def _fallback_grads(grad, q, mem, bases, log_temperature, gain, offset, group, dropout, seed, has_local,
                    shared_gain):
    """The gradients by autograd on the saved inputs: the autograd read under this call's dropout mask
    (:func:`~lavo_zoo.attention.ops.triton_utils.dropout_mask`), the temperature and gain as torch ops."""
    from lavo_zoo.attention.lavo.read import read_memory_autograd

    keep = dropout_mask(seed, (*q.shape[:3], bases.shape[1]), dropout, q.device) if dropout else None
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() if t is not None else None
                  for t in (q, mem, bases, log_temperature, gain)]
        q_, mem_, bases_, temp_, gain_ = leaves
        scaled = q_ * temp_.exp().to(q_.dtype)[:, None, None] if temp_ is not None else q_
        out = read_memory_autograd(scaled, mem_, bases_, offset, group, keep=keep)
        if has_local:
            out = out * (gain_.float()[:, None, None] if gain_ is not None else shared_gain)
        used = [t for t in leaves if t is not None]
        grads = iter(torch.autograd.grad(out, used, grad.to(out.dtype), allow_unused=True, materialize_grads=True))
    dq, dmem, dbases, dtemp, dgain = (next(grads).to(t.dtype) if t is not None else None
                                      for t in (q, mem, bases, log_temperature, gain))
    return dq, dmem, dbases, dtemp, dgain


def _read_inputs(q, mem, bases, log_temperature, local, gain):
    """The read's inputs as the kernels take them (unit column strides, contiguous per-head vectors)."""
    return (rowmajor(q), rowmajor(mem), rowmajor(bases),
            log_temperature.contiguous() if log_temperature is not None else None,
            rowmajor(local) if local is not None else None, gain.contiguous() if gain is not None else None)


class MemoryReadTritonFunction(torch.autograd.Function):
    """forward(q [B, H, T, d], mem [B, H, n, d], bases [H, r, d], log_temperature [H] | None, local [B, H, T, d] |
    None, gain [H] | None, offset, group, block_m, dropout, seed, shared_gain) -> [B, H, T, d] in q's dtype (laid
    out [B, T, H, d]): the read of q exp(t_h) (``log_temperature``), plus, with ``local``, the local branch:
    local + g o, g the per-head ``gain`` or else ``shared_gain``. Saves q, mem, the bases and the temperature and
    gain only (backward recomputes, like the recompute kernel, the dropout mask of ``seed`` included); the local
    branch's gradient is the output's. ``block_m``: queries per program, or None (the forward autotuned on a GPU,
    :data:`BLOCK_M` in backward). The eager form of the custom operator ``lavo_zoo::triton_read`` (what
    torch.compile traces), with the same kernels and gradients."""

    @staticmethod
    def forward(ctx, q, mem, bases, log_temperature, local, gain, offset, group, block_m=None, dropout=0.0, seed=0,
                shared_gain=1.0):
        """The forward kernel; its arguments are stated on `read_forward`."""
        q, mem, bases, log_temperature, loc, gain = _read_inputs(q, mem, bases, log_temperature, local, gain)
        B, H, T, d = q.shape
        out = read_forward(q, mem, bases, heads_major_empty(B, H, T, d, q, q.dtype), log_temperature=log_temperature,
                           local=loc, gain=gain, shared_gain=shared_gain, offset=offset, group=group,
                           block_m=block_m, dropout=dropout, seed=seed)
        ctx.save_for_backward(q, mem, bases, log_temperature, gain)
        ctx.config = (offset, group, block_m, dropout, seed, local is not None, float(shared_gain))
        ctx.local_dtype = local.dtype if local is not None else None
        return out

    @staticmethod
    def backward(ctx, grad):
        q, mem, bases, log_temperature, gain = ctx.saved_tensors
        offset, group, block_m, dropout, seed, has_local, shared_gain = ctx.config
        dq, dmem, dbases, dtemp, dgain = _read_grads(grad, q, mem, bases, log_temperature, gain, offset, group,
                                                     block_m, dropout, seed, has_local, shared_gain, True)
        dlocal = grad.to(ctx.local_dtype) if has_local else None
        return dq, dmem, dbases, dtemp, dlocal, dgain, None, None, None, None, None, None


# ------------------------------------------------------------------------------- the custom operators (torch.compile)
# torch.compile traces these (their fake forms give the shapes; no GPU needed); eager calls MemoryReadTritonFunction
# (a custom operator's Python dispatch costs more per call): the same kernels and gradients.
Tensor = torch.Tensor


@torch.library.custom_op("lavo_zoo::triton_read", mutates_args=())
def _read_op(q: Tensor, mem: Tensor, bases: Tensor, log_temperature: Tensor | None, local: Tensor | None,
             gain: Tensor | None, offset: int, group: int, block_m: int, dropout: float, seed: int,
             shared_gain: float) -> Tensor:
    q, mem, bases, log_temperature, local, gain = _read_inputs(q, mem, bases, log_temperature, local, gain)
    B, H, T, d = q.shape
    return read_forward(q, mem, bases, heads_major_empty(B, H, T, d, q, q.dtype), log_temperature=log_temperature,
                        local=local, gain=gain, shared_gain=shared_gain, offset=offset, group=group,
                        block_m=block_m or None, dropout=dropout, seed=seed)


@_read_op.register_fake
def _(q, mem, bases, log_temperature, local, gain, offset, group, block_m, dropout, seed, shared_gain):
    B, H, T, d = q.shape
    return heads_major_empty(B, H, T, d, q, q.dtype)


@torch.library.custom_op("lavo_zoo::triton_read_backward", mutates_args=())
def _read_backward_op(grad: Tensor, q: Tensor, mem: Tensor, bases: Tensor, log_temperature: Tensor | None,
                      gain: Tensor | None, offset: int, group: int, block_m: int, dropout: float, seed: int,
                      has_local: bool, shared_gain: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dmem, dbases, dtemperature, dgain: empty where the input is absent)."""
    q, mem, bases, log_temperature, _, gain = _read_inputs(q, mem, bases, log_temperature, None, gain)
    grads = _read_grads(grad, q, mem, bases, log_temperature, gain, offset, group, block_m or None, dropout, seed,
                        has_local, shared_gain, True)
    return tuple(t if t is not None else q.new_empty(0) for t in grads)


@_read_backward_op.register_fake
def _(grad, q, mem, bases, log_temperature, gain, offset, group, block_m, dropout, seed, has_local, shared_gain):
    # the shapes and strides of the real gradients: new (contiguous) tensors
    return (q.new_empty(q.shape), mem.new_empty(mem.shape), bases.new_empty(bases.shape),
            *(t.new_empty(t.shape) if t is not None else q.new_empty(0) for t in (log_temperature, gain)))


def _read_setup(ctx, inputs, output):
    q, mem, bases, log_temperature, local, gain, offset, group, block_m, dropout, seed, shared_gain = inputs
    ctx.save_for_backward(q, mem, bases, log_temperature, gain)
    ctx.config = (offset, group, block_m, dropout, seed, local is not None, shared_gain)
    ctx.local_dtype = local.dtype if local is not None else None


def _read_op_backward(ctx, grad):
    q, mem, bases, log_temperature, gain = ctx.saved_tensors
    offset, group, block_m, dropout, seed, has_local, shared_gain = ctx.config
    dq, dmem, dbases, dtemp, dgain = torch.ops.lavo_zoo.triton_read_backward(
        grad, q, mem, bases, log_temperature, gain, offset, group, block_m, dropout, seed, has_local, shared_gain)
    return (dq, dmem, dbases, dtemp if log_temperature is not None else None,
            grad.to(ctx.local_dtype) if has_local else None, dgain if gain is not None else None,
            None, None, None, None, None, None)


_read_op.register_autograd(_read_op_backward, setup_context=_read_setup)


def read_memory_triton(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, offset: int = 0, group: int = 1,
                       block_m: int | None = None, dropout: float = 0.0, seed: int = 0,
                       log_temperature: torch.Tensor | None = None, local: torch.Tensor | None = None,
                       gain: float | torch.Tensor = 1.0) -> torch.Tensor:
    """q [B, H, T, d] reads mem [B, H, n, d] (query t: row (offset + t) // group; n == 1: the one row) through bases
    [H, r, d]; [B, H, T, d] in q's dtype (h, the softmax and the products in fp32). Under torch.compile it is the
    custom operator ``lavo_zoo::triton_read`` (no graph break).

    Args:
        q: [B, H, T, d] queries.
        mem: [B, H, n, d] the memory's mean features.
        bases: [H, r, d] orthonormal rows per head.
        offset: the position of query 0 within its memory group (context dissection: the position in the window).
        group: queries per memory row (context dissection: the window w; 1: one row per query).
        block_m: queries per program, a power of two >= 16 (tests use 16), or None (autotuned forward on a GPU).
        dropout: p > 0 drops slot probabilities with the mask of ``seed``
            (:func:`lavo_zoo.attention.ops.triton_utils.dropout_mask` of shape [B, H, T, r]).
        seed: the seed of the dropout mask.
        log_temperature: [H] or None: the read of q exp(t_h), the factor applied inside the kernels.
        local: [B, H, T, d] or None: return local + gain * read, joined inside the kernel (LAVO's 'sum' and 'gain').
        gain: the read's factor with ``local``: a number, or a per-head [H] tensor (learned).

    Raises :class:`~lavo_zoo.attention.ops.KernelUnavailable` where the forward kernel cannot be
    compiled on this device."""
    per_head = gain if isinstance(gain, torch.Tensor) else None
    shared = 1.0 if per_head is not None else float(gain)
    if torch.compiler.is_compiling():
        return torch.ops.lavo_zoo.triton_read(q, mem, bases, log_temperature, local, per_head, offset, group,
                                              block_m or 0, dropout, seed, shared)
    return MemoryReadTritonFunction.apply(q, mem, bases, log_temperature, local, per_head, offset, group, block_m,
                                          dropout, seed, shared)


# ------------------------------------------------------------------------------------------------- one decoding step
@triton.jit(do_not_specialize=["L", "count"])
def _decode(Q, K, V, FEAT, KEYS, VALUES, EPE, SUMC, SUMP, BASES, TEMP, GAIN, O, NKEYS, NVALUES, NSUMC, NSUMP,
            sqb, sqh, skb, skh, svb, svh, sfb, sfh, spb, sph, spt, svsb, svsh, svst, snb, snh, snt, sbh, sbr,
            H, D, R, L, count, scale, gain, W: tl.constexpr, SHIFT: tl.constexpr, COMPLETES: tl.constexpr,
            HAS_BIAS: tl.constexpr, FEAT_IS_LOCAL: tl.constexpr, HAS_TEMP: tl.constexpr, RMS: tl.constexpr,
            HALF: tl.constexpr, EMPTY_HALF: tl.constexpr, GAIN_PER_HEAD: tl.constexpr, BD: tl.constexpr,
            BW: tl.constexpr, BR: tl.constexpr):
    """One program per (b, h): query q after the L stored keys / values (KEYS, VALUES [B, H, L, d]) and the memory
    sums; writes the output (fp32), the new last keys and values (the last L + 1 - SHIFT of the L stored and the
    step's) and the new sums (the partial one folded into the complete one when the step ends a window)."""
    bh = tl.program_id(0).to(tl.int64)
    b, h = bh // H, bh % H
    dd, jj, rr = tl.arange(0, BD), tl.arange(0, BW), tl.arange(0, BR)
    dm = dd < D
    q = tl.load(Q + b * sqb + h * sqh + dd, mask=dm, other=0.0).to(tl.float32)                       # [BD]
    k = tl.load(K + b * skb + h * skh + dd, mask=dm, other=0.0)
    v = tl.load(V + b * svb + h * svh + dd, mask=dm, other=0.0)
    # the window: the L stored keys, then the step's own at index L; key j sits j - L before the query
    stored = (jj < L)[:, None] & dm[None, :]
    keys = tl.load(KEYS + b * spb + h * sph + jj[:, None] * spt + dd[None, :], mask=stored, other=0.0)
    values = tl.load(VALUES + b * svsb + h * svsh + jj[:, None] * svst + dd[None, :], mask=stored, other=0.0)
    keys = tl.where((jj == L)[:, None], k[None, :], keys)                                              # [BW, BD]
    values = tl.where((jj == L)[:, None], v[None, :], values)
    s = tl.sum(q[None, :] * keys.to(tl.float32), 1) * scale                                           # [BW]
    if HAS_BIAS:
        s += tl.load(EPE + h * (2 * W - 1) + W - 1 - L + jj, mask=jj <= L, other=0.0).to(tl.float32)
    s = tl.where(jj <= L, s, NEG)
    p = tl.exp(s - tl.max(s, 0))
    local = tl.sum((p / tl.sum(p, 0))[:, None] * values.to(tl.float32), 0)                           # [BD]
    # the new last keys and values: rows SHIFT..L of [stored, step]
    nrow = jj + SHIFT
    keep = (nrow <= L)[:, None] & dm[None, :]
    nk = tl.load(KEYS + b * spb + h * sph + nrow[:, None] * spt + dd[None, :], mask=keep & (nrow < L)[:, None],
                 other=0.0)
    nv = tl.load(VALUES + b * svsb + h * svsh + nrow[:, None] * svst + dd[None, :], mask=keep & (nrow < L)[:, None],
                 other=0.0)
    nk = tl.where((nrow == L)[:, None], k[None, :], nk)
    nv = tl.where((nrow == L)[:, None], v[None, :], nv)
    tl.store(NKEYS + b * snb + h * snh + jj[:, None] * snt + dd[None, :], nk, mask=keep)
    tl.store(NVALUES + b * snb + h * snh + jj[:, None] * snt + dd[None, :], nv, mask=keep)
    # the memory: the mean of the complete windows' features (count tokens), read through the bases
    complete = tl.load(SUMC + bh * D + dd, mask=dm, other=0.0)
    m = complete / tl.maximum(count, 1).to(tl.float32)
    if RMS:
        m = m * (1.0 / tl.sqrt(tl.sum(m * m, 0) / D + RMS_EPS))
    qscale, g = _head_factors(TEMP, GAIN, h, gain, HAS_TEMP, GAIN_PER_HEAD)
    basis = tl.load(BASES + h * sbh + rr[:, None] * sbr + dd[None, :], mask=(rr < R)[:, None] & dm[None, :],
                    other=0.0).to(tl.float32)                                                          # [BR, BD]
    hm = tl.sum(basis * m[None, :], 1)                                                                 # [BR] h = B m
    s2 = tl.where(rr < R, scale * hm * tl.sum(basis * (q * qscale)[None, :], 1), NEG)
    p2 = tl.exp(s2 - tl.max(s2, 0))
    glob = tl.sum(((p2 / tl.sum(p2, 0)) * hm)[:, None] * basis, 0)                                    # [BD]
    if HALF:
        if count == 0:
            out = local * (0.5 if EMPTY_HALF else 1.0)
        else:
            out = 0.5 * (local + glob)
    else:
        out = local + g * glob                                                                         # 0 when empty
    tl.store(O + bh * D + dd, out, mask=dm)
    if FEAT_IS_LOCAL:
        feat = local
    else:
        feat = tl.load(FEAT + b * sfb + h * sfh + dd, mask=dm, other=0.0).to(tl.float32)
    partial = tl.load(SUMP + bh * D + dd, mask=dm, other=0.0) + feat
    if COMPLETES:
        complete, partial = complete + partial, partial * 0.0
    tl.store(NSUMC + bh * D + dd, complete, mask=dm)
    tl.store(NSUMP + bh * D + dd, partial, mask=dm)


def decode_step_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       sum_complete: torch.Tensor, sum_partial: torch.Tensor, position: int, bases: torch.Tensor,
                       window: int, *, bias: torch.Tensor | None = None, feat: torch.Tensor | None = None,
                       log_temperature: torch.Tensor | None = None, memory_norm: str = "mean",
                       combine: str = "sum", gain: float | torch.Tensor = 1.0, empty_memory: str = "local"
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One causal LAVO token (context dissection, no padding) in one kernel: the local window over the stored keys
    and the step's, the read of the complete windows' mean, the joined output and the new state. Inference only (no
    autograd graph).

    Args:
        q: [B, H, 1, d] the step's query.
        k: [B, H, 1, d] the step's key.
        v: [B, H, 1, d] the step's value.
        keys: [B, H, L, d], L = min(w - 1, position): the last keys before the step.
        values: [B, H, L, d]: the last values before the step.
        sum_complete: [B, H, d] fp32, the memory's sum over the complete windows before the step.
        sum_partial: [B, H, d] fp32, the sum over the current window's tokens before the step.
        position: tokens before the step.
        bases: [H, r, d].
        window: w.
        bias: the EPE [H, 2w - 1] or None.
        feat: [B, H, 1, d] the step's memory feature, or None for the local output (``memory_source='local_out'``).
        log_temperature: the reading's, as :func:`..ops.memory_step`.
        memory_norm: the reading's, as :func:`..ops.memory_step`.
        combine: the reading's, as :func:`..ops.memory_step`.
        gain: the reading's, as :func:`..ops.memory_step`.
        empty_memory: the reading's, as :func:`..ops.memory_step`.

    Returns:
        out [B, H, 1, d] fp32; the new keys and values [B, H, min(w - 1, L + 1), d]; the new sum_complete and
        sum_partial [B, H, d] fp32 (a window's partial sum folded into the complete one when the step ends it).
        Under torch.compile it is the custom operator ``lavo_zoo::triton_decode_step`` (no graph break).
    """
    per_head = gain if isinstance(gain, torch.Tensor) else None
    args = (q, k, v, keys, values, sum_complete, sum_partial, position, bases, window, bias, feat, log_temperature,
            memory_norm, combine, per_head, 1.0 if per_head is not None else float(gain), empty_memory)
    if torch.compiler.is_compiling():
        return torch.ops.lavo_zoo.triton_decode_step(*args)
    return _decode_step(*args)


def _decode_step(q, k, v, keys, values, sum_complete, sum_partial, position, bases, window, bias, feat,
                 log_temperature, memory_norm, combine, gain_per_head, gain, empty_memory):
    B, H, _, d = q.shape
    L, w, r = keys.shape[2], window, bases.shape[1]
    new_len = min(w - 1, L + 1)
    new_keys = keys.new_empty(B, H, new_len, d)
    new_values = values.new_empty(B, H, new_len, d)
    out = torch.empty(B, H, 1, d, dtype=torch.float32, device=q.device)
    complete, partial = torch.empty_like(sum_complete), torch.empty_like(sum_partial)
    sc, sp = sum_complete.contiguous(), sum_partial.contiguous()
    keys, values, bases = rowmajor(keys), rowmajor(values), rowmajor(bases)
    per_head = gain_per_head is not None
    f = feat if feat is not None else q
    launch("decode", _decode, grid(B * H, "the decoding step"),
           q, k, v, f, keys, values, bias if bias is not None else q, sc, sp, bases,
           log_temperature if log_temperature is not None else q, gain_per_head if per_head else q, out, new_keys,
           new_values, complete, partial, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
           f.stride(0), f.stride(1), *strides(keys), *strides(values), *strides(new_keys), *strides(bases),
           H, d, r, L, position - position % w, d ** -0.5, gain, W=w,
           SHIFT=L + 1 - new_len, COMPLETES=(position + 1) % w == 0, HAS_BIAS=bias is not None,
           FEAT_IS_LOCAL=feat is None, HAS_TEMP=log_temperature is not None, RMS=memory_norm == "rms",
           HALF=combine == "half", EMPTY_HALF=empty_memory == "half", GAIN_PER_HEAD=per_head,
           BD=block_dim(d), BW=block_dim(w), BR=block_dim(r))
    return out, new_keys, new_values, complete, partial


@torch.library.custom_op("lavo_zoo::triton_decode_step", mutates_args=())
def _decode_step_op(q: Tensor, k: Tensor, v: Tensor, keys: Tensor, values: Tensor, sum_complete: Tensor,
                    sum_partial: Tensor, position: int, bases: Tensor, window: int, bias: Tensor | None,
                    feat: Tensor | None, log_temperature: Tensor | None, memory_norm: str, combine: str,
                    gain_per_head: Tensor | None, gain: float, empty_memory: str
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _decode_step(q, k, v, keys, values, sum_complete, sum_partial, position, bases, window, bias, feat,
                        log_temperature, memory_norm, combine, gain_per_head, gain, empty_memory)


@_decode_step_op.register_fake
def _(q, k, v, keys, values, sum_complete, sum_partial, position, bases, window, bias, feat, log_temperature,
      memory_norm, combine, gain_per_head, gain, empty_memory):
    B, H, L, d = keys.shape
    new_len = min(window - 1, L + 1)
    return (q.new_empty(B, H, 1, d, dtype=torch.float32), keys.new_empty(B, H, new_len, d),
            values.new_empty(B, H, new_len, d), sum_complete.new_empty(sum_complete.shape),
            sum_partial.new_empty(sum_partial.shape))
