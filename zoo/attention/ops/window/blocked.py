"""The blocked kernels of the sliding window (:mod:`lavo_zoo.attention.ops.window`): the w queries of block j
against the keys of blocks j-1 and j (causal) or j-1, j and j+1 (noncausal). No T x T tensor and no gather of a
T x w x d tensor; scores and softmax in fp32 (or the input's wider dtype).

- :class:`WindowAttentionFunction` (the ``recompute`` kernel): chunks of ``chunk`` queries; saves only q, k, v (and the
  bias, mask, prefix) for backward and recomputes each chunk's scores there, like FlashAttention. No [T, 2w] scores
  and no 2w-key blocks survive the forward pass.
- :func:`window_autograd` (the ``autograd`` kernel): the same blocked computation on the whole sequence, differentiated
  by autograd (it keeps the [T, 2w] probabilities and the key/value blocks); with an explicit dropout mask it is the
  reference the tests compare the kernels' dropout with.

Attention dropout (:mod:`lavo_zoo.attention.ops.dropout`): the recompute kernel draws one seed per call and each
chunk's mask from it (:func:`chunk_keep`, in band form: one factor per query and relative key offset s - t + w - 1),
and backward regenerates the same masks; :func:`dropout_band` materialises a call's whole mask for the tests.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from lavo_zoo.attention.common import compute_dtype, heads_major_empty
from lavo_zoo.attention.ops.dropout import keep_factor

CHUNK = 256  # queries per recomputed chunk: temporaries ~ B * H * CHUNK * (64 + 2w) numbers; smaller costs time


def _blocks(t: torch.Tensor, w: int, n: int, num: int) -> torch.Tensor:
    """[..., L, c] padded so that L = (n + num - 1) * w  ->  [..., n, num * w, c]: block j sees blocks j..j+num-1."""
    b = t.unflatten(-2, (n + num - 1, w))  # [..., n+num-1, w, c]
    return torch.cat([b[..., i:i + n, :, :] for i in range(num)], dim=-2)


def pad_time(t: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Zero-pad the time axis (-2) of t; no copy when there is nothing to pad."""
    return t if before == after == 0 else F.pad(t, (0, 0, before, after))


def _pad_cat(parts: Sequence[torch.Tensor], before: int, after: int, dtype: torch.dtype) -> torch.Tensor:
    """[zeros(before), *parts, zeros(after)] along time (dim 2), in one copy."""
    t = parts[-1]
    zeros = t.new_zeros(*t.shape[:2], before + after, t.shape[3], dtype=dtype)
    return torch.cat([zeros[:, :, :before], *(p.to(dtype) for p in parts), zeros[:, :, before:]], 2)


def window_autograd(q: torch.Tensor, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], w: int,
                 causal: bool, bias: torch.Tensor | None, key_real: torch.Tensor | None, lead: int,
                 dropout: float = 0.0, training: bool = False, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Blocked window attention of q [B, H, Tq, d] over the keys/values that ``keys``/``values`` concatenate to
    ([B, H, Tk, d] pieces); query i sits at key position lead + i, Tk - lead - Tq < w (trailing keys, noncausal).
    key_real [B, Tk] bool or None. Dropout: ``keep`` [B, H, Tq, 2w - 1], the factor of each query's relative key
    offset s - t + w - 1 (0 dropped, 1 / (1 - p) kept: a kernel's mask, as :func:`dropout_band` gives it), or else
    ``dropout`` with torch's own mask in training. Returns [B, H, Tq, d] in :func:`compute_dtype`. Differentiable by
    autograd.

    Args:
        q: queries [B, H, Tq, d].
        keys: key pieces [B, H, Tk_i, d], concatenated along time (a prefix, then the keys).
        values: value pieces, as ``keys``.
        w: the window.
        causal: keys [t-w+1, t] (True) or [t-w+1, t+w-1].
        bias: [H, 2w - 1] relative bias added to the scaled scores, or None.
        key_real: [B, Tk] bool, True = real key, or None (all real).
        lead: the key position of query 0 (the prefix's length).
        dropout: attention dropout p with torch's mask, in ``training`` (when no ``keep`` is given).
        training: whether ``dropout`` applies.
        keep: [B, H, Tq, 2w - 1] dropout factors of a kernel's mask, or None.
    """
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
    if keep is not None:                                                   # band [B, H, Tq, 2w-1] -> [B, H, n, w, K]
        band = pad_time(keep.to(ct), lead, end).unflatten(2, (n, w))
        p = p * band.gather(-1, (rel + w - 1).clamp(0, 2 * w - 2).expand(*band.shape[:-1], K))
    elif dropout and training:
        p = F.dropout(p, dropout, training=True)
    out = (p @ vb).flatten(2, 3)                                                                      # [B, H, n*w, d]
    return out[:, :, lead:lead + Tq]


def query_block(window: int) -> int:
    """Queries per block of the recompute kernel. Block j of c queries scores the K = c + (w - 1) (causal) or
    c + 2 (w - 1) (noncausal) keys around it: c = w for small windows (few, well-filled blocks); 64 for large ones,
    where blocks of w queries would score 3w keys of which only 2w - 1 are in a query's window."""
    return min(window, 64)


def _padded_range(prefix: torch.Tensor | None, t: torch.Tensor, front: int, lo: int, hi: int, dtype: torch.dtype
                  ) -> torch.Tensor:
    """Positions [lo, hi) along time (dim 2) of [zeros(front), prefix, t, zeros, ...] ([B, H, *, d] pieces): a view
    of t where the range lies inside it (and no cast is needed), else one small copy."""
    start = front + (0 if prefix is None else prefix.shape[2])              # where t begins
    if lo >= start and hi <= start + t.shape[2] and t.dtype == dtype:
        return t[:, :, lo - start:hi - start]
    B, H, _, d = t.shape
    out = t.new_zeros(B, H, hi - lo, d, dtype=dtype)
    for piece, at in ((prefix, front), (t, start)):
        if piece is not None and max(lo, at) < min(hi, at + piece.shape[2]):
            a, b = max(lo, at), min(hi, at + piece.shape[2])
            out[:, :, a - lo:b - lo] = piece[:, :, a - at:b - at]
    return out


def _band(bias: torch.Tensor | None, H: int, c: int, span: int, ct: torch.dtype, device: torch.device
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The additive score term of a block of c queries against its K = c + span keys, whose first key sits w - 1
    positions before the first query, so that (query i, key j) has bias index j - i: bias[h, j - i] for
    0 <= j - i <= span, the dtype's minimum elsewhere, [H, c, K]. Also the [c, K] in-window mask and bias index."""
    K = c + span
    index = torch.arange(K, device=device)[None, :] - torch.arange(c, device=device)[:, None]   # [c, K]
    inside = (index >= 0) & (index <= span)
    index = index.clamp(0, span)
    add = bias.to(ct)[:, index] if bias is not None else torch.zeros(H, c, K, dtype=ct, device=device)
    return add.masked_fill_(~inside, torch.finfo(ct).min), inside, index


class WindowAttentionFunction(torch.autograd.Function):
    """Blocked window attention that saves only its inputs and recomputes each chunk of queries in backward.

    forward(q, k, v [B, H, T, d], prefix_k, prefix_v [B, H, P, d] | None, bias [H, 2w-1] | None,
    key_mask [B, T] bool | None, window, causal, chunk, dropout, seed) -> [B, H, T, d] in compute_dtype (laid out
    [B, T, H, d]).

    Keys and values are padded once (w - 1 - P zeros, the prefix, the keys, zeros after), so that block j of
    c = :func:`query_block` queries sees the K = c + span padded keys from j c on (span = w - 1 causal, 2 (w - 1)
    noncausal), masked to each query's window by one additive [H, c, K] term (:func:`_band`). Chunks of ``chunk``
    queries (whole blocks, at least one) run as batched matmuls over their blocks. Backward recomputes each chunk's
    probabilities and differentiates by hand as FlashAttention does (dV = P^T dO, dS = P (dP - rowsum(P dP)),
    dQ = dS K, dK = dS^T Q); the bias gradient is summed per (query, key) slot over all blocks and scattered to the
    2w - 1 offsets once.

    With ``dropout`` p > 0, each chunk's probabilities are multiplied by its mask (:func:`chunk_keep`, drawn from
    ``seed``), which backward regenerates: dV = (P Z)^T dO, dP = (dO V^T) Z, with Z the chunk's factor.
    """

    @staticmethod
    def _setup(q, prefix_k, bias, key_mask, window, causal):
        """Block size c, key span, number of blocks, leading zeros, padded length L, the [B', L] real-key mask and
        the band term, window mask and bias index of :func:`_band`."""
        B, H, T, _ = q.shape
        ct = compute_dtype(q.dtype)
        c = query_block(window)
        span = (1 if causal else 2) * (window - 1)
        P = 0 if prefix_k is None else prefix_k.shape[2]
        n_all = math.ceil(T / c)
        front = window - 1 - P
        L = window - 1 + T + max(n_all * c + c - T - (window - 1), 0) + span     # c spare positions for the folds
        real = torch.zeros(1 if key_mask is None else B, L, dtype=torch.bool, device=q.device)
        real[:, front:window - 1 + T] = True
        if key_mask is not None:
            real[:, window - 1:window - 1 + T] = key_mask
        add, inside, index = _band(bias, H, c, span, ct, q.device)
        return ct, c, span, n_all, front, L, real, add, inside, index

    @staticmethod
    def _blocks(prefix, t, front, t0, t1, c, span, ct):
        """The K = c + span padded positions from j c on of each block j of queries t0..t1 (whole blocks) of
        [zeros(front), prefix, t, zeros] as one contiguous [B H n, K, d] copy."""
        src = _padded_range(prefix, t, front, t0, t1 + span, ct)                 # [B, H, t1 - t0 + span, d]
        return src.unfold(2, c + span, c).mT.reshape(-1, c + span, t.shape[-1])

    @staticmethod
    def _queries(q, t0, t1, c, ct):
        """Queries t0..t1 (zero rows past the end), scaled: [B H n, c, d] as the blocks need them."""
        return (_padded_range(None, q, 0, t0, t1, ct) * q.shape[-1] ** -0.5).reshape(-1, c, q.shape[-1])

    @staticmethod
    def _probs(qb, kb, real, add, t0, t1, c, span, masked, B, H):
        """Probabilities of the queries t0..t1 (whole blocks; qb [B H n, c, d] scaled) against their key blocks kb
        [B H n, K, d]: [B, H, n, c, K], and the key_mask's mask of the blocks' keys [B, 1, n, 1, K] (None without
        key_mask)."""
        n, K = (t1 - t0) // c, c + span
        term = add[:, None]                                                       # [H, 1, c, K]
        r = real[:, None, t0:t1 + span].unfold(2, K, c)[:, :, :, None] if masked else None  # [B', 1, n, 1, K]
        if r is not None and r.shape[0] == 1:                                     # padding only: one mask for all
            term, r = term.masked_fill(~r[0], torch.finfo(add.dtype).min), None   # [H, n, c, K]
        s = torch.bmm(qb, kb.mT).view(B, H, n, c, K).add_(term)                   # [B, H, n, c, K]
        if r is not None:
            s.masked_fill_(~r, torch.finfo(s.dtype).min)
        return torch.softmax(s, dim=-1), r

    @staticmethod
    def _masked(real, key_mask, t0, t1, span, front, T, window):
        """Whether keys of the chunk t0..t1 can be padding (or masked). In eager mode on CPU a key_mask that is all
        True over the chunk's keys counts as none (the common case inside long documents: no masking pass); on CUDA
        asking would synchronise, and under torch.compile it would break the graph, so any key_mask counts there."""
        if t0 < front or t1 + span > window - 1 + T:
            return True
        if key_mask is None:
            return False
        if key_mask.device.type != "cpu" or torch.compiler.is_compiling():
            return True
        return not bool(real[:, t0:t1 + span].all())

    @staticmethod
    def forward(ctx, q, k, v, prefix_k, prefix_v, bias, key_mask, window, causal, chunk, dropout=0.0, seed=0):
        """The chunked forward; its arguments are stated on `lavo_zoo.attention.ops.window.window_attention`
        (``prefix_k`` and ``prefix_v``: the prefix's keys and values, or None; ``dropout`` p already 0 outside
        training, its mask drawn from ``seed``)."""
        B, H, T, d = q.shape
        ct, c, span, _, front, _, real, add, _, index = WindowAttentionFunction._setup(
            q, prefix_k, bias, key_mask, window, causal)
        out = heads_major_empty(B, H, T, d, q, ct)
        for t0, t1 in chunks(T, window, chunk):
            e = min(t1, T)
            masked = WindowAttentionFunction._masked(real, key_mask, t0, t1, span, front, T, window)
            qb = WindowAttentionFunction._queries(q, t0, t1, c, ct)   # [B H n, c, d]
            kb = WindowAttentionFunction._blocks(prefix_k, k, front, t0, t1, c, span, ct)  # [B H n, K, d]
            p = WindowAttentionFunction._probs(qb, kb, real, add, t0, t1, c, span, masked, B, H)[0]
            if dropout:
                p = p * _blocked_keep(seed, t0, t1, B, H, window, c, index, dropout, q.device, ct)
            vb = WindowAttentionFunction._blocks(prefix_v, v, front, t0, t1, c, span, ct)
            out[:, :, t0:e] = torch.bmm(p.flatten(0, 2), vb).view(B, H, t1 - t0, d)[:, :, :e - t0]
        ctx.save_for_backward(q, k, v, prefix_k, prefix_v, bias, key_mask)
        ctx.config = (window, causal, chunk, dropout, seed)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, prefix_k, prefix_v, bias, key_mask = ctx.saved_tensors
        window, causal, chunk, dropout, seed = ctx.config
        need = ctx.needs_input_grad
        B, H, T, d = q.shape
        ct, c, span, _, front, L, real, add, inside, index = WindowAttentionFunction._setup(
            q, prefix_k, bias, key_mask, window, causal)
        K = c + span
        dq = torch.empty_like(q, dtype=ct) if need[0] else None                  # [B, H, T, d] in q's layout
        dkp = heads_major_empty(B, H, L, d, q, ct).zero_()                        # [B, H, L, d] padded positions
        dvp = heads_major_empty(B, H, L, d, q, ct).zero_()
        dadd = torch.zeros(H, c, K, dtype=ct, device=q.device) if bias is not None and need[5] else None
        for t0, t1 in chunks(T, window, chunk):
            n = (t1 - t0) // c
            masked = WindowAttentionFunction._masked(real, key_mask, t0, t1, span, front, T, window)
            qb = WindowAttentionFunction._queries(q, t0, t1, c, ct)   # [B H n, c, d]
            kb = WindowAttentionFunction._blocks(prefix_k, k, front, t0, t1, c, span, ct)  # [B H n, K, d]
            vb = WindowAttentionFunction._blocks(prefix_v, v, front, t0, t1, c, span, ct)
            p, r = WindowAttentionFunction._probs(qb, kb, real, add, t0, t1, c, span, masked, B, H)
            gb = _padded_range(None, grad, 0, t0, t1, ct).reshape(-1, c, d)       # [B H n, c, d]
            dp = torch.bmm(gb, vb.mT).view_as(p)                                  # [B, H, n, c, K]
            kept = p
            if dropout:  # the forward's mask, regenerated: P Z multiplied V, so dP = (dO V^T) Z
                z = _blocked_keep(seed, t0, t1, B, H, window, c, index, dropout, q.device, ct)
                kept, dp = p * z, dp.mul_(z)
                del z
            dvb = torch.bmm(kept.view(-1, c, K).mT, gb).view(B, H, n, K, d)
            ds = torch._softmax_backward_data(dp, p, -1, ct)                      # [B, H, n, c, K]
            del p, kept, dp
            if r is not None:  # rows whose keys are all masked (padded queries): no gradient through them
                ds.masked_fill_(~r, 0)
            if dadd is not None:
                dadd += ds.sum(0).sum(1)  # far faster than one sum over (0, 2)
            if dq is not None:
                e = min(t1, T)
                dq[:, :, t0:e] = torch.bmm(ds.view(-1, c, K), kb).view(B, H, t1 - t0, d)[:, :, :e - t0]
            dkb = torch.bmm(ds.view(-1, c, K).mT, qb).view(B, H, n, K, d)
            for full, blocks in ((dkp, dkb), (dvp, dvb)):  # block j's key slot i is padded position t0 + j c + i
                if n <= math.ceil(K / c):  # few blocks of many keys (large windows): one add per block
                    for j in range(n):
                        full[:, :, t0 + j * c:t0 + j * c + K] += blocks[:, :, j]
                    continue
                for i in range(0, K, c):  # many blocks of few keys: slots i..i+c of every block at once
                    m = min(c, K - i)
                    full[:, :, t0 + i:t0 + i + n * c].unflatten(2, (n, c))[:, :, :, :m] += blocks[:, :, :, i:i + m]
        scale = d ** -0.5
        dq = dq.mul_(scale).to(q.dtype) if dq is not None else None
        dk = dkp[:, :, window - 1:window - 1 + T].to(k.dtype)   # qb was scaled
        dv = dvp[:, :, window - 1:window - 1 + T].to(v.dtype)
        dpk = dkp[:, :, front:window - 1].to(prefix_k.dtype) if prefix_k is not None else None
        dpv = dvp[:, :, front:window - 1].to(prefix_v.dtype) if prefix_v is not None else None
        dbias = None
        if dadd is not None:
            dbias = torch.zeros_like(bias, dtype=ct).index_add_(1, index[inside], dadd[:, inside]).to(bias.dtype)
        return dq, dk, dv, dpk, dpv, dbias, None, None, None, None, None, None


def chunks(T: int, window: int, chunk: int) -> list[tuple[int, int]]:
    """The query ranges [t0, t1) that :class:`WindowAttentionFunction` computes at a time: whole blocks of
    :func:`query_block` queries (the last block padded past T), about ``chunk`` queries each."""
    c = query_block(window)
    n_all, step = math.ceil(T / c) * c, max(1, chunk // c) * c
    return [(t0, min(n_all, t0 + step)) for t0 in range(0, n_all, step)]


def chunk_keep(seed: int, t0: int, t1: int, B: int, H: int, window: int, p: float, device: torch.device,
               dtype: torch.dtype) -> torch.Tensor:
    """The dropout factor of the recompute kernel's queries t0..t1 (a chunk of :func:`chunks`), in band form:
    [B, H, t1 - t0, 2w - 1], one factor per relative key offset s - t + w - 1 (causal windows use the first w).

    Args:
        seed: the call's seed.
        t0: the chunk's first query.
        t1: the query after the chunk's last.
        B: the batch size.
        H: the heads.
        window: w.
        p: the dropout probability.
        device: where the mask is drawn.
        dtype: the factor's dtype.
    """
    return keep_factor(seed, t0, (B, H, t1 - t0, 2 * window - 1), p, device, dtype)


def _blocked_keep(seed: int, t0: int, t1: int, B: int, H: int, window: int, c: int, index: torch.Tensor, p: float,
                  device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """:func:`chunk_keep` laid out as the chunk's probabilities [B, H, n, c, K]: (query i, key slot j) of a block
    has the relative offset j - i (``index`` [c, K] of :func:`_band`, clamped: slots outside the window have zero
    probability whatever their factor)."""
    band = chunk_keep(seed, t0, t1, B, H, window, p, device, dtype).unflatten(2, ((t1 - t0) // c, c))
    return band.gather(-1, index.expand(*band.shape[:-1], index.shape[-1]))


def dropout_band(seed: int, B: int, H: int, T: int, window: int, p: float, chunk: int = CHUNK,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The whole dropout mask of a recompute-kernel call with this seed, p and ``chunk`` on T queries: [B, H, T, 2w-1]
    factors (0 dropped, 1 / (1 - p) kept) of each query's relative key offset s - t + w - 1, as
    :func:`window_autograd`'s ``keep`` takes it (the tests' reference).

    Args:
        seed: the call's seed.
        B: the batch size.
        H: the heads.
        T: the queries.
        window: w.
        p: the dropout probability.
        chunk: the call's ``chunk`` (the chunks' first queries pick their masks).
        device: where the mask is drawn.
        dtype: the factor's dtype.
    """
    device = torch.device(device)
    return torch.cat([chunk_keep(seed, t0, t1, B, H, window, p, device, dtype) for t0, t1 in chunks(T, window, chunk)],
                     2)[:, :, :T]
