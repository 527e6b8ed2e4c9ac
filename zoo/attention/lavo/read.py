"""The PyTorch kernels of LAVO's orthogonal-memory read (docs/lavo.md, "Reading the orthogonal memory"): one with a
backward that recomputes (``recompute``) and one left to autograd (``autograd``). Their Triton counterpart is
``triton.py``; :func:`lavo_zoo.attention.lavo.ops.read` applies the reading's options and picks among the three.

Per head, query q reads the memory of mean feature m through the r bases B [r, d]:
H = B m, s = scale * H * (B q), p = softmax(s) over the r slots, o = B^T (p * H). Queries read different memories
(context dissection: one per window; the running mean without it: one per token; noncausal and cross: one per
sequence), so ``mem`` holds n rows and query t reads row (offset + t) // group.

:class:`MemoryReadFunction` saves only q, the memory rows and the bases and recomputes the [T, r] scores and
probabilities chunk by chunk in backward; with attention dropout it draws each chunk's mask from the call's seed and
regenerates it there (:func:`chunk_keep`). :func:`read_memory_autograd` is the same computation left to autograd
(torch's own dropout, or an explicit mask: the tests' reference, with :func:`dropout_slots` materialising a call's).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lavo_zoo.attention.common import compute_dtype, heads_major_empty
from lavo_zoo.attention.ops.dropout import keep_factor
from lavo_zoo.attention.ops.window import CHUNK

RMS_EPS = 1e-6  # memory_norm 'rms' reads m / sqrt(mean(m^2) + RMS_EPS) (ops.read; the Triton kernels alike)


def _read_core(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, rows: torch.Tensor | None,
               dropout: float = 0.0, training: bool = False, keep: torch.Tensor | None = None) -> torch.Tensor:
    """q [B, H, Tq, d] reads mem [B, H, m, d] (row ``rows[i]`` for query i; every query the one row when None);
    bases [H, r, d]. Dropout: ``keep`` [B, H, Tq, r] factors on the slot probabilities (0 or 1 / (1 - p)), else
    ``dropout`` with torch's mask in training. Returns [B, H, Tq, d] in the compute dtype."""
    ct = compute_dtype(q.dtype)
    b = bases.to(ct)                                          # [H, r, d]; matmuls on [B, H, N, d] broadcast it
    h = mem.to(ct) @ b.mT                                     # [B, H, m, r]   H = B m
    if rows is not None:
        h = h.index_select(2, rows)                           # [B, H, Tq, r]
    s = h * q.shape[-1] ** -0.5 * (q.to(ct) @ b.mT)           # [B, H, Tq, r]  s_i = scale H_i (b_i . q)
    p = torch.softmax(s, dim=-1)
    if keep is not None:
        p = p * keep.to(ct)
    elif dropout and training:
        p = F.dropout(p, dropout, training=True)
    return (p * h) @ b                                        # [B, H, Tq, d]  B^T (p * H)


def _rows(t0: int, t1: int, offset: int, group: int, n: int, device: torch.device
          ) -> tuple[int, int, torch.Tensor | None]:
    """Memory rows [r0, r1) that queries t0..t1-1 read, and each query's row relative to r0 (None: one row)."""
    if n == 1:
        return 0, 1, None
    r0, r1 = (offset + t0) // group, (offset + t1 - 1) // group + 1
    if group == 1:
        return r0, r1, None                                   # one row per query, aligned
    return r0, r1, (torch.arange(t0, t1, device=device) + offset) // group - r0


def chunk_keep(seed: int, t0: int, t1: int, B: int, H: int, r: int, p: float, device: torch.device,
               dtype: torch.dtype) -> torch.Tensor:
    """The dropout factor of the recompute read's queries t0..t1 (one chunk): [B, H, t1 - t0, r].

    Args:
        seed: the call's seed.
        t0: the chunk's first query.
        t1: the query after the chunk's last.
        B: the batch size.
        H: the heads.
        r: the bases (slots per query).
        p: the dropout probability.
        device: where the mask is drawn.
        dtype: the factor's dtype.
    """
    return keep_factor(seed, t0, (B, H, t1 - t0, r), p, device, dtype)


def dropout_slots(seed: int, B: int, H: int, T: int, r: int, p: float, chunk: int, device: torch.device | str = "cpu",
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The whole dropout mask of a recompute-read call with this seed, p and ``chunk`` on T queries: [B, H, T, r]
    factors (0 dropped, 1 / (1 - p) kept), as :func:`read_memory_autograd`'s ``keep`` takes it.

    Args:
        seed: the call's seed.
        B: the batch size.
        H: the heads.
        T: the queries.
        r: the bases (slots per query).
        p: the dropout probability.
        chunk: the call's ``chunk`` (the chunks' first queries pick their masks).
        device: where the mask is drawn.
        dtype: the factor's dtype.
    """
    device = torch.device(device)
    return torch.cat([chunk_keep(seed, t0, min(T, t0 + chunk), B, H, r, p, device, dtype)
                      for t0 in range(0, T, chunk)], 2)


class MemoryReadFunction(torch.autograd.Function):
    """forward(q [B, H, T, d], mem [B, H, n, d], bases [H, r, d], offset, group, chunk, dropout, seed) ->
    [B, H, T, d] (compute dtype, laid out [B, T, H, d]); saves q, mem and bases, and backward recomputes each chunk
    of ``chunk`` queries (the same ops as :func:`read_memory_autograd`), its dropout mask (:func:`chunk_keep` of
    ``seed``) included."""

    @staticmethod
    def forward(ctx, q, mem, bases, offset, group, chunk, dropout=0.0, seed=0):
        """The chunked forward; its arguments are stated on `read_memory`."""
        B, H, T, d = q.shape
        ct = compute_dtype(q.dtype)
        out = heads_major_empty(B, H, T, d, q, ct)
        for t0 in range(0, T, chunk):
            t1 = min(T, t0 + chunk)
            r0, r1, rows = _rows(t0, t1, offset, group, mem.shape[2], q.device)
            keep = chunk_keep(seed, t0, t1, B, H, bases.shape[1], dropout, q.device, ct) if dropout else None
            out[:, :, t0:t1] = _read_core(q[:, :, t0:t1], mem[:, :, r0:r1], bases, rows, keep=keep)
        ctx.save_for_backward(q, mem, bases)
        ctx.config = (offset, group, chunk, dropout, seed)
        return out

    @staticmethod
    def backward(ctx, grad):
        """Per chunk: recompute h, the projections, p and the dropout factor Z, then differentiate by hand
        (o = (p Z h) B, p = softmax(s), s = scale h (q B^T), h = mem B^T); the bases' gradient sums its three terms
        over the batch."""
        q, mem, bases = ctx.saved_tensors
        offset, group, chunk, dropout, seed = ctx.config
        need = ctx.needs_input_grad
        ct = compute_dtype(q.dtype)
        scale = q.shape[-1] ** -0.5
        b = bases.to(ct)                                                          # [H, r, d]
        dq = torch.empty_like(q) if need[0] else None
        dmem = torch.zeros(mem.shape, dtype=ct, device=mem.device) if need[1] or need[2] else None
        dbases = torch.zeros(bases.shape, dtype=ct, device=bases.device) if need[2] else None
        for t0 in range(0, q.shape[2], chunk):
            t1 = min(q.shape[2], t0 + chunk)
            r0, r1, rows = _rows(t0, t1, offset, group, mem.shape[2], q.device)
            qc, go = q[:, :, t0:t1].to(ct), grad[:, :, t0:t1].to(ct)              # [B, H, Tq, d]
            h = mem[:, :, r0:r1].to(ct) @ b.mT                                    # [B, H, m, r]
            hr = h.index_select(2, rows) if rows is not None else h               # [B, H, Tq or 1, r]
            qr = qc @ b.mT                                                        # [B, H, Tq, r]
            p = torch.softmax(hr * scale * qr, dim=-1)                            # [B, H, Tq, r]
            du = go @ b.mT                                                        # [B, H, Tq, r]  d(p Z h)
            dp, kept = du * hr, p
            if dropout:  # the forward's mask, regenerated
                z = chunk_keep(seed, t0, t1, q.shape[0], q.shape[1], bases.shape[1], dropout, q.device, ct)
                dp, kept = dp.mul_(z), p * z
            ds = torch._softmax_backward_data(dp, p, -1, ct).mul_(scale)          # d s / scale
            if dbases is not None:
                dbases += torch.einsum("bhtr,bhtd->hrd", kept * hr, go) + torch.einsum("bhtr,bhtd->hrd", ds * hr, qc)
            if dq is not None:
                dq[:, :, t0:t1] = (ds * hr) @ b
            if dmem is not None:
                dhr = du.mul_(kept).add_(ds.mul_(qr))                             # [B, H, Tq, r]
                if rows is not None:
                    dh = torch.zeros_like(h).index_add_(2, rows, dhr)
                else:
                    dh = dhr.sum(2, keepdim=True) if h.shape[2] == 1 else dhr     # [B, H, m, r]
                dmem[:, :, r0:r1] += dh @ b
                if dbases is not None:
                    dbases += torch.einsum("bhmr,bhmd->hrd", dh, mem[:, :, r0:r1].to(ct))
        return (dq, dmem.to(mem.dtype) if need[1] else None, dbases.to(bases.dtype) if need[2] else None,
                None, None, None, None, None)


READ_ELEMENTS = CHUNK * 768  # numbers per [B, H, chunk, r] temporary of the read: CHUNK queries at B H r = 768


def read_chunk(B: int, H: int, r: int) -> int:
    """Queries per chunk of :class:`MemoryReadFunction`: about ``READ_ELEMENTS`` numbers per [B, H, chunk, r]
    temporary, never fewer than ``CHUNK`` queries (few heads and bases, e.g. LRA's 2 x 32: long chunks, fewer
    Python-level steps; GPT-2's 12 x 64: ``CHUNK``)."""
    return max(CHUNK, READ_ELEMENTS // max(1, B * H * r))


def read_memory(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, offset: int = 0, group: int = 1,
                chunk: int | None = None, dropout: float = 0.0, seed: int = 0) -> torch.Tensor:
    """q [B, H, T, d] reads mem [B, H, n, d] (query t: row (offset + t) // group; n == 1: the one row) through
    bases [H, r, d]; [B, H, T, d] in the compute dtype. Saves no [T, r] tensor for backward.

    Args:
        q: [B, H, T, d] queries.
        mem: [B, H, n, d] the memory's mean features, one row per group of queries.
        bases: [H, r, d] orthonormal rows per head.
        offset: the position of query 0 within its group (context dissection: the position in the window).
        group: queries per memory row (context dissection: the window w; 1: one row per query).
        chunk: queries recomputed at a time (None: :func:`read_chunk`).
        dropout: p > 0: the slot probabilities are dropped with the mask of ``seed`` (:func:`dropout_slots`).
        seed: the call's dropout seed.
    """
    if chunk is None:
        chunk = read_chunk(q.shape[0], q.shape[1], bases.shape[1])
    return MemoryReadFunction.apply(q, mem, bases, offset, group, chunk, dropout, seed)


def read_memory_autograd(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, offset: int = 0, group: int = 1,
                         dropout: float = 0.0, training: bool = False, keep: torch.Tensor | None = None
                         ) -> torch.Tensor:
    """:func:`read_memory` differentiated by autograd (keeps the [T, r] tensors), with attention dropout: torch's
    (``dropout`` in ``training``) or the factors ``keep`` [B, H, T, r] of a kernel's mask.

    Its other arguments are stated on `read_memory`.
    """
    _, _, rows = _rows(0, q.shape[2], offset, group, mem.shape[2], q.device)
    r0 = 0 if mem.shape[2] == 1 else offset // group
    return _read_core(q, mem[:, :, r0:], bases, rows, dropout, training, keep)
