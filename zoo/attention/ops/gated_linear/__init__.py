"""Gated linear attention, the op of ``based`` (no gate), ``gla`` (a gate per key channel) and ``mamba2`` (one gate
per head): a matrix state S [K, V] per head, decayed and written at every token and read by the queries,

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,      o_t = S_t^T q_t                     (g_t <= 0: log decays)

computed here in its chunked form (flash-linear-attention's ``chunk`` layout, in PyTorch): the sequence in chunks
of C tokens; inside a chunk the C x C causal products of queries and keys weighted by the decay between them
(no T x T matrix anywhere), across chunks the state, carried by one short loop over the T / C chunks. Cost
O(T C (K + V) + T K V), memory O(T (K + V) + (T / C) K V). The token-by-token recurrence is :mod:`.naive`.

Numerics: every decay factor is exp of the sum of the log decays between two tokens of a chunk, summed from the decays
themselves (:func:`segment_sums`, :func:`suffix_sums`): a difference of cumulative sums, b_i - b_j, loses the weak
decays that follow a strong one to rounding. One gate per head (``g`` [B, H, T]) gives the C x C factor matrix directly,
-inf above the diagonal before the exp, so every factor is <= 1. A gate per key channel (``g`` [B, H, T, K]) cannot form
that [C, C, K] tensor cheaply; the queries and keys are scaled by exp(b_i - b_m) and exp(b_m - b_j) around the chunk's
middle token m, which is exact while exp(+-(the most a channel decays across a chunk)) is finite (half the log of the
dtype's largest number: 44 in fp32, a mean log decay below -1.4 per token over 32 tokens to exceed it; GLA's gate,
logsigmoid / 16, reaches that only for gate logits below -22). A chunk that decays more (a small
``gate_logit_normalizer``, inputs far outside the unit scale) takes the stable form, :func:`_channel_scores`, whose
every factor is <= 1 as it is computed (sub-chunks of 16 tokens, flash-linear-attention's layout; about ten times slower
on a CPU), so the chunked form is finite wherever the token-by-token recurrence is. The sums run in fp32 (fp64 for fp64
inputs), autocast off.

Kernels, declared for the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) as the op :data:`GATED_LINEAR` and the
set its mechanisms choose from, :data:`GATED_LINEAR_KERNELS` (a layer's ``kernels`` option: 'auto', 'fla' or
'chunk'):

- ``chunk`` (:func:`chunk_gated_linear`, this module): every device and dtype; the fallback.
- ``fla`` (:func:`~lavo_zoo.attention.ops.fla.fla_chunk_gated_linear`): flash-linear-attention's Triton kernels on
  CUDA where fla is installed and covers the call (:mod:`lavo_zoo.attention.ops.fla`); 'auto' takes them under the
  dispatch's Triton rule, a request for them anywhere.
"""
from __future__ import annotations

import math

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops import dispatch, fla
from lavo_zoo.attention.ops.dispatch import Kernel, KernelSet, Op


def _chunks(t: torch.Tensor, n: int, C: int) -> torch.Tensor:
    """[B, H, T, ...] zero-padded to n * C tokens -> [B, H, n, C, ...]."""
    pad = n * C - t.shape[2]
    if pad:
        t = torch.cat([t, t.new_zeros(*t.shape[:2], pad, *t.shape[3:])], 2)
    return t.unflatten(2, (n, C))


def chunk_gated_linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None,
                       state: torch.Tensor | None = None, chunk_size: int = 64
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated linear recurrence in chunks.

    Args:
        q: queries [B, H, T, K] (any scale already applied).
        k: keys [B, H, T, K].
        v: values [B, H, T, V].
        g: log decays (<= 0): [B, H, T] (one per head), [B, H, T, K] (one per key channel) or None (no decay).
        state: the state before the first token [B, H, K, V] (None: zeros).
        chunk_size: tokens per chunk C.

    Returns:
        (o [B, H, T, V], the state after the last token [B, H, K, V]), in the inputs' compute dtype (fp32 for half
        inputs).
    """
    dtype = compute_dtype(q.dtype)
    with torch.autocast(q.device.type, enabled=False):
        return _chunk(q.to(dtype), k.to(dtype), v.to(dtype), None if g is None else g.to(dtype),
                      None if state is None else state.to(dtype), chunk_size)


def _chunk(q, k, v, g, state, C):
    B, H, T, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, K, V) if state is None else state
    if T == 0:
        return v.new_zeros(B, H, 0, V), S
    C = min(C, T)
    n = -(-T // C)
    q, k, v = _chunks(q, n, C), _chunks(k, n, C), _chunks(v, n, C)  # [B, H, n, C, .]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    if g is None:
        scores = (q @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)  # [B, H, n, C, C]
        q_in, k_out, decay = q, k, None
    elif g.dim() == 3:  # one gate per head
        g = _chunks(g, n, C)
        b = g.cumsum(-1)  # [B, H, n, C] inclusive cumulative log decay
        scores = (q @ k.transpose(-1, -2)) * segment_sums(g, -1).exp()  # [B, H, n, C, C], exp(-inf) = 0 above
        q_in = q * b.exp()[..., None]
        k_out = k * suffix_sums(g, -1).exp()[..., None]
        decay = b[..., -1].exp()[..., None, None]  # [B, H, n, 1, 1]
    else:  # one gate per key channel
        g = _chunks(g, n, C)
        b = g.cumsum(-2)  # [B, H, n, C, K]
        spread = float((b[..., 0, :] - b[..., -1, :]).max().detach())  # the most a channel decays across a chunk
        if spread <= math.log(torch.finfo(q.dtype).max) / 2:  # exp(+-spread) is finite: the fast form is exact
            mid = b[..., C // 2: C // 2 + 1, :]
            scores = ((q * (b - mid).exp()) @ (k * (mid - b).exp()).transpose(-1, -2)).masked_fill(~causal, 0.0)
        else:
            scores = _channel_scores(q, k, g)
        q_in = q * b.exp()
        k_out = k * suffix_sums(g, -2).exp()
        decay = b[..., -1, :].exp()[..., None]  # [B, H, n, K, 1]
    o = scores @ v  # [B, H, n, C, V] within the chunk
    writes = k_out.transpose(-1, -2) @ v  # [B, H, n, K, V] each chunk's contribution to the state at its end
    before = []
    # unbind (not index) so that backward is one stack, not a full-size zero tensor per chunk
    decays = [None] * n if decay is None else decay.unbind(2)
    for write, a in zip(writes.unbind(2), decays):  # the state entering each chunk
        before.append(S)
        S = (S if a is None else a * S) + write
    o = o + q_in @ torch.stack(before, 2)
    return o.flatten(2, 3)[:, :, :T], S


def segment_sums(g: torch.Tensor, dim: int) -> torch.Tensor:
    """The log decay between every two tokens of a chunk, as sums of the decays themselves: S_ij = sum_{j < t <= i}
    g_t (-inf for j > i), so that exp(S) is each decay factor, 0 above the diagonal. Differences of cumulative sums
    (b_i - b_j) would lose the weak decays that follow a strong one to rounding (after one token of -1e6, every later
    factor of a float32 chunk was a few percent off).

    Args:
        g: log decays with the chunk's tokens along ``dim``: [..., C] (dim -1) or [..., C, K] (dim -2).
        dim: -1 or -2.

    Returns:
        [..., C, C] (dim -1) or [..., C, C, K] (dim -2).
    """
    C = g.shape[dim]
    later = torch.ones(C, C, dtype=torch.bool, device=g.device).tril(-1)  # [t, j]: t > j
    upto = torch.ones(C, C, dtype=torch.bool, device=g.device).tril()  # [i, j]: i >= j
    if dim == -2:
        later, upto = later[..., None], upto[..., None]
    x = g.unsqueeze(dim)
    x = x.expand(*x.shape[:dim], C, *x.shape[dim:][1:])  # x[..., t, j(, K)] = g_t
    return x.masked_fill(~later, 0.0).cumsum(dim - 1).masked_fill(~upto, float("-inf"))


def suffix_sums(g: torch.Tensor, dim: int) -> torch.Tensor:
    """sum_{t > i} g_t for every token i along ``dim`` (the decay from i to the end of the chunk), summed from the
    end, never as a difference of cumulative sums (see :func:`segment_sums`)."""
    inclusive = g.flip(dim).cumsum(dim).flip(dim)
    return torch.cat([inclusive.narrow(dim, 1, g.shape[dim] - 1), torch.zeros_like(g.narrow(dim, 0, 1))], dim)


SUB_CHUNK = 16  # tokens per sub-chunk of a chunk's per-channel decay factors (at most; a divisor of the chunk)


def _channel_scores(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """A chunk's causal scores under a decay per key channel, every factor <= 1 as it is computed, so that no decay
    overflows however strong (flash-linear-attention's sub-chunk layout):

        scores_ij = sum_K q_iK k_jK exp(sum_{j < t <= i} g_tK)

    The chunk's C tokens are cut into sub-chunks of c (:data:`SUB_CHUNK`, a divisor of C). A query's sub-chunk s
    reads the keys of an earlier sub-chunk u through the start of s: q_i scaled by the decay from the start of s to
    i, k_j by the decay from j to the start of s, both <= 1 (one [c, K] product per pair of sub-chunks); within a
    sub-chunk the factors are formed one by one ([c, c, K], :func:`segment_sums`). Every exponent is a sum of
    decays, never a difference.

    Args:
        q, k: [B, H, n, C, K]; g: the log decays [B, H, n, C, K].

    Returns:
        scores [B, H, n, C, C], zero above the diagonal.
    """
    C = q.shape[-2]
    c = math.gcd(C, SUB_CHUNK)
    m = C // c
    qs, ks, gs = (t.unflatten(-2, (m, c)) for t in (q, k, g))  # [.., C, K] -> [.., m, c, K]
    into = gs.cumsum(-2)  # [.., m, c, K] the decay from the start of each sub-chunk to each of its tokens
    # from key j of sub-chunk u to the start of sub-chunk s > u: the rest of u, then the whole sub-chunks between
    between = segment_sums(gs.sum(-2), -2)  # [.., m, m, K]: over the sub-chunks w, u < w <= a
    between = torch.cat([torch.full_like(between[..., :1, :, :], float("-inf")), between[..., :-1, :, :]], -3)
    k_across = ks.unsqueeze(-4) * (suffix_sums(gs, -2).unsqueeze(-4) + between.unsqueeze(-2)).exp()  # [.., s, u, c, K]
    across = (qs * into.exp()).unsqueeze(-3) @ k_across.transpose(-1, -2)  # [.., s, u, c, c]
    diagonal = (qs.unsqueeze(-2) * ks.unsqueeze(-3) * segment_sums(gs, -2).exp()).sum(-1)  # [.., m, c, c]
    blocks = across + torch.eye(m, dtype=q.dtype, device=q.device)[:, :, None, None] * diagonal.unsqueeze(-3)
    return blocks.transpose(-3, -2).flatten(-4, -3).flatten(-2, -1)  # [.., s, c, u, c] -> [.., C, C]


# ------------------------------------------------------------------------------------------- the dispatch's view
# No attention dropout here (no mechanism of this op has one): fla's kernels declare none, so a call with dropout in
# training would take the PyTorch form.
CHUNK = Kernel("chunk", chunk_gated_linear)
FLA = Kernel("fla", fla.fla_chunk_gated_linear, runs=fla.runs, auto=dispatch.triton_auto, dropout=False,
             compiled=True, applies=fla.gated_linear_applies)
GATED_LINEAR = Op("gated_linear", (FLA, CHUNK), fallback=CHUNK)
GATED_LINEAR_KERNELS = KernelSet("gated_linear", gated_linear=GATED_LINEAR)
