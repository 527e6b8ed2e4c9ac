"""Gated linear attention, the op of ``based`` (no gate), ``gla`` (a gate per key channel) and ``mamba2`` (one gate
per head): a matrix state S [K, V] per head, decayed and written at every token and read by the queries,

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,      o_t = S_t^T q_t                     (g_t <= 0: log decays)

computed here in its chunked form (flash-linear-attention's ``chunk`` layout, in PyTorch): the sequence in chunks
of C tokens; inside a chunk the C x C causal products of queries and keys weighted by the decay between them
(no T x T matrix anywhere), across chunks the state, carried by one short loop over the T / C chunks. Cost
O(T C (K + V) + T K V), memory O(T (K + V) + (T / C) K V). The token-by-token recurrence is :mod:`.naive`.

Numerics: every decay factor is exp of a difference of within-chunk cumulative log decays. One gate per head
(``g`` [B, H, T]) gives the C x C factor matrix exp(b_i - b_j) directly, masked to j <= i before the exp, so every
factor is <= 1. A gate per key channel (``g`` [B, H, T, K]) cannot form that [C, C, K] tensor cheaply; the queries
and keys are scaled by exp(b_i - b_m) and exp(b_m - b_j) around the chunk's middle token m, which is exact while
exp(+-(the most a channel decays across a chunk)) is finite (half the log of the dtype's largest number: 44 in
fp32, a mean log decay below -1.4 per token over 32 tokens to exceed it; GLA's gate, logsigmoid / 16, reaches that
only for gate logits below -22). A chunk that decays more (a small ``gate_logit_normalizer``, inputs far outside
the unit scale) takes the stable form, :func:`_channel_scores`, whose every factor is <= 1 as it is computed
(sub-chunks of 16 tokens, flash-linear-attention's layout; about ten times slower on a CPU), so the chunked form is
finite wherever the token-by-token recurrence is. The sums run in fp32 (fp64 for fp64 inputs), autocast off.

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
        b = _chunks(g, n, C).cumsum(-1)  # [B, H, n, C] inclusive cumulative log decay
        diff = (b[..., :, None] - b[..., None, :]).masked_fill(~causal, float("-inf"))
        scores = (q @ k.transpose(-1, -2)) * diff.exp()
        q_in = q * b.exp()[..., None]
        k_out = k * (b[..., -1:] - b).exp()[..., None]
        decay = b[..., -1].exp()[..., None, None]  # [B, H, n, 1, 1]
    else:  # one gate per key channel
        g = _chunks(g, n, C)
        b = g.cumsum(-2)  # [B, H, n, C, K]
        spread = float((b[..., 0, :] - b[..., -1, :]).max().detach())  # the most a channel decays across a chunk
        if spread <= math.log(torch.finfo(q.dtype).max) / 2:  # exp(+-spread) is finite: the fast form is exact
            mid = b[..., C // 2: C // 2 + 1, :]
            scores = ((q * (b - mid).exp()) @ (k * (mid - b).exp()).transpose(-1, -2)).masked_fill(~causal, 0.0)
        else:
            scores = _channel_scores(q, k, b, g)
        q_in = q * b.exp()
        k_out = k * (b[..., -1:, :] - b).exp()
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


SUB_CHUNK = 16  # tokens per sub-chunk of a chunk's per-channel decay factors (at most; a divisor of the chunk)


def _channel_scores(q: torch.Tensor, k: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """A chunk's causal scores under a decay per key channel, every factor exp(b_i - b_j) <= 1 (j <= i) as it is
    computed, so that no decay overflows however strong (flash-linear-attention's sub-chunk layout):

        scores_ij = sum_K q_iK k_jK exp(b_iK - b_jK)

    The chunk's C tokens are cut into sub-chunks of c (:data:`SUB_CHUNK`, a divisor of C). A query's sub-chunk s
    reads the keys of an earlier sub-chunk t through the decay at the start of s, r_s: q_i exp(b_i - r_s) and
    k_j exp(r_s - b_j), both <= 1 (one [c, K] product per pair of sub-chunks); within a sub-chunk the factors are
    formed one by one ([c, c, K], masked before the exp).

    Args:
        q, k: [B, H, n, C, K]; b: the inclusive cumulative log decays in each chunk [B, H, n, C, K]; g: the log
            decays themselves [B, H, n, C, K] (r_s = b at the first token of s less that token's decay).

    Returns:
        scores [B, H, n, C, C], zero above the diagonal.
    """
    C = q.shape[-2]
    c = math.gcd(C, SUB_CHUNK)
    m = C // c
    qs, ks, bs, gs = (t.unflatten(-2, (m, c)) for t in (q, k, b, g))  # [.., C, K] -> [.., m, c, K]
    r = bs[..., :1, :] - gs[..., :1, :]  # [.., m, 1, K] the cumulative decay before each sub-chunk
    # across sub-chunks t < s: [.., s, t, c, K]; the exponent is masked to -inf where t >= s before the exp
    earlier = torch.ones(m, m, dtype=torch.bool, device=q.device).tril(-1)[:, :, None, None]
    k_across = ks.unsqueeze(-4) * (r.unsqueeze(-3) - bs.unsqueeze(-4)).masked_fill(~earlier, float("-inf")).exp()
    across = (qs * (bs - r).exp()).unsqueeze(-3) @ k_across.transpose(-1, -2)  # [.., s, t, c, c]
    # within a sub-chunk: [.., m, c, c, K] factors, masked to j <= i before the exp
    causal = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()[:, :, None]
    within = (bs.unsqueeze(-2) - bs.unsqueeze(-3)).masked_fill(~causal, float("-inf")).exp()
    diagonal = (qs.unsqueeze(-2) * ks.unsqueeze(-3) * within).sum(-1)  # [.., m, c, c]
    blocks = across + torch.eye(m, dtype=q.dtype, device=q.device)[:, :, None, None] * diagonal.unsqueeze(-3)
    return blocks.transpose(-3, -2).flatten(-4, -3).flatten(-2, -1)  # [.., s, c, t, c] -> [.., C, C]


# ------------------------------------------------------------------------------------------- the dispatch's view
# No attention dropout here (no mechanism of this op has one): fla's kernels declare none, so a call with dropout in
# training would take the PyTorch form.
CHUNK = Kernel("chunk", chunk_gated_linear)
FLA = Kernel("fla", fla.fla_chunk_gated_linear, runs=fla.runs, auto=dispatch.triton_auto, dropout=False,
             compiled=True, applies=fla.gated_linear_applies)
GATED_LINEAR = Op("gated_linear", (FLA, CHUNK), fallback=CHUNK)
GATED_LINEAR_KERNELS = KernelSet("gated_linear", gated_linear=GATED_LINEAR)
