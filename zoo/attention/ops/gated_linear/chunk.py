"""The gated linear attention in chunks (flash-linear-attention's ``chunk`` layout, in PyTorch): the op's
``chunk`` kernel, on every device and dtype, and its fallback (the op: :mod:`lavo_zoo.attention.ops.gated_linear`).

The sequence in chunks of C tokens; inside a chunk the C x C causal products of queries and keys weighted by the
decay between them (no T x T matrix anywhere), across chunks the state, carried by one short loop over the T / C
chunks. Cost O(T C (K + V) + T K V), memory O(T (K + V) + (T / C) K V). The token-by-token recurrence is
:mod:`.naive`.

Numerics: every decay factor is exp of a difference of within-chunk cumulative log decays. One gate per head
(``g`` [B, H, T]) gives the C x C factor matrix exp(b_i - b_j) directly, masked to j <= i before the exp, so every
factor is <= 1. A gate per key channel (``g`` [B, H, T, K]) cannot form that [C, C, K] tensor cheaply; the queries
and keys are scaled by exp(b_i - b_m) and exp(b_m - b_j) around the chunk's middle token m, so a factor exceeds 1
only across half a chunk: with the default 32-token chunks, fp32 overflows only if a channel's log decay averages
below -5.5 per token over 16 tokens (GLA's gate, logsigmoid / 16, reaches that only for gate logits below -88).
The sums run in fp32 (fp64 for fp64 inputs), autocast off.
"""
from __future__ import annotations

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops.chunking import split_chunks


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
    q, k, v = split_chunks(q, n, C), split_chunks(k, n, C), split_chunks(v, n, C)  # [B, H, n, C, .]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    if g is None:
        scores = (q @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)  # [B, H, n, C, C]
        q_in, k_out, decay = q, k, None
    elif g.dim() == 3:  # one gate per head
        b = split_chunks(g, n, C).cumsum(-1)  # [B, H, n, C] inclusive cumulative log decay
        diff = (b[..., :, None] - b[..., None, :]).masked_fill(~causal, float("-inf"))
        scores = (q @ k.transpose(-1, -2)) * diff.exp()
        q_in = q * b.exp()[..., None]
        k_out = k * (b[..., -1:] - b).exp()[..., None]
        decay = b[..., -1].exp()[..., None, None]  # [B, H, n, 1, 1]
    else:  # one gate per key channel
        b = split_chunks(g, n, C).cumsum(-2)  # [B, H, n, C, K]
        mid = b[..., C // 2: C // 2 + 1, :]
        scores = ((q * (b - mid).exp()) @ (k * (mid - b).exp()).transpose(-1, -2)).masked_fill(~causal, 0.0)
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
