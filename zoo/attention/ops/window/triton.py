"""Triton kernels of the sliding window (the ``triton`` kernel of :mod:`lavo_zoo.attention.ops.window`).

Same contract as the blocked ``recompute`` kernel: query t attends to the keys [t-w+1, t] (causal) or
[t-w+1, t+w-1] (noncausal) that are real (``key_mask``), with the relative bias ``bias[h, s - t + w - 1]`` (LAVO's
EPE) added to the scaled score; a causal streaming chunk's key prefix (the state's last keys) sits before position 0.
FlashAttention-style:

- ``_fwd``: one program per (batch x head, block of BM queries) walks its band of BM + span keys (span = w - 1
  causal, 2 (w - 1) noncausal) in BN-key tiles with an online softmax (scores, max, sum and the output accumulator
  in fp32; ``tl.dot`` on the input dtype, IEEE fp32 products for fp32 inputs unless torch allows TF32:
  ``ops/triton_utils.py``) and stores the output in the input dtype and the log-sum-exp (fp32);
- ``_delta``: backward's pre-pass, delta = rowsum(dO * O) in fp32 from the stored output;
- ``_bwd_dq``: per query block, recomputes the probabilities from the log-sum-exp; dQ = scale dS K;
- ``_bwd_dkdv``: per block of BM keys, over the BM + span queries that see them in BN-query tiles;
  dV = P^T dO, dK = scale dS^T Q, with P^T and dS^T computed keys-first (k q^T, v dO^T), never a product's
  result transposed (docs/lavo.md, "No product's result is transposed");
- ``_bwd_dbias``: per query block, the 2w - 1 (w causal) diagonals of dS, one relative offset at a time (the bias
  gradient is a sum along diagonals, which no tile product gives); partial sums per block, added up in torch.
dS = P (dP - delta).

Exact block skipping: the tile BN is the one that covers the band with the fewest rows scanned
(:func:`~lavo_zoo.attention.ops.triton_utils.band_tile`: w = 16 causal, 64-query blocks scan 80 keys in tiles of
16, not 128 in tiles of 64). On a GPU the block size (64 or 128) and warps are autotuned per kernel, keyed on the
window, the head dim and the flags (``T`` is not specialised); in Triton's interpreter one fixed configuration runs,
and callers (tests) may fix ``block_m`` / ``block_n`` themselves.

Attention dropout (``dropout`` p > 0): each kernel regenerates the call's keep-mask from its seed and each (query,
relative key offset)'s flat offset (:func:`lavo_zoo.attention.ops.triton_utils.dropout_factor`, factor Z = 0 or
1 / (1 - p)); the output is (P Z) V with the log-sum-exp of the undropped scores, so backward uses dV = (P Z)^T dO,
dP = (dO V^T) Z, and delta = rowsum(dO * O) still equals rowsum(P dP).

Every kernel runs on a one-axis grid (batch x heads x blocks) with 64-bit offsets, through
:func:`~lavo_zoo.attention.ops.triton_utils.launch`: a kernel that cannot be compiled on the device raises
:class:`~lavo_zoo.attention.ops.KernelUnavailable` (forward: the dispatch reruns the call on the recompute
kernel; backward: :class:`WindowTritonFunction` computes the gradients with the PyTorch kernels, the same mask
included).

A query whose window has no real key (only padded queries) gets finite garbage and no gradient, as in the blocked
kernel. The helpers shared with LAVO's read kernels (precision, tile sizes, strides, interpretation) are in
:mod:`lavo_zoo.attention.ops.triton_utils`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lavo_zoo.attention.common import heads_major_empty
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

# what the autotuned configuration depends on
KEY = ["W", "CAUSAL", "D", "HAS_BIAS", "HAS_MASK", "DROPOUT", "MEM_GRAD"]
DBIAS_BLOCK = 64  # queries per program of the bias-gradient and delta kernels (not tuned: partial sums per block)


def _span(args: dict) -> int:
    """Keys beyond a block's own that its band reaches: w - 1 causal, 2 (w - 1) noncausal."""
    return (args["W"] - 1) * (1 if args["CAUSAL"] else 2)


def _tuned(kernel):
    """The window kernels' autotuning: 64 or 128 rows per program, 4 or 8 warps, the exact-skipping tile."""
    return autotuned(blocks=(64, 128), warps=(4, 8), key=KEY, span_of=_span)(kernel)


@triton.jit
def _scores(a, b, tt, ss, bias_ptr, mask_ptr, T, P, scale, W: tl.constexpr, CAUSAL: tl.constexpr,
            HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, PREC: tl.constexpr):
    """Scores a b^T of two loaded tiles, queries against keys (a = q [BM, BD], b = k [BN, BD]; query positions
    tt = t[:, None], key positions ss = s[None, :]) or keys against queries (a = k, b = q; tt = t[None, :],
    ss = s[:, None]); query t of T sits at key position t + P, keys are positions of T + P (the prefix, then the
    keys). Returns the fp32 scores (NEG outside the window, the sequence or the key mask) and the allowed mask, both
    of a b^T's shape (b is a loaded tile: see ``_bwd_dkdv`` for why no product's result is transposed)."""
    rel = ss - (tt + P)                                                  # key position - query position
    ok = (rel > -W) & (tt >= 0) & (tt < T) & (ss >= 0) & (ss < T + P)
    if CAUSAL:
        ok = ok & (rel <= 0)
    else:
        ok = ok & (rel < W)
    if HAS_MASK:
        real = tl.load(mask_ptr + ss, mask=(ss >= 0) & (ss < T + P), other=0)  # (a key mask comes without prefix)
        ok = ok & (real != 0)
    sc = tl.dot(a, tl.trans(b), input_precision=PREC) * scale
    if HAS_BIAS:
        sc += tl.load(bias_ptr + rel + W - 1, mask=ok, other=0.0).to(tl.float32)
    return tl.where(ok, sc, NEG), ok


@triton.jit
def _drop(seed, p_drop, bh, tt, ss, T, P, W: tl.constexpr):
    """Dropout factors of queries tt against keys ss (positions of T + P), broadcast as in :func:`_scores`: element
    (bh, t, s - t - P + w - 1) of the call's [B H, T, 2w - 1] mask (entries outside the window are never used)."""
    return dropout_factor(seed, (bh * T + tt) * (2 * W - 1) + (ss - tt - P + W - 1), p_drop)


@triton.jit
def _load_rows(ptr, rows, dd, T, D):
    """[N, BD] tile: row pointers ptr [N, 1] (base + rows * row stride; unit column stride), zeros for rows outside
    [0, T) and columns dd >= D."""
    return tl.load(ptr + dd[None, :], mask=((rows >= 0) & (rows < T))[:, None] & (dd < D)[None, :], other=0.0)


@triton.jit
def _load_grad(DO, DWIN, KMASK, b, h, bh, t, dd, sgb, sgh, sgt, smb, T, D, n_rows, ls, W: tl.constexpr,
               MEM_GRAD: tl.constexpr, HAS_MASK: tl.constexpr):
    """The output's gradient dO of query rows t [N] as [N, BD] in DO's dtype (zeros outside [0, T)). With MEM_GRAD
    (LAVO's fused layer, ``lavo/fused.py``) DO is the layer's output gradient G and the local branch's is built here:
    ls G + the memory's gradient of its feature, DWIN [B H, n_rows, D] fp32 row t // W (row 0 when n_rows == 1),
    zero at padded queries; rounded to DO's dtype as a stored dO would be."""
    g = _load_rows(DO + b * sgb + h * sgh + t[:, None] * sgt, t, dd, T, D)
    if MEM_GRAD:
        ok = (t >= 0) & (t < T)
        row = tl.where(n_rows == 1, 0, t // W)
        dw = tl.load(DWIN + (bh * n_rows + row)[:, None] * D + dd[None, :], mask=ok[:, None] & (dd < D)[None, :],
                     other=0.0)
        full = ls * g.to(tl.float32) + dw
        if HAS_MASK:
            real = tl.load(KMASK + b * smb + t, mask=ok, other=0) != 0
            full = tl.where(real[:, None], full, 0.0)
        g = full.to(DO.dtype.element_ty)
    return g


@_tuned
@triton.jit(do_not_specialize=["T", "P", "seed"])
def _fwd(Q, K, V, BIAS, KMASK, O, LSE, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sob, soh, sot, smb,
         H, T, P, D, scale, seed, p_drop, W: tl.constexpr, SPAN: tl.constexpr, CAUSAL: tl.constexpr,
         HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, DROPOUT: tl.constexpr, BD: tl.constexpr,
         PREC: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Program (b h, block of BM queries): the band's BM + SPAN keys in tiles of BN (NK tiles, fewer than
    BM + SPAN + BN keys scanned); O in its own dtype, LSE fp32."""
    nb = tl.cdiv(T, BM)
    prog = tl.program_id(0).to(tl.int64)                  # one axis: (b h, query block); 64-bit offsets throughout
    bh, pid = prog // nb, prog % nb
    b, h = bh // H, bh % H
    t = pid * BM + tl.arange(0, BM)
    dd = tl.arange(0, BD)
    q = _load_rows(Q + b * sqb + h * sqh + t[:, None] * sqt, t, dd, T, D)           # [BM, BD]
    bias_ptr, mask_ptr = BIAS + h * (2 * W - 1), KMASK + b * smb
    m_i = tl.full([BM], NEG, tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, BD], tl.float32)
    for j in range((BM + SPAN + BN - 1) // BN):                                       # the band's key tiles
        s = pid * BM + P - (W - 1) + j * BN + tl.arange(0, BN)
        k = _load_rows(K + b * skb + h * skh + s[:, None] * skt, s, dd, T + P, D)   # [BN, BD]
        v = _load_rows(V + b * svb + h * svh + s[:, None] * svt, s, dd, T + P, D)
        sc, _ = _scores(q, k, t[:, None], s[None, :], bias_ptr, mask_ptr, T, P, scale, W, CAUSAL, HAS_BIAS,
                        HAS_MASK, PREC)
        m_new = tl.maximum(m_i, tl.max(sc, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(sc - m_new[:, None])                                               # [BM, BN]
        l_i = l_i * alpha + tl.sum(p, 1)
        if DROPOUT:                                                                   # (P Z) V; l from P
            p = p * _drop(seed, p_drop, bh, t[:, None], s[None, :], T, P, W)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
        m_i = m_new
    tq = t < T
    tl.store(O + b * sob + h * soh + t[:, None] * sot + dd[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty),
             mask=tq[:, None] & (dd < D)[None, :])
    tl.store(LSE + bh * T + t, m_i + tl.log(l_i), mask=tq)


@triton.jit(do_not_specialize=["T", "n_rows"])
def _delta(O, DO, DELTA, DWIN, KMASK, sob, soh, sot, sgb, sgh, sgt, smb, H, T, D, n_rows, ls, W: tl.constexpr,
           MEM_GRAD: tl.constexpr, HAS_MASK: tl.constexpr, BD: tl.constexpr, BM: tl.constexpr):
    """The backward's pre-pass: DELTA[b h, t] = rowsum(dO * O) in fp32, from O and dO in their own dtypes (dO built
    by :func:`_load_grad`)."""
    nb = tl.cdiv(T, BM)
    prog = tl.program_id(0).to(tl.int64)
    bh, pid = prog // nb, prog % nb
    b, h = bh // H, bh % H
    t = pid * BM + tl.arange(0, BM)
    dd = tl.arange(0, BD)
    o = _load_rows(O + b * sob + h * soh + t[:, None] * sot, t, dd, T, D).to(tl.float32)
    do = _load_grad(DO, DWIN, KMASK, b, h, bh, t, dd, sgb, sgh, sgt, smb, T, D, n_rows, ls, W, MEM_GRAD,
                    HAS_MASK).to(tl.float32)
    tl.store(DELTA + bh * T + t, tl.sum(o * do, 1), mask=t < T)


@_tuned
@triton.jit(do_not_specialize=["T", "P", "seed"])
def _bwd_dq(Q, K, V, BIAS, KMASK, DO, LSE, DELTA, DQ, DWIN, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sgb, sgh,
            sgt, sdb, sdh, sdt, smb, H, T, P, D, n_rows, ls, scale, seed, p_drop, W: tl.constexpr, SPAN: tl.constexpr,
            CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, DROPOUT: tl.constexpr,
            MEM_GRAD: tl.constexpr, ACC_DQ: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr, BM: tl.constexpr,
            BN: tl.constexpr):
    """Program (b h, block of BM queries), the same band as the forward: dQ = scale dS K (ACC_DQ: added to what DQ
    holds, the memory read's dq in the fused layer)."""
    nb = tl.cdiv(T, BM)
    prog = tl.program_id(0).to(tl.int64)                  # one axis: (b h, query block); 64-bit offsets throughout
    bh, pid = prog // nb, prog % nb
    b, h = bh // H, bh % H
    t = pid * BM + tl.arange(0, BM)
    dd = tl.arange(0, BD)
    tq = t < T
    q = _load_rows(Q + b * sqb + h * sqh + t[:, None] * sqt, t, dd, T, D)           # [BM, BD]
    do = _load_grad(DO, DWIN, KMASK, b, h, bh, t, dd, sgb, sgh, sgt, smb, T, D, n_rows, ls, W, MEM_GRAD, HAS_MASK)
    lse = tl.load(LSE + bh * T + t, mask=tq, other=0.0)
    delta = tl.load(DELTA + bh * T + t, mask=tq, other=0.0)
    bias_ptr, mask_ptr = BIAS + h * (2 * W - 1), KMASK + b * smb
    dq = tl.zeros([BM, BD], tl.float32)
    for j in range((BM + SPAN + BN - 1) // BN):
        s = pid * BM + P - (W - 1) + j * BN + tl.arange(0, BN)
        k = _load_rows(K + b * skb + h * skh + s[:, None] * skt, s, dd, T + P, D)   # [BN, BD]
        v = _load_rows(V + b * svb + h * svh + s[:, None] * svt, s, dd, T + P, D)
        sc, ok = _scores(q, k, t[:, None], s[None, :], bias_ptr, mask_ptr, T, P, scale, W, CAUSAL, HAS_BIAS,
                         HAS_MASK, PREC)
        p = tl.where(ok, tl.exp(sc - lse[:, None]), 0.0)                              # [BM, BN]
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        if DROPOUT:
            dp = dp * _drop(seed, p_drop, bh, t[:, None], s[None, :], T, P, W)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    dq = dq * scale
    rows = DQ + b * sdb + h * sdh + t[:, None] * sdt + dd[None, :]
    if ACC_DQ:
        dq += tl.load(rows, mask=tq[:, None] & (dd < D)[None, :], other=0.0).to(tl.float32)
    tl.store(rows, dq.to(DQ.dtype.element_ty), mask=tq[:, None] & (dd < D)[None, :])


@_tuned
@triton.jit(do_not_specialize=["T", "P", "seed"])
def _bwd_dkdv(Q, K, V, BIAS, KMASK, DO, LSE, DELTA, DK, DV, DWIN, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt,
              sgb, sgh, sgt, sdb, sdh, sdt, smb, H, T, P, D, n_rows, ls, scale, seed, p_drop, W: tl.constexpr,
              SPAN: tl.constexpr, CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr,
              DROPOUT: tl.constexpr, MEM_GRAD: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr):
    """Program (b h, block of BM keys of T + P): the BM + SPAN queries that see them, in tiles of BN;
    dV = (P Z)^T dO, dK = scale dS^T Q, each [BM, BN] tile keys x queries (P^T = exp(k q^T - lse))."""
    nb = tl.cdiv(T + P, BM)
    prog = tl.program_id(0).to(tl.int64)                  # one axis: (b h, key block); 64-bit offsets throughout
    bh, pid = prog // nb, prog % nb
    b, h = bh // H, bh % H
    s = pid * BM + tl.arange(0, BM)                                                   # key positions (of T + P)
    dd = tl.arange(0, BD)
    k = _load_rows(K + b * skb + h * skh + s[:, None] * skt, s, dd, T + P, D)       # [BM, BD]
    v = _load_rows(V + b * svb + h * svh + s[:, None] * svt, s, dd, T + P, D)
    bias_ptr, mask_ptr = BIAS + h * (2 * W - 1), KMASK + b * smb
    dk = tl.zeros([BM, BD], tl.float32)
    dv = tl.zeros([BM, BD], tl.float32)
    first = pid * BM - P if CAUSAL else pid * BM - P - (W - 1)                        # first query that sees a key
    for i in range((BM + SPAN + BN - 1) // BN):
        t = first + i * BN + tl.arange(0, BN)
        tq = (t >= 0) & (t < T)
        q = _load_rows(Q + b * sqb + h * sqh + t[:, None] * sqt, t, dd, T, D)       # [BN, BD]
        do = _load_grad(DO, DWIN, KMASK, b, h, bh, t, dd, sgb, sgh, sgt, smb, T, D, n_rows, ls, W, MEM_GRAD,
                        HAS_MASK)
        lse = tl.load(LSE + bh * T + t, mask=tq, other=0.0)
        delta = tl.load(DELTA + bh * T + t, mask=tq, other=0.0)
        sc, ok = _scores(k, q, t[None, :], s[:, None], bias_ptr, mask_ptr, T, P, scale, W, CAUSAL, HAS_BIAS,
                         HAS_MASK, PREC)                                              # [BM, BN] keys x queries
        p = tl.where(ok, tl.exp(sc - lse[None, :]), 0.0)                              # P^T [BM, BN]
        dp = tl.dot(v, tl.trans(do), input_precision=PREC)                            # dP^T [BM, BN]
        if DROPOUT:
            z = _drop(seed, p_drop, bh, t[None, :], s[:, None], T, P, W)
            dv += tl.dot((p * z).to(do.dtype), do, input_precision=PREC)
            dp = dp * z
        else:
            dv += tl.dot(p.to(do.dtype), do, input_precision=PREC)
        ds = p * (dp - delta[None, :])                                                # dS^T [BM, BN]
        dk += tl.dot(ds.to(q.dtype), q, input_precision=PREC)
    keep = ((s < T + P)[:, None]) & (dd < D)[None, :]
    tl.store(DK + b * sdb + h * sdh + s[:, None] * sdt + dd[None, :], (dk * scale).to(DK.dtype.element_ty), mask=keep)
    tl.store(DV + b * sdb + h * sdh + s[:, None] * sdt + dd[None, :], dv.to(DV.dtype.element_ty), mask=keep)


@triton.jit(do_not_specialize=["T", "P", "seed"])
def _bwd_dbias(Q, K, V, BIAS, KMASK, DO, LSE, DELTA, PART, DWIN, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt,
               sgb, sgh, sgt, smb, H, T, P, D, n_rows, ls, scale, seed, p_drop, W: tl.constexpr, NO: tl.constexpr,
               HAS_MASK: tl.constexpr, DROPOUT: tl.constexpr, MEM_GRAD: tl.constexpr, BM: tl.constexpr,
               BD: tl.constexpr):
    """PART[bh, block, o] = sum over the block's queries t of dS[t, t + o - (w - 1)], o < NO (w causal, 2w - 1
    noncausal), as fp32 row products of shifted key/value rows."""
    nb = tl.cdiv(T, BM)
    prog = tl.program_id(0).to(tl.int64)                  # one axis: (b h, query block); 64-bit offsets throughout
    bh, pid = prog // nb, prog % nb
    b, h = bh // H, bh % H
    t = pid * BM + tl.arange(0, BM)
    dd = tl.arange(0, BD)
    tq = t < T
    q = _load_rows(Q + b * sqb + h * sqh + t[:, None] * sqt, t, dd, T, D).to(tl.float32)
    do = _load_grad(DO, DWIN, KMASK, b, h, bh, t, dd, sgb, sgh, sgt, smb, T, D, n_rows, ls, W, MEM_GRAD,
                    HAS_MASK).to(tl.float32)
    lse = tl.load(LSE + bh * T + t, mask=tq, other=0.0)
    delta = tl.load(DELTA + bh * T + t, mask=tq, other=0.0)
    for o in range(NO):
        s = t + P + o - (W - 1)                                                       # [BM] key of each query
        ok = tq & (s >= 0) & (s < T + P)
        if HAS_MASK:
            ok = ok & (tl.load(KMASK + b * smb + s, mask=ok, other=0) != 0)
        k = _load_rows(K + b * skb + h * skh + s[:, None] * skt, s, dd, T + P, D).to(tl.float32)
        v = _load_rows(V + b * svb + h * svh + s[:, None] * svt, s, dd, T + P, D).to(tl.float32)
        sc = tl.sum(q * k, 1) * scale + tl.load(BIAS + h * (2 * W - 1) + o).to(tl.float32)
        p = tl.where(ok, tl.exp(tl.where(ok, sc - lse, NEG)), 0.0)               # no overflow on masked rows
        dp = tl.sum(do * v, 1)
        if DROPOUT:
            dp = dp * dropout_factor(seed, (bh * T + t) * (2 * W - 1) + o, p_drop)
        ds = p * (dp - delta)
        tl.store(PART + (bh * nb + pid) * (2 * W - 1) + o, tl.sum(ds, 0))


def _config(q: torch.Tensor, window: int, causal: bool) -> dict:
    return {"W": window, "SPAN": (1 if causal else 2) * (window - 1), "CAUSAL": causal,
            "BD": block_dim(q.shape[-1]), "PREC": precision(q.dtype)}


def _programs(rows: int, B: int, H: int, what: str):
    """The grid of a kernel over ``rows`` rows per (b, h): a function of the autotuned block size."""
    return lambda meta: grid(triton.cdiv(rows, meta["BM"]) * B * H, what)


def _tiles(block_m: int | None, block_n: int | None) -> dict | None:
    return {"BM": block_m, "BN": block_n} if block_m else None


def joined(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix_k: torch.Tensor | None,
           prefix_v: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, and the keys and values with a streaming prefix joined in front ([B, H, P + T, d]; one copy, as the flex
    path makes), all in q's dtype (tl.dot wants one) with unit column stride.

    Args:
        q: queries [B, H, T, d].
        k: keys [B, H, T, d].
        v: values [B, H, T, d].
        prefix_k: the prefix's keys [B, H, P, d], or None.
        prefix_v: the prefix's values [B, H, P, d], or None.
    """
    if prefix_k is not None:
        k, v = torch.cat([prefix_k.to(k.dtype), k], 2), torch.cat([prefix_v.to(v.dtype), v], 2)
    return rowmajor(q), rowmajor(k.to(q.dtype)), rowmajor(v.to(q.dtype))


def int8_mask(key_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The key mask [B, T] as the kernels read it (int8, rows contiguous), or None."""
    return None if key_mask is None else key_mask.to(torch.int8).contiguous()


def window_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                   mask: torch.Tensor | None, window: int, causal: bool, *, dropout: float = 0.0, seed: int = 0,
                   block_m: int | None = None, block_n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward kernel on q [B, H, T, d] and the (joined: :func:`joined`) keys and values [B, H, P + T, d], P = the
    prefix's length; bias [H, 2w - 1] or None, mask [B, T] int8 (:func:`int8_mask`) or None. Returns the output
    [B, H, T, d] in q's dtype (laid out [B, T, H, d]) and the log-sum-exp [B H, T] fp32.

    Args:
        q: queries [B, H, T, d].
        k: joined keys [B, H, P + T, d].
        v: joined values [B, H, P + T, d].
        bias: the relative bias [H, 2w - 1], or None.
        mask: the key mask [B, T] int8, or None.
        window: w.
        causal: keys [t-w+1, t] (True) or [t-w+1, t+w-1].
        dropout: the dropout probability p (0: none).
        seed: the call's dropout seed.
        block_m: query rows per tile (None: autotuned).
        block_n: key rows per tile (None: autotuned).
    """
    B, H, T, d = q.shape
    P = k.shape[2] - T
    out = heads_major_empty(B, H, T, d, q, q.dtype)
    lse = torch.empty(B * H, T, dtype=torch.float32, device=q.device)
    launch("window_fwd", _fwd, _programs(T, B, H, "the window's forward"),
           q, k, v, bias if bias is not None else q, mask if mask is not None else q, out, lse, *strides(q),
           *strides(k), *strides(v), *strides(out), mask.stride(0) if mask is not None else 0, H, T, P, d, d ** -0.5,
           seed, dropout, HAS_BIAS=bias is not None, HAS_MASK=mask is not None, DROPOUT=dropout > 0,
           config=_tiles(block_m, block_n), **_config(q, window, causal))
    return out, lse


def window_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                    mask: torch.Tensor | None, out: torch.Tensor, lse: torch.Tensor, grad: torch.Tensor, window: int,
                    causal: bool, *, dropout: float = 0.0, seed: int = 0, block_m: int | None = None,
                    block_n: int | None = None, bias_grad: bool = True, dq: torch.Tensor | None = None,
                    dk: torch.Tensor | None = None, dv: torch.Tensor | None = None,
                    memory_grad: tuple[torch.Tensor, int, float] | None = None, accumulate_dq: bool = False
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The backward kernels (delta, dq, dk and dv, the bias's) on the forward's inputs (as :func:`window_forward`
    took them), its output and log-sum-exp, and ``grad`` [B, H, T, d] in q's dtype with unit column stride.

    Args:
        q: the forward's queries [B, H, T, d].
        k: the forward's joined keys [B, H, P + T, d] (:func:`joined`).
        v: the forward's joined values [B, H, P + T, d].
        bias: the forward's relative bias [H, 2w - 1], or None.
        mask: the forward's key mask [B, T] int8 (:func:`int8_mask`), or None.
        out: the forward's output [B, H, T, d].
        lse: the forward's log-sum-exp [B H, T] fp32.
        grad: the output's gradient [B, H, T, d] in q's dtype, unit column stride.
        window: w, as in the forward.
        causal: as in the forward.
        dropout: the forward's dropout p (the same ``seed`` redraws its mask).
        seed: the forward's dropout seed.
        block_m: query rows per tile (None: the tuned or default size).
        block_n: key rows per tile (None: the tuned or default size).
        bias_grad: compute the bias's gradient (False: None is returned for it).
        dq: where to write the queries' gradient ([B, H, T, d], any strides with a unit column stride; None: a new
            tensor).
        dk: where to write the keys' gradient ([B, H, P + T, d], as ``dq``).
        dv: where to write the values' gradient ([B, H, P + T, d], as ``dq``).
        memory_grad: LAVO's fused layer: (dwin [B H, n, d] fp32, n, ls), with ``grad`` its output's gradient: the
            window's dO is ls grad + dwin's row of each query, zero at padded queries (``_load_grad``).
        accumulate_dq: add dq to what ``dq`` holds.

    Returns:
        (dq, dk, dv, the bias's gradient [H, 2w - 1] fp32 or None).
    """
    B, H, T, d = q.shape
    P = k.shape[2] - T
    cfg = _config(q, window, causal)
    tiles = _tiles(block_m, block_n)
    dwin, n_rows, ls = memory_grad if memory_grad is not None else (q, 1, 1.0)
    m, smb = (mask, mask.stride(0)) if mask is not None else (q, 0)
    flags = {"HAS_MASK": mask is not None, "MEM_GRAD": memory_grad is not None}
    delta = torch.empty(B * H, T, dtype=torch.float32, device=q.device)              # rowsum(dO * O), fp32
    launch("window_delta", _delta, grid(triton.cdiv(T, DBIAS_BLOCK) * B * H, "the window's delta"),
           out, grad, delta, dwin, m, *strides(out), *strides(grad), smb, H, T, d, n_rows, ls, W=window, BD=cfg["BD"],
           BM=DBIAS_BLOCK, **flags)
    b = bias if bias is not None else q
    args = (q, k, v, b, m, grad, lse, delta)
    layout = (*strides(q), *strides(k), *strides(v), *strides(grad))
    flags.update(HAS_BIAS=bias is not None, DROPOUT=dropout > 0)
    dq = torch.empty(B, H, T, d, dtype=q.dtype, device=q.device) if dq is None else dq
    launch("window_bwd_dq", _bwd_dq, _programs(T, B, H, "the window's dq"), *args, dq, dwin, *layout, *strides(dq),
           smb, H, T, P, d, n_rows, ls, d ** -0.5, seed, dropout, ACC_DQ=accumulate_dq, config=tiles, **flags, **cfg)
    dk = torch.empty(B, H, P + T, d, dtype=q.dtype, device=q.device) if dk is None else dk   # prefix and keys
    dv = torch.empty_like(dk) if dv is None else dv
    if dk.stride() != dv.stride():
        raise ValueError("window_backward: dk and dv must share their strides")
    launch("window_bwd_dkdv", _bwd_dkdv, _programs(P + T, B, H, "the window's dk, dv"), *args, dk, dv, dwin,
           *layout, *strides(dk), smb, H, T, P, d, n_rows, ls, d ** -0.5, seed, dropout, config=tiles, **flags, **cfg)
    dbias = None
    if bias is not None and bias_grad:
        bm = block_m or DBIAS_BLOCK
        nb = triton.cdiv(T, bm)
        part = torch.zeros(B * H, nb, 2 * window - 1, dtype=torch.float32, device=q.device)  # causal: w used
        NO = window if causal else 2 * window - 1
        launch("window_bwd_dbias", _bwd_dbias, grid(nb * B * H, "the window's bias gradient"), *args, part, dwin,
               *layout, smb, H, T, P, d, n_rows, ls, d ** -0.5, seed, dropout, W=window, NO=NO,
               HAS_MASK=mask is not None, DROPOUT=dropout > 0, MEM_GRAD=memory_grad is not None, BM=bm,
               BD=cfg["BD"])
        dbias = part.view(B, H, nb, -1).sum((0, 2))
    return dq, dk, dv, dbias


def _window_fallback_grads(q, k, v, bias, key_mask, P, window, causal, dropout, seed, grad):
    """The gradients by the PyTorch kernels on the (joined) inputs: the recompute kernel, or with dropout the
    autograd kernel under the call's mask (:func:`~lavo_zoo.attention.ops.triton_utils.dropout_mask`). Returns
    (dq, dk, dv [B, H, P + T, d], dbias or None)."""
    from lavo_zoo.attention.ops.window.blocked import CHUNK, WindowAttentionFunction, window_autograd

    B, H, T, _ = q.shape
    with torch.enable_grad():
        q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
        bias_ = bias.detach().requires_grad_() if bias is not None else None
        if dropout:
            keep = dropout_mask(seed, (B, H, T, 2 * window - 1), dropout, q.device)
            out = window_autograd(q_, [k_], [v_], window, causal, bias_, key_mask, P, keep=keep)
        else:
            pk, pv = (k_[:, :, :P], v_[:, :, :P]) if P else (None, None)
            out = WindowAttentionFunction.apply(q_, k_[:, :, P:], v_[:, :, P:], pk, pv, bias_, key_mask, window,
                                                causal, CHUNK)
        leaves = [q_, k_, v_] + ([bias_] if bias is not None else [])
        grads = torch.autograd.grad(out, leaves, grad.to(out.dtype))
    dq, dk, dv = (gr.to(t.dtype) for gr, t in zip(grads[:3], (q, k, v)))
    return dq, dk, dv, (grads[3].to(bias.dtype) if bias is not None else None)


def _window_grads(grad, q, k, v, bias, key_mask, out, lse, P, window, causal, block_m, block_n, dropout, seed,
                  bias_grad):
    """The window's gradients on the joined inputs (the Triton kernels, or the PyTorch kernels where one cannot be
    compiled here: warned once): (dq, dk, dv [B, H, P + T, d], dbias or None)."""
    g = rowmajor(grad.to(q.dtype))
    try:
        dq, dk, dv, dbias = window_backward(q, k, v, bias, int8_mask(key_mask), out, lse, g, window, causal,
                                            dropout=dropout, seed=seed, block_m=block_m, block_n=block_n,
                                            bias_grad=bias_grad)
        return dq, dk, dv, None if dbias is None else dbias.to(bias.dtype)
    except KernelUnavailable:  # a backward kernel cannot be compiled here (warned once): the PyTorch kernels
        return _window_fallback_grads(q, k, v, bias, key_mask, P, window, causal, dropout, seed, grad)


class WindowTritonFunction(torch.autograd.Function):
    """forward(q, k, v [B, H, T, d], prefix_k, prefix_v [B, H, P, d] | None, bias [H, 2w-1] | None,
    key_mask [B, T] bool | None, window, causal, block_m, block_n, dropout, seed) -> [B, H, T, d] in q's dtype (laid
    out [B, T, H, d]). A prefix (causal streaming: the previous chunk's last P < w keys and values, no key_mask) is
    joined in front of the keys (:func:`joined`); query t sits at key position P + t. Saves q, the (joined) keys and
    values, the bias, the mask, the output and the log-sum-exp [B H, T] (fp32) for backward; with ``dropout`` > 0 the
    seed, from which backward regenerates the mask. ``block_m`` / ``block_n``: rows per program and tile extent of
    every kernel, or None (autotuned on a GPU). The eager form of the custom operator ``lavo_zoo::triton_window``
    (what torch.compile traces), with the same kernels and gradients."""

    @staticmethod
    def forward(ctx, q, k, v, prefix_k, prefix_v, bias, key_mask, window, causal, block_m=None, block_n=None,
                dropout=0.0, seed=0):
        """The forward kernel; its arguments are stated on `triton_window_attention` (``prefix_k`` and ``prefix_v``:
        the prefix's keys and values, or None)."""
        P = 0 if prefix_k is None else prefix_k.shape[2]
        q, k, v = joined(q, k, v, prefix_k, prefix_v)
        b = bias.contiguous() if bias is not None else None
        out, lse = window_forward(q, k, v, b, int8_mask(key_mask), window, causal, dropout=dropout, seed=seed,
                                  block_m=block_m, block_n=block_n)
        ctx.save_for_backward(q, k, v, b, key_mask, out, lse)
        ctx.config = (P, window, causal, block_m, block_n, dropout, seed)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, bias, key_mask, out, lse = ctx.saved_tensors
        P, window, causal, block_m, block_n, dropout, seed = ctx.config
        dq, dk, dv, dbias = _window_grads(grad, q, k, v, bias, key_mask, out, lse, P, window, causal, block_m,
                                          block_n, dropout, seed, ctx.needs_input_grad[5])
        dpk, dpv = (dk[:, :, :P], dv[:, :, :P]) if P else (None, None)
        return dq, dk[:, :, P:], dv[:, :, P:], dpk, dpv, dbias, None, None, None, None, None, None, None


# ------------------------------------------------------------------------------- the custom operators (torch.compile)
# torch.compile traces these (their fake forms give the shapes; no GPU needed), eager calls WindowTritonFunction
# above (a custom operator's Python dispatch costs more per call): the same kernels and gradients.
Tensor = torch.Tensor


@torch.library.custom_op("lavo_zoo::triton_window", mutates_args=())
def _window_op(q: Tensor, k: Tensor, v: Tensor, prefix_k: Tensor | None, prefix_v: Tensor | None,
               bias: Tensor | None, key_mask: Tensor | None, window: int, causal: bool, block_m: int, block_n: int,
               dropout: float, seed: int) -> tuple[Tensor, Tensor]:
    q, k, v = joined(q, k, v, prefix_k, prefix_v)
    return window_forward(q, k, v, bias.contiguous() if bias is not None else None, int8_mask(key_mask), window,
                          causal, dropout=dropout, seed=seed, block_m=block_m or None, block_n=block_n or None)


@_window_op.register_fake
def _(q, k, v, prefix_k, prefix_v, bias, key_mask, window, causal, block_m, block_n, dropout, seed):
    B, H, T, d = q.shape
    return heads_major_empty(B, H, T, d, q, q.dtype), q.new_empty(B * H, T, dtype=torch.float32)


@torch.library.custom_op("lavo_zoo::triton_window_backward", mutates_args=())
def _window_backward_op(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, prefix_k: Tensor | None,
                        prefix_v: Tensor | None, bias: Tensor | None, key_mask: Tensor | None, out: Tensor,
                        lse: Tensor, window: int, causal: bool, block_m: int, block_n: int, dropout: float,
                        seed: int, bias_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv over the prefix and the keys [B, H, P + T, d], dbias: empty when not asked for)."""
    P = 0 if prefix_k is None else prefix_k.shape[2]
    q, k, v = joined(q, k, v, prefix_k, prefix_v)
    dq, dk, dv, dbias = _window_grads(grad, q, k, v, bias.contiguous() if bias is not None else None, key_mask,
                                      out, lse, P, window, causal, block_m or None, block_n or None, dropout, seed,
                                      bias_grad)
    return dq, dk, dv, dbias if dbias is not None else q.new_empty(0)


@_window_backward_op.register_fake
def _(grad, q, k, v, prefix_k, prefix_v, bias, key_mask, out, lse, window, causal, block_m, block_n, dropout, seed,
      bias_grad):
    B, H, T, d = q.shape
    P = 0 if prefix_k is None else prefix_k.shape[2]
    dbias = bias.new_empty(bias.shape) if bias is not None and bias_grad else q.new_empty(0)
    return q.new_empty(q.shape), q.new_empty(B, H, P + T, d), q.new_empty(B, H, P + T, d), dbias  # contiguous


def _window_setup(ctx, inputs, output):
    q, k, v, prefix_k, prefix_v, bias, key_mask, window, causal, block_m, block_n, dropout, seed = inputs
    ctx.save_for_backward(q, k, v, prefix_k, prefix_v, bias, key_mask, *output)
    ctx.config = (window, causal, block_m, block_n, dropout, seed)


def _window_op_backward(ctx, grad, _grad_lse):
    q, k, v, prefix_k, prefix_v, bias, key_mask, out, lse = ctx.saved_tensors
    P = 0 if prefix_k is None else prefix_k.shape[2]
    dq, dk, dv, dbias = torch.ops.lavo_zoo.triton_window_backward(
        grad, q, k, v, prefix_k, prefix_v, bias, key_mask, out, lse, *ctx.config,
        bias is not None and ctx.needs_input_grad[5])
    dpk, dpv = (dk[:, :, :P], dv[:, :, :P]) if P else (None, None)
    dbias = dbias if bias is not None and ctx.needs_input_grad[5] else None
    return dq, dk[:, :, P:], dv[:, :, P:], dpk, dpv, dbias, None, None, None, None, None, None, None


_window_op.register_autograd(_window_op_backward, setup_context=_window_setup)


def triton_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                            bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                            prefix: tuple[torch.Tensor, torch.Tensor] | None = None, dropout: float = 0.0,
                            seed: int = 0, block_m: int | None = None, block_n: int | None = None) -> torch.Tensor:
    """Window attention on the Triton kernels: [B, H, T, d] in q's dtype (statistics in fp32). Under torch.compile it
    is the custom operator ``lavo_zoo::triton_window`` (no graph break).

    Args:
        q: queries [B, H, T, d] (fp16/bf16/fp32: :func:`lavo_zoo.attention.ops.triton_utils.usable`).
        k: keys [B, H, T, d].
        v: values [B, H, T, d].
        window: w, the keys per causal window (2w - 1 noncausal).
        causal: keys [t-w+1, t] (True) or [t-w+1, t+w-1].
        bias: [H, 2w-1] relative bias, or None.
        key_mask: [B, T] bool (True = real key), or None.
        prefix: the streaming prefix (keys, values) [B, H, P, d], P < w (causal, no key_mask), or None.
        dropout: p > 0 drops probabilities with the mask of ``seed``
            (:func:`lavo_zoo.attention.ops.triton_utils.dropout_mask` of shape [B, H, T, 2w - 1]).
        seed: the call's dropout seed.
        block_m: rows per program, a power of two >= 16 (tests use 16), or None: autotuned on a GPU (64 or 128 rows),
            fixed in Triton's interpreter.
        block_n: the key tile's extent, as ``block_m`` (None: the tile that scans the band exactly).

    Raises:
        KernelUnavailable: the forward kernel cannot be compiled on this device
            (:class:`~lavo_zoo.attention.ops.KernelUnavailable`).
    """
    if prefix is not None and (not causal or key_mask is not None):
        raise ValueError("triton_window_attention: a key prefix needs causal=True and no key_mask")
    pk, pv = prefix if prefix is not None and prefix[0].shape[2] else (None, None)
    if torch.compiler.is_compiling():
        return torch.ops.lavo_zoo.triton_window(q, k, v, pk, pv, bias, key_mask, window, causal, block_m or 0,
                                                block_n or 0, dropout, seed)[0]
    return WindowTritonFunction.apply(q, k, v, pk, pv, bias, key_mask, window, causal, block_m, block_n, dropout, seed)
