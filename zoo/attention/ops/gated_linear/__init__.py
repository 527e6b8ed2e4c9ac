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
and keys are scaled by exp(b_i - b_m) and exp(b_m - b_j) around the chunk's middle token m, so a factor exceeds 1
only across half a chunk: with the default 32-token chunks, fp32 overflows only if a channel's log decay averages
below -5.5 per token over 16 tokens (GLA's gate, logsigmoid / 16, reaches that only for gate logits below -88).
The sums run in fp32 (fp64 for fp64 inputs), autocast off.

Kernels, declared for the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) as the op :data:`GATED_LINEAR` and the
set its mechanisms choose from, :data:`GATED_LINEAR_KERNELS` (a layer's ``kernels`` option: 'auto', 'fla' or
'chunk'):

- ``chunk`` (:func:`chunk_gated_linear`, this module): every device and dtype; the fallback.
- ``fla`` (:func:`~lavo_zoo.attention.ops.fla.fla_chunk_gated_linear`): flash-linear-attention's Triton kernels on
  CUDA where fla is installed and covers the call (:mod:`lavo_zoo.attention.ops.fla`); 'auto' takes them under the
  dispatch's Triton rule, a request for them anywhere.
"""
from __future__ import annotations

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
        b = _chunks(g, n, C).cumsum(-2)  # [B, H, n, C, K]
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


# ------------------------------------------------------------------------------------------- the dispatch's view
# No attention dropout here (no mechanism of this op has one): fla's kernels declare none, so a call with dropout in
# training would take the PyTorch form.
CHUNK = Kernel("chunk", chunk_gated_linear)
FLA = Kernel("fla", fla.fla_chunk_gated_linear, runs=fla.runs, auto=dispatch.triton_auto, dropout=False,
             compiled=True, applies=fla.gated_linear_applies)
GATED_LINEAR = Op("gated_linear", (FLA, CHUNK), fallback=CHUNK)
GATED_LINEAR_KERNELS = KernelSet("gated_linear", gated_linear=GATED_LINEAR)
