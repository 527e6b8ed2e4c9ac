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

KEY = ["W", "CAUSAL", "D", "HAS_BIAS", "HAS_MASK", "DROPOUT"]  # what the autotuned configuration depends on
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


@triton.jit(do_not_specialize=["T"])
def _delta(O, DO, DELTA, sob, soh, sot, sgb, sgh, sgt, H, T, D, BD: tl.constexpr, BM: tl.constexpr):
    """The backward's pre-pass: DELTA[b h, t] = rowsum(dO * O) in fp32, from O and dO in their own dtypes."""
    nb = tl.cdiv(T, BM)
    prog = tl.program_id(0).to(tl.int64)
    bh, pid = prog // nb, prog % nb
    b, h = bh // H, bh % H
    t = pid * BM + tl.arange(0, BM)
    dd = tl.arange(0, BD)
    o = _load_rows(O + b * sob + h * soh + t[:, None] * sot, t, dd, T, D).to(tl.float32)
    do = _load_rows(DO + b * sgb + h * sgh + t[:, None] * sgt, t, dd, T, D).to(tl.float32)
    tl.store(DELTA + bh * T + t, tl.sum(o * do, 1), mask=t < T)


@_tuned
@triton.jit(do_not_specialize=["T", "P", "seed"])
def _bwd_dq(Q, K, V, BIAS, KMASK, DO, LSE, DELTA, DQ, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sgb, sgh, sgt,
            sdb, sdh, sdt, smb, H, T, P, D, scale, seed, p_drop, W: tl.constexpr, SPAN: tl.constexpr,
            CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, DROPOUT: tl.constexpr,
            BD: tl.constexpr, PREC: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Program (b h, block of BM queries), the same band as the forward: dQ = scale dS K."""
    nb = tl.cdiv(T, BM)
    prog = tl.program_id(0).to(tl.int64)                  # one axis: (b h, query block); 64-bit offsets throughout
    bh, pid = prog // nb, prog % nb
    b, h = bh // H, bh % H
    t = pid * BM + tl.arange(0, BM)
    dd = tl.arange(0, BD)
    tq = t < T
    q = _load_rows(Q + b * sqb + h * sqh + t[:, None] * sqt, t, dd, T, D)           # [BM, BD]
    do = _load_rows(DO + b * sgb + h * sgh + t[:, None] * sgt, t, dd, T, D)
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
    tl.store(DQ + b * sdb + h * sdh + t[:, None] * sdt + dd[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=tq[:, None] & (dd < D)[None, :])


@_tuned
@triton.jit(do_not_specialize=["T", "P", "seed"])
def _bwd_dkdv(Q, K, V, BIAS, KMASK, DO, LSE, DELTA, DK, DV, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt,
              sgb, sgh, sgt, sdb, sdh, sdt, smb, H, T, P, D, scale, seed, p_drop, W: tl.constexpr,
              SPAN: tl.constexpr, CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr,
              DROPOUT: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
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
        do = _load_rows(DO + b * sgb + h * sgh + t[:, None] * sgt, t, dd, T, D)
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
def _bwd_dbias(Q, K, V, BIAS, KMASK, DO, LSE, DELTA, PART, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt,
               sgb, sgh, sgt, smb, H, T, P, D, scale, seed, p_drop, W: tl.constexpr, NO: tl.constexpr,
               HAS_MASK: tl.constexpr, DROPOUT: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr):
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
    do = _load_rows(DO + b * sgb + h * sgh + t[:, None] * sgt, t, dd, T, D).to(tl.float32)
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


class WindowTritonFunction(torch.autograd.Function):
    """forward(q, k, v [B, H, T, d], prefix_k, prefix_v [B, H, P, d] | None, bias [H, 2w-1] | None,
    key_mask [B, T] bool | None, window, causal, block_m, block_n, dropout, seed) -> [B, H, T, d] in q's dtype (laid
    out [B, T, H, d]). A prefix (causal streaming: the previous chunk's last P < w keys and values, no key_mask) is
    joined in front of the keys (one copy, as the flex path does); query t sits at key position P + t. Saves q, the
    (joined) keys and values, the bias, the mask, the output and the log-sum-exp [B H, T] (fp32) for backward; with
    ``dropout`` > 0 the seed, from which backward regenerates the mask. ``block_m`` / ``block_n``: rows per program
    and tile extent of every kernel, or None (autotuned on a GPU)."""

    @staticmethod
    def _config(q, window, causal):
        return {"W": window, "SPAN": (1 if causal else 2) * (window - 1), "CAUSAL": causal,
                "BD": block_dim(q.shape[-1]), "PREC": precision(q.dtype)}

    @staticmethod
    def _programs(rows, B, H, what):
        """The grid of a kernel over ``rows`` rows per (b, h): a function of the autotuned block size."""
        return lambda meta: grid(triton.cdiv(rows, meta["BM"]) * B * H, what)

    @staticmethod
    def forward(ctx, q, k, v, prefix_k, prefix_v, bias, key_mask, window, causal, block_m=None, block_n=None,
                dropout=0.0, seed=0):
        P = 0 if prefix_k is None else prefix_k.shape[2]
        if P:
            k, v = torch.cat([prefix_k.to(k.dtype), k], 2), torch.cat([prefix_v.to(v.dtype), v], 2)  # [B, H, P+T, d]
        q, k, v = rowmajor(q), rowmajor(k.to(q.dtype)), rowmajor(v.to(q.dtype))  # tl.dot wants one dtype
        B, H, T, d = q.shape
        out = heads_major_empty(B, H, T, d, q, q.dtype)
        lse = torch.empty(B * H, T, dtype=torch.float32, device=q.device)
        b = bias.contiguous() if bias is not None else q                              # any pointer when unused
        m = key_mask.to(torch.int8).contiguous() if key_mask is not None else torch.ones(1, 1, dtype=torch.int8,
                                                                                           device=q.device)
        tiles = {"BM": block_m, "BN": block_n} if block_m else None
        launch("window_fwd", _fwd, WindowTritonFunction._programs(T, B, H, "the window's forward"),
               q, k, v, b, m, out, lse, *strides(q), *strides(k), *strides(v), *strides(out), m.stride(0),
               H, T, P, d, d ** -0.5, seed, dropout, HAS_BIAS=bias is not None, HAS_MASK=key_mask is not None,
               DROPOUT=dropout > 0, config=tiles, **WindowTritonFunction._config(q, window, causal))
        ctx.save_for_backward(q, k, v, bias, m, out, lse)
        ctx.config = (P, window, causal, block_m, block_n, bias is not None, key_mask is not None, dropout, seed)
        return out

    @staticmethod
    def backward(ctx, grad):
        try:
            return WindowTritonFunction._backward(ctx, grad)
        except KernelUnavailable:  # a backward kernel cannot be compiled here (warned once): the PyTorch kernels
            return WindowTritonFunction._fallback_backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        q, k, v, bias, m, out, lse = ctx.saved_tensors
        P, window, causal, block_m, block_n, has_bias, has_mask, dropout, seed = ctx.config
        B, H, T, d = q.shape
        cfg = WindowTritonFunction._config(q, window, causal)
        tiles = {"BM": block_m, "BN": block_n} if block_m else None
        g = rowmajor(grad.to(q.dtype))
        delta = torch.empty(B * H, T, dtype=torch.float32, device=q.device)          # rowsum(dO * O), fp32
        launch("window_delta", _delta, grid(triton.cdiv(T, DBIAS_BLOCK) * B * H, "the window's delta"),
               out, g, delta, *strides(out), *strides(g), H, T, d, BD=cfg["BD"], BM=DBIAS_BLOCK)
        b = bias.contiguous() if has_bias else q
        args = (q, k, v, b, m, g, lse, delta)
        layout = (*strides(q), *strides(k), *strides(v), *strides(g))
        flags = {"HAS_BIAS": has_bias, "HAS_MASK": has_mask, "DROPOUT": dropout > 0}
        dq = torch.empty(B, H, T, d, dtype=q.dtype, device=q.device)
        launch("window_bwd_dq", _bwd_dq, WindowTritonFunction._programs(T, B, H, "the window's dq"), *args, dq,
               *layout, *strides(dq), m.stride(0), H, T, P, d, d ** -0.5, seed, dropout, config=tiles, **flags, **cfg)
        dk = torch.empty(B, H, P + T, d, dtype=q.dtype, device=q.device)             # prefix and keys
        dv = torch.empty_like(dk)
        launch("window_bwd_dkdv", _bwd_dkdv, WindowTritonFunction._programs(P + T, B, H, "the window's dk, dv"),
               *args, dk, dv, *layout, *strides(dk), m.stride(0), H, T, P, d, d ** -0.5, seed, dropout,
               config=tiles, **flags, **cfg)
        dbias = None
        if has_bias and ctx.needs_input_grad[5]:
            bm = block_m or DBIAS_BLOCK
            nb = triton.cdiv(T, bm)
            part = torch.zeros(B * H, nb, 2 * window - 1, dtype=torch.float32, device=q.device)
            launch("window_bwd_dbias", _bwd_dbias, grid(nb * B * H, "the window's bias gradient"), *args, part,
                   *layout, m.stride(0), H, T, P, d, d ** -0.5, seed, dropout, W=window,
                   NO=window if causal else 2 * window - 1, HAS_MASK=has_mask, DROPOUT=dropout > 0, BM=bm,
                   BD=cfg["BD"])
            dbias = part.view(B, H, nb, -1).sum((0, 2)).to(bias.dtype)
        dpk, dpv = (dk[:, :, :P], dv[:, :, :P]) if P else (None, None)
        return dq, dk[:, :, P:], dv[:, :, P:], dpk, dpv, dbias, None, None, None, None, None, None, None

    @staticmethod
    def _fallback_backward(ctx, grad):
        """The gradients by the PyTorch kernels on the saved inputs: the recompute kernel, or with dropout the
        autograd kernel under this call's mask (:func:`~lavo_zoo.attention.ops.triton_utils.dropout_mask`)."""
        from lavo_zoo.attention.ops.window.blocked import CHUNK, WindowAttentionFunction, window_autograd

        q, k, v, bias, m, _, _ = ctx.saved_tensors
        P, window, causal, _, _, has_bias, has_mask, dropout, seed = ctx.config
        B, H, T, _ = q.shape
        key_mask = m.bool() if has_mask else None
        with torch.enable_grad():
            q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
            bias_ = bias.detach().requires_grad_() if has_bias else None
            if dropout:
                keep = dropout_mask(seed, (B, H, T, 2 * window - 1), dropout, q.device)
                out = window_autograd(q_, [k_], [v_], window, causal, bias_, key_mask, P, keep=keep)
            else:
                pk, pv = (k_[:, :, :P], v_[:, :, :P]) if P else (None, None)
                out = WindowAttentionFunction.apply(q_, k_[:, :, P:], v_[:, :, P:], pk, pv, bias_, key_mask, window,
                                                    causal, CHUNK)
            leaves = [q_, k_, v_] + ([bias_] if has_bias else [])
            grads = torch.autograd.grad(out, leaves, grad.to(out.dtype))
        dq, dk, dv = (gr.to(t.dtype) for gr, t in zip(grads[:3], (q, k, v)))
        dbias = grads[3].to(bias.dtype) if has_bias else None
        dpk, dpv = (dk[:, :, :P], dv[:, :, :P]) if P else (None, None)
        return dq, dk[:, :, P:], dv[:, :, P:], dpk, dpv, dbias, None, None, None, None, None, None, None


@torch.compiler.disable  # torch.compile runs it as is (a graph break), not traced into the launches
def triton_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, *, causal: bool,
                            bias: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                            prefix: tuple[torch.Tensor, torch.Tensor] | None = None, dropout: float = 0.0,
                            seed: int = 0, block_m: int | None = None, block_n: int | None = None) -> torch.Tensor:
    """Window attention of q, k, v [B, H, T, d] (fp16/bf16/fp32: :func:`lavo_zoo.attention.ops.triton_utils.usable`)
    with bias [H, 2w-1], key_mask [B, T] and the streaming ``prefix`` (keys, values) [B, H, P, d], P < w (causal, no
    key_mask); [B, H, T, d] in q's dtype (statistics in fp32). ``dropout`` p > 0 drops probabilities with the mask of
    ``seed`` (:func:`lavo_zoo.attention.ops.triton_utils.dropout_mask` of shape [B, H, T, 2w - 1]). ``block_m`` rows
    per program and ``block_n`` tile extent, powers of two >= 16 (tests use 16), or None: autotuned on a GPU (64 or
    128 rows, the tile that scans the band exactly), fixed in Triton's interpreter. Raises
    :class:`~lavo_zoo.attention.ops.KernelUnavailable` where the forward kernel cannot be compiled on
    this device."""
    if prefix is not None and (not causal or key_mask is not None):
        raise ValueError("triton_window_attention: a key prefix needs causal=True and no key_mask")
    pk, pv = prefix if prefix is not None and prefix[0].shape[2] else (None, None)
    return WindowTritonFunction.apply(q, k, v, pk, pv, bias, key_mask, window, causal, block_m, block_n, dropout, seed)
