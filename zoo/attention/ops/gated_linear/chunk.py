"""The gated linear attention in chunks (flash-linear-attention's ``chunk`` layout, in PyTorch): the op's
``chunk`` kernel, on every device and dtype, and its fallback (the op: :mod:`lavo_zoo.attention.ops.gated_linear`).

The sequence in chunks of C tokens; inside a chunk the C x C causal products of queries and keys weighted by the
decay between them (no T x T matrix anywhere), across chunks the state, carried by one short loop over the T / C
chunks. Cost O(T C (K + V) + T K V), memory O(T (K + V) + (T / C) K V). The token-by-token recurrence is
:mod:`.naive`.

Numerics: every decay factor is exp of the sum of the log decays between two tokens of a chunk, summed from the decays
themselves (:mod:`~lavo_zoo.attention.ops.chunking`'s `segment_sums`, `suffix_sums`): a difference of cumulative sums,
b_i - b_j, loses the weak decays that follow a strong one to rounding. One gate per head (``g`` [B, H, T]) gives the C x
C factor matrix directly, -inf above the diagonal before the exp, so every factor is <= 1. A gate per key channel (``g``
[B, H, T, K]) cannot form that [C, C, K] tensor cheaply; the queries and keys are scaled by exp(b_i - b_m) and exp(b_m -
b_j) around the chunk's middle token m, which is exact while exp(+-(the most a channel decays across a chunk)) is finite
(half the log of the dtype's largest number: 44 in fp32, a mean log decay below -1.4 per token over 32 tokens to exceed
it; GLA's gate, logsigmoid / 16, reaches that only for gate logits below -22). A chunk that decays more (a small
``gate_logit_normalizer``, inputs far outside the unit scale) takes the stable form, :func:`_channel_scores`, whose
every factor is <= 1 as it is computed (sub-chunks of 16 tokens, flash-linear-attention's layout; about ten times slower
on a CPU), so the chunked form is finite wherever the token-by-token recurrence is. The sums run in fp32 (fp64 for fp64
inputs), autocast off.
"""
from __future__ import annotations

import math

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops.chunking import segment_sums, split_chunks, suffix_sums


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
    if T == 0 or B * H == 0:  # nothing to scan (the channel gate's spread below is a max over no elements)
        return v.new_zeros(B, H, T, V), S
    C = min(C, T)
    n = -(-T // C)
    q, k, v = split_chunks(q, n, C), split_chunks(k, n, C), split_chunks(v, n, C)  # [B, H, n, C, .]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    if g is None:
        scores = (q @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)  # [B, H, n, C, C]
        q_in, k_out, decay = q, k, None
    elif g.dim() == 3:  # one gate per head
        g = split_chunks(g, n, C)
        b = g.cumsum(-1)  # [B, H, n, C] inclusive cumulative log decay
        scores = (q @ k.transpose(-1, -2)) * segment_sums(g, -1).exp()  # [B, H, n, C, C], exp(-inf) = 0 above
        q_in = q * b.exp()[..., None]
        k_out = k * suffix_sums(g, -1).exp()[..., None]
        decay = b[..., -1].exp()[..., None, None]  # [B, H, n, 1, 1]
    else:  # one gate per key channel
        g = split_chunks(g, n, C)
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
        q: queries [B, H, n, C, K], n chunks of C tokens.
        k: keys [B, H, n, C, K].
        g: the log decays [B, H, n, C, K].

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
