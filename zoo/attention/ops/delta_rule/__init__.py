"""The (gated) delta rule, the op of ``deltanet`` and ``gated_deltanet``: a matrix state S [K, V] per head that each
token overwrites at its key (the value stored under k_t is replaced by v_t, to the extent beta_t), after an optional
decay,

    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,      o_t = S_t^T q_t

(k_t of unit norm; g_t <= 0 one log decay per head, 0 for DeltaNet). Computed here in its chunked form (the WY /
UT-transform of Yang et al. 2024, "Parallelizing linear transformers with the delta rule over sequence length",
in PyTorch): within a chunk of C tokens the new values w_i = beta_i (v_i - exp(g_i) S_{i-1}^T k_i) solve one unit
lower-triangular C x C system, (I + M) W = beta V - beta Gamma K S_0 with M_ij = beta_i (Gamma_i / Gamma_j) k_i . k_j
(j < i) and Gamma_i the decay since the chunk's start, so that everything but W's dependence on the entering
state S_0 is computed for all chunks at once; one short loop over the T / C chunks carries S:

    W = U - Kw S_0,   O = diag(Gamma) Q S_0 + (Q K^T . L) W,   S_C = Gamma_C S_0 + (K . Gamma_C / Gamma)^T W

No T x T matrix: O(T C (K + V) + T C^2 + T K V) time, O(T (K + V + C)) memory. Every decay factor is <= 1 (masked before
the exp), its exponent a sum of the decays between the two tokens, never a difference of cumulative sums
(:func:`~lavo_zoo.attention.ops.gated_linear.segment_sums`), so weak decays after a strong one keep their precision. The
token-by-token recurrence is :mod:`.naive`. Sums in fp32 (fp64 for fp64 inputs), autocast off.

Kernels, declared for the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) as the op :data:`DELTA_RULE` and the
set its mechanisms choose from, :data:`DELTA_RULE_KERNELS` (a layer's ``kernels`` option: 'auto', 'fla' or
'chunk'):

- ``chunk`` (:func:`chunk_delta_rule`, this module): every device and dtype; the fallback.
- ``fla`` (:func:`~lavo_zoo.attention.ops.fla.fla_chunk_delta_rule`): flash-linear-attention's Triton kernels on
  CUDA in fp16 / bf16 where fla is installed and covers the call (:mod:`lavo_zoo.attention.ops.fla`); 'auto' takes
  them under the dispatch's Triton rule, a request for them anywhere.
"""
from __future__ import annotations

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops import dispatch, fla
from lavo_zoo.attention.ops.dispatch import Kernel, KernelSet, Op
from lavo_zoo.attention.ops.gated_linear import _chunks, segment_sums, suffix_sums


def chunk_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                     g: torch.Tensor | None = None, state: torch.Tensor | None = None, chunk_size: int = 64
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The (gated) delta rule in chunks.

    Args:
        q: queries [B, H, T, K] (any scale already applied).
        k: keys [B, H, T, K] (unit norm for the rule to overwrite; not checked).
        v: values [B, H, T, V].
        beta: write strengths [B, H, T] (0: the token writes nothing).
        g: log decays (<= 0) [B, H, T], or None (DeltaNet: no decay).
        state: the state before the first token [B, H, K, V] (None: zeros).
        chunk_size: tokens per chunk C.

    Returns:
        (o [B, H, T, V], the state after the last token [B, H, K, V]) in the compute dtype.
    """
    dtype = compute_dtype(q.dtype)
    with torch.autocast(q.device.type, enabled=False):
        return _chunk(q.to(dtype), k.to(dtype), v.to(dtype), beta.to(dtype), None if g is None else g.to(dtype),
                      None if state is None else state.to(dtype), chunk_size)


def _chunk(q, k, v, beta, g, state, C):
    B, H, T, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, K, V) if state is None else state
    if T == 0:
        return v.new_zeros(B, H, 0, V), S
    C = min(C, T)
    n = -(-T // C)
    q, k, v, beta = _chunks(q, n, C), _chunks(k, n, C), _chunks(v, n, C), _chunks(beta, n, C)  # [B, H, n, C, .]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    if g is None:
        decay = None
        ratio = causal.to(q.dtype)  # Gamma_i / Gamma_j for j <= i
        q_in, k_out, k_in = q, k, k
    else:
        g = _chunks(g, n, C)
        b = g.cumsum(-1)  # [B, H, n, C]
        ratio = segment_sums(g, -1).exp()  # [B, H, n, C, C] Gamma_i / Gamma_j, summed (not differenced), 0 above
        q_in = q * b.exp()[..., None]
        k_in = k * b.exp()[..., None]
        k_out = k * suffix_sums(g, -1).exp()[..., None]
        decay = b[..., -1].exp()[..., None, None]
    strict = (k @ k.transpose(-1, -2)) * ratio * beta[..., None]  # M, before masking the diagonal
    system = strict.masked_fill(causal.logical_not().logical_or(torch.eye(C, dtype=torch.bool, device=q.device)),
                                0.0) + torch.eye(C, dtype=q.dtype, device=q.device)  # I + M, unit lower-triangular
    rhs = torch.cat([v * beta[..., None], k_in * beta[..., None]], -1)  # [B, H, n, C, V + K]
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    U, Kw = solved[..., :V], solved[..., V:]
    scores = (q @ k.transpose(-1, -2)) * ratio  # [B, H, n, C, C], zero above the diagonal
    outs = []
    # unbind (not index) so that backward is one stack per tensor, not a full-size zero tensor per chunk
    decays = [None] * n if decay is None else decay.unbind(2)
    for u, kw, qc, sc, kc, a in zip(U.unbind(2), Kw.unbind(2), q_in.unbind(2), scores.unbind(2), k_out.unbind(2),
                                    decays):
        W = u - kw @ S  # [B, H, C, V] the chunk's new values
        outs.append(qc @ S + sc @ W)
        S = (S if a is None else a * S) + kc.transpose(-1, -2) @ W
    return torch.cat(outs, 2)[:, :, :T], S


# ------------------------------------------------------------------------------------------- the dispatch's view
# No attention dropout here (no mechanism of this op has one): fla's kernels declare none.
CHUNK = Kernel("chunk", chunk_delta_rule)
FLA = Kernel("fla", fla.fla_chunk_delta_rule, runs=fla.runs_in_half, auto=dispatch.triton_auto, dropout=False,
             compiled=True, applies=fla.delta_rule_applies)
DELTA_RULE = Op("delta_rule", (FLA, CHUNK), fallback=CHUNK)
DELTA_RULE_KERNELS = KernelSet("delta_rule", delta_rule=DELTA_RULE)
