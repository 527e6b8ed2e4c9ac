"""The PyTorch kernels of the binding memory's read (docs/lavo.md, "The binding memory"): one with a backward that
recomputes (``recompute``) and one left to autograd (``autograd``), beside the paper's memory's in ``read.py``. No
Triton kernel reads this memory: the dispatch's declared limit sends such a call to these (``ops.paper_memory``).

Per head, a memory row is an [r, d] matrix M (row i: the mean of the features weighted by the keys' projections on
basis b_i), and query q reads it by the same softmax over the r bases as the paper's read, each basis now keyed by
itself and valued by its row of M:

    s_i = scale (b_i . q)        p = softmax(s)        o = sum_i p_i M_i = p^T M

Queries read different rows (context dissection: one per window; the running mean: one per token; noncausal and
cross: one per sequence): query t reads row (offset + t) // group, as the paper's read. The queries are laid out
[B, H, n, g, d], the g queries of each row together (padded at both ends), so that every row is read by one batched
[g, r] x [r, d] product and no [T, r, d] gather is made. Cost: about 2 r d multiply-adds per query, as the paper's.

:class:`BindingReadFunction` saves q, the rows and the bases and recomputes the [T, r] probabilities chunk by chunk
in backward (its dropout mask too, drawn once per call: :func:`~lavo_zoo.attention.lavo.read.dropout_slots` with one
chunk of T materialises it); :func:`read_binding_autograd` is the same computation left to autograd.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops.dropout import keep_factor
from lavo_zoo.attention.ops.window import CHUNK


def _layout(T: int, n: int, offset: int, group: int) -> tuple[int, int, int, int]:
    """(first row, rows read, queries per row g, queries padded in front) of T queries reading n rows: query t
    reads row (offset + t) // group (every query the one row when n == 1)."""
    if n == 1:
        return 0, 1, T, 0
    r0, a = divmod(offset, group)
    return r0, math.ceil((a + T) / group), group, a


def _grouped(t: torch.Tensor, rows: int, g: int, a: int) -> torch.Tensor:
    """t [B, H, T, x] -> [B, H, rows, g, x], a zeros in front and zeros at the end (a copy only where padded)."""
    end = rows * g - a - t.shape[2]
    if a or end:
        t = F.pad(t, (0, 0, a, end))
    return t.unflatten(2, (rows, g))


def _ungrouped(t: torch.Tensor, T: int, a: int) -> torch.Tensor:
    """[B, H, rows, g, x] -> [B, H, T, x]: the real queries (a view)."""
    return t.flatten(2, 3)[:, :, a:a + T]


def _parts(rows: int, g: int, chunk: int) -> list[tuple[slice, slice]]:
    """(rows, queries of a row) slices of about ``chunk`` queries each: whole rows, or for one row (noncausal and
    cross attention) slices of its queries."""
    if rows == 1:
        return [(slice(0, 1), slice(t0, min(g, t0 + chunk))) for t0 in range(0, g, chunk)]
    step = max(1, chunk // g)
    return [(slice(j, min(rows, j + step)), slice(None)) for j in range(0, rows, step)]


def _keep(seed: int, B: int, H: int, T: int, r: int, p: float, like: torch.Tensor, dtype: torch.dtype
          ) -> torch.Tensor:
    """The call's dropout factor on the slot probabilities: [B, H, T, r], one draw per call (``read.dropout_slots``
    with ``chunk`` = T gives the same)."""
    return keep_factor(seed, 0, (B, H, T, r), p, like.device, dtype)


class BindingReadFunction(torch.autograd.Function):
    """forward(q [B, H, T, d], mem [B, H, n, r, d], bases [H, r, d], offset, group, chunk, dropout, seed) ->
    [B, H, T, d] in the compute dtype; saves q, mem and bases, and backward recomputes each chunk of about ``chunk``
    queries (the same ops as :func:`read_binding_autograd`), its dropout factor included."""

    @staticmethod
    def forward(ctx, q, mem, bases, offset, group, chunk, dropout=0.0, seed=0):
        """The chunked forward; its arguments are stated on `read_binding`."""
        B, H, T, _ = q.shape
        ct = compute_dtype(q.dtype)
        r0, rows, g, a = _layout(T, mem.shape[2], offset, group)
        b = bases.to(ct)                                                          # [H, r, d]
        qg = _grouped(q.to(ct), rows, g, a)                                       # [B, H, rows, g, d]
        m = mem[:, :, r0:r0 + rows].to(ct)                                        # [B, H, rows, r, d]
        keep = _grouped(_keep(seed, B, H, T, bases.shape[1], dropout, q, ct), rows, g, a) if dropout else None
        res = torch.empty(B, H, rows * g, q.shape[-1], dtype=ct, device=q.device)   # [B, H, N, d]
        out = res.unflatten(2, (rows, g))                                         # a view to write the rows into
        scale = q.shape[-1] ** -0.5
        for ns, gs in _parts(rows, g, chunk):
            p = torch.softmax((qg[:, :, ns, gs] @ b.mT[:, None]) * scale, dim=-1)  # [B, H, n', g', r]
            if keep is not None:
                p = p * keep[:, :, ns, gs]
            out[:, :, ns, gs] = p @ m[:, :, ns]                                   # [B, H, n', g', d]
        ctx.save_for_backward(q, mem, bases)
        ctx.config = (offset, group, chunk, dropout, seed)
        return res if rows * g == T else res[:, :, a:a + T].clone()   # a fresh tensor: the caller may write into it

    @staticmethod
    def backward(ctx, grad):
        """Per chunk: recompute p (and the dropout factor Z), then o = (p Z) M, p = softmax(s), s = scale q B^T
        differentiated by hand; the bases' gradient sums over the batch."""
        q, mem, bases = ctx.saved_tensors
        offset, group, chunk, dropout, seed = ctx.config
        need = ctx.needs_input_grad
        B, H, T, _ = q.shape
        ct = compute_dtype(q.dtype)
        scale = q.shape[-1] ** -0.5
        r0, rows, g, a = _layout(T, mem.shape[2], offset, group)
        b = bases.to(ct)
        qg = _grouped(q.to(ct), rows, g, a)
        go = _grouped(grad.to(ct), rows, g, a)                                    # [B, H, rows, g, d]
        m = mem[:, :, r0:r0 + rows].to(ct)
        keep = _grouped(_keep(seed, B, H, T, bases.shape[1], dropout, q, ct), rows, g, a) if dropout else None
        dq = torch.zeros_like(qg) if need[0] else None
        dm = torch.zeros_like(m) if need[1] else None
        db = torch.zeros_like(b) if need[2] else None
        for ns, gs in _parts(rows, g, chunk):
            qc, gc = qg[:, :, ns, gs], go[:, :, ns, gs]
            p = torch.softmax((qc @ b.mT[:, None]) * scale, dim=-1)               # [B, H, n', g', r]
            dp = gc @ m[:, :, ns].mT                                              # d(p Z): [B, H, n', g', r]
            kept = p
            if keep is not None:
                z = keep[:, :, ns, gs]
                dp, kept = dp * z, p * z
            if dm is not None:
                dm[:, :, ns] += kept.mT @ gc                                      # [B, H, n', r, d]
            ds = torch._softmax_backward_data(dp, p, -1, ct).mul_(scale)          # d s
            if dq is not None:
                dq[:, :, ns, gs] = ds @ b[:, None]
            if db is not None:
                db += torch.einsum("bhngr,bhngd->hrd", ds, qc)
        dmem = None
        if dm is not None:
            dmem = torch.zeros(mem.shape, dtype=ct, device=mem.device)
            dmem[:, :, r0:r0 + rows] = dm
            dmem = dmem.to(mem.dtype)
        return (None if dq is None else _ungrouped(dq, T, a).to(q.dtype), dmem,
                None if db is None else db.to(bases.dtype), None, None, None, None, None)


def read_binding(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, offset: int = 0, group: int = 1,
                 chunk: int | None = None, dropout: float = 0.0, seed: int = 0) -> torch.Tensor:
    """q [B, H, T, d] reads the binding memory's rows mem [B, H, n, r, d] (query t: row (offset + t) // group; n == 1:
    the one row) through bases [H, r, d]; [B, H, T, d] in the compute dtype. Saves no [T, r] tensor for backward.

    Args:
        q: [B, H, T, d] queries.
        mem: [B, H, n, r, d] the binding memory's rows, an [r, d] matrix each.
        bases: [H, r, d] orthonormal rows per head (the slots' keys).
        offset: the position of query 0 within its memory group (context dissection: the position in the window).
        group: queries per memory row (context dissection: the window w; 1: one row per query).
        chunk: queries recomputed at a time (None: ``CHUNK``).
        dropout: attention dropout p on the slot probabilities (0: none).
        seed: the seed of the dropout mask (:func:`~lavo_zoo.attention.ops.dropout.keep_factor`), redrawn in backward.
    """
    return BindingReadFunction.apply(q, mem, bases, offset, group, chunk or CHUNK, dropout, seed)


def read_binding_autograd(q: torch.Tensor, mem: torch.Tensor, bases: torch.Tensor, offset: int = 0, group: int = 1,
                          dropout: float = 0.0, training: bool = False, keep: torch.Tensor | None = None
                          ) -> torch.Tensor:
    """:func:`read_binding` differentiated by autograd (keeps the [T, r] probabilities), with attention dropout:
    torch's (``dropout`` in ``training``) or the factors ``keep`` [B, H, T, r] of a kernel's mask.

    Its other arguments are stated on `read_binding`.
    """
    T, d = q.shape[2:]
    ct = compute_dtype(q.dtype)
    r0, rows, g, a = _layout(T, mem.shape[2], offset, group)
    b = bases.to(ct)
    p = torch.softmax((q.to(ct) @ b.mT) * d ** -0.5, dim=-1)                     # [B, H, T, r]
    if keep is not None:
        p = p * keep.to(ct)
    elif dropout and training:
        p = F.dropout(p, dropout, training=True)
    return _ungrouped(_grouped(p, rows, g, a) @ mem[:, :, r0:r0 + rows].to(ct), T, a)   # [B, H, T, d]
