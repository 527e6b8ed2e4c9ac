"""The gated delta rule in chunks (the WY / UT-transform of Yang et al. 2024, "Parallelizing linear transformers with
the delta rule over sequence length", in PyTorch, with a decay per head or per key channel and channel-wise erase and
write gates): the op's ``chunk`` kernel, on every device and dtype, and its fallback (the op and its recurrence:
:mod:`lavo_zoo.attention.ops.delta_rule`).

Each token erases at e_t = b_t . k_t and writes u_t = w_t . v_t after the decay D_t = diag(exp(g_t)); its new value
n_t = u_t - S_{t-1}^T D_t e_t makes S_t = D_t S_{t-1} + k_t n_t^T. Within a chunk of C tokens, with Gamma_i the
decay since the chunk's start (per key channel), the new values solve one unit lower-triangular C x C system,

    (I + M) N = U - (E . Gamma) S_0,      M_ij = sum_d e_i,d k_j,d Gamma_i,d / Gamma_j,d      (j < i)

so that everything but N's dependence on the entering state S_0 is computed for all chunks at once; one short loop
over the T / C chunks carries S:

    N = U~ - E~ S_0,   O = (Q . Gamma) S_0 + A N,   S_C = Gamma_C S_0 + (K . Gamma_C / Gamma)^T N

with A_ij = sum_d q_i,d k_j,d Gamma_i,d / Gamma_j,d (j <= i). No T x T matrix: O(T C (K + V) + T K V) time.

Numerics: every decay factor is exp of a non-positive number, so none exceeds 1 and the form is finite wherever
the token-by-token recurrence is, for any decay and input scale. One decay per head (or none) gives the C x C
factors exp(b_i - b_j) directly, masked to j <= i before the exp. One per key channel cannot form the [C, C, K]
factors of a whole chunk cheaply; the chunk is cut into blocks of :data:`BLOCK` tokens: within a block the factors
are formed pairwise (masked before the exp), and across blocks they are split at the start of the query's block B,
exp(b_i - b_B) exp(b_B - b_j), each factor <= 1 because the cumulative log decay b never rises (memory
O(T (BLOCK + C / BLOCK) K) beside the C x C products). Log decays are floored where exp of them is 0 in the compute
dtype anyway (:func:`log_decay_floor`), so an infinite decay (a gate of -inf) clears the state as in the recurrence
instead of making inf - inf. Sums in fp32 (fp64 for fp64 inputs), autocast off.
"""
from __future__ import annotations

import math

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops.chunking import split_chunks

BLOCK = 8  # tokens per block of a chunk when the decay is per key channel (see the module docstring)


def log_decay_floor(dtype: torch.dtype) -> float:
    """A log decay below which exp is 0 in ``dtype`` (1.25 x the log of its smallest normal number): flooring at it
    changes no factor, and keeps the cumulative sums finite.

    Args:
        dtype: the compute dtype (fp32, fp64).
    """
    return 1.25 * math.log(torch.finfo(dtype).tiny)


def check_gates(k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor | None,
                write: torch.Tensor | None) -> None:
    """Refuse gates of shapes the op does not take, naming the argument and the shapes it may have.

    Args:
        k: keys [B, H, T, K] (the op's arguments: :func:`chunk_delta_rule`).
        v: values [B, H, T, V].
        beta: erase strengths, [B, H, T] or [B, H, T, K].
        g: log decays, [B, H, T], [B, H, T, K] or None.
        write: write strengths [B, H, T, V], or None.

    Raises:
        ValueError: a gate of another shape, or per-channel erase strengths without write strengths.
    """
    head, key, value = tuple(k.shape[:3]), tuple(k.shape), (*k.shape[:3], v.shape[-1])
    for name, t, shapes in (("beta", beta, (head, key)), ("g", g, (head, key)), ("write", write, (value,))):
        if t is not None and tuple(t.shape) not in shapes:
            raise ValueError(f"{name} must have shape {' or '.join(str(list(s)) for s in shapes)} (one per head"
                             f"{', one per key channel' if len(shapes) > 1 else ' and value channel'}), got "
                             f"{list(t.shape)}")
    if write is None and beta.dim() == 4:
        raise ValueError("beta with one erase strength per key channel needs write (one write strength per value "
                         "channel): with beta per head, write defaults to beta")


def chunk_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                     g: torch.Tensor | None = None, state: torch.Tensor | None = None, chunk_size: int = 64,
                     write: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule in chunks.

    Args:
        q: queries [B, H, T, K] (any scale already applied).
        k: keys [B, H, T, K] (unit norm for the rule to overwrite; not checked).
        v: values [B, H, T, V].
        beta: erase strengths: [B, H, T] (one per token and head, also the write strength unless ``write`` is given)
            or [B, H, T, K] (one per key channel: Gated DeltaNet-2's erase gate). 0: the token erases nothing.
        g: log decays (<= 0): [B, H, T] (one per head), [B, H, T, K] (one per key channel: KDA) or None (no decay).
        state: the state before the first token [B, H, K, V] (None: zeros).
        chunk_size: tokens per chunk C.
        write: write strengths [B, H, T, V] (one per value channel: Gated DeltaNet-2's write gate), or None: beta
            (per head).

    Returns:
        (o [B, H, T, V], the state after the last token [B, H, K, V]) in the compute dtype.

    Raises:
        ValueError: a gate of another shape (:func:`check_gates`).
    """
    check_gates(k, v, beta, g, write)
    dtype = compute_dtype(q.dtype)
    with torch.autocast(q.device.type, enabled=False):
        return _chunk(*(None if t is None else t.to(dtype) for t in (q, k, v, beta, g, state)), chunk_size,
                      None if write is None else write.to(dtype))


def _chunk(q, k, v, beta, g, state, C, write):
    B, H, T, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, K, V) if state is None else state
    if T == 0:
        return v.new_zeros(B, H, 0, V), S
    C = min(C, T)
    n = -(-T // C)
    erase = k * (beta[..., None] if beta.dim() == 3 else beta)     # e = b . k [B, H, T, K]
    u = v * (beta[..., None] if write is None else write)           # u = w . v [B, H, T, V]
    q, k, erase, u = (split_chunks(t, n, C) for t in (q, k, erase, u))  # [B, H, n, C, .]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    strict = causal.tril(-1)
    if g is None:
        scores = (q @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)  # A [B, H, n, C, C]
        M = (erase @ k.transpose(-1, -2)).masked_fill(~strict, 0.0)
        q_in, e_in, k_out, decay = q, erase, k, None
    else:
        g = g.clamp(min=log_decay_floor(g.dtype))
        if g.dim() == 3:  # one decay per head
            b = split_chunks(g, n, C).cumsum(-1)  # [B, H, n, C] inclusive cumulative log decay
            ratio = (b[..., :, None] - b[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # [B, H, n, C, C]
            scores = (q @ k.transpose(-1, -2)) * ratio
            M = ((erase @ k.transpose(-1, -2)) * ratio).masked_fill(~strict, 0.0)
            gamma, k_out = b.exp()[..., None], k * (b[..., -1:] - b).exp()[..., None]
            decay = b[..., -1].exp()[..., None, None]  # [B, H, n, 1, 1]
        else:  # one decay per key channel
            b = split_chunks(g, n, C).cumsum(-2)  # [B, H, n, C, K]
            scores, M = _channel_products(q, erase, k, b)
            M = M.masked_fill(~strict, 0.0)
            gamma, k_out = b.exp(), k * (b[..., -1:, :] - b).exp()
            decay = b[..., -1, :].exp()[..., None]  # [B, H, n, K, 1]
        q_in, e_in = q * gamma, erase * gamma
    system = M + torch.eye(C, dtype=q.dtype, device=q.device)  # I + M, unit lower-triangular
    solved = torch.linalg.solve_triangular(system, torch.cat([u, e_in], -1), upper=False, unitriangular=True)
    U, Ew = solved[..., :V], solved[..., V:]
    outs = []
    # unbind (not index) so that backward is one stack per tensor, not a full-size zero tensor per chunk
    decays = [None] * n if decay is None else decay.unbind(2)
    for uc, ew, qc, sc, kc, a in zip(U.unbind(2), Ew.unbind(2), q_in.unbind(2), scores.unbind(2), k_out.unbind(2),
                                     decays):
        N = uc - ew @ S  # [B, H, C, V] the chunk's new values
        outs.append(qc @ S + sc @ N)
        S = (S if a is None else a * S) + kc.transpose(-1, -2) @ N
    return torch.cat(outs, 2)[:, :, :T], S


def _channel_products(q: torch.Tensor, e: torch.Tensor, k: torch.Tensor, b: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Within each chunk, sum_d a_i,d k_j,d exp(b_i,d - b_j,d) for j <= i (0 above the diagonal), for a = q (the
    scores) and a = e (the system's M, diagonal included): [..., C, K] inputs, b the inclusive cumulative log decays
    [..., C, K] -> two [..., C, C]. Blocks of :data:`BLOCK` tokens; every exp factor <= 1 (module docstring)."""
    C = k.shape[-2]
    c = min(BLOCK, C)
    m = -(-C // c)
    P = m * c
    if P > C:  # pad the chunk to whole blocks: zero queries and keys, the decay held at its last value
        q, e, k = (torch.cat([t, t.new_zeros(*t.shape[:-2], P - C, t.shape[-1])], -2) for t in (q, e, k))
        b = torch.cat([b, b[..., -1:, :].expand(*b.shape[:-2], P - C, b.shape[-1])], -2)
    bb, kb = b.unflatten(-2, (m, c)), k.unflatten(-2, (m, c))  # [..., m, c, K]
    start = torch.cat([torch.zeros_like(bb[..., :1, -1, :]), bb[..., :-1, -1, :]], -2)  # b before each block [.., m, K]
    # keys before block I, decayed up to its start: exp(b_start(I) - b_j) <= 1; the rest masked to 0
    before = torch.arange(P, device=k.device)[None, :] < (torch.arange(m, device=k.device) * c)[:, None]  # [m, P]
    kx = k[..., None, :, :] * (start[..., :, None, :] - b[..., None, :, :]).masked_fill(
        ~before[..., None], float("-inf")).exp()  # [..., m, P, K]
    inside = (bb - start[..., :, None, :]).exp()  # exp(b_i - b_start(I)) <= 1 [..., m, c, K]
    lower = torch.ones(c, c, dtype=torch.bool, device=k.device).tril()
    pairs = (bb[..., :, None, :] - bb[..., None, :, :]).masked_fill(~lower[..., None], float("-inf")).exp()
    eye = torch.eye(m, dtype=k.dtype, device=k.device)[:, None, :, None]  # block I = J

    def products(a: torch.Tensor) -> torch.Tensor:
        ab = a.unflatten(-2, (m, c))
        off = ((ab * inside) @ kx.transpose(-1, -2)).unflatten(-1, (m, c))  # [..., m, c, m, c]
        diag = torch.einsum("...ik,...jk,...ijk->...ij", ab, kb, pairs)    # [..., m, c, c]
        return (off + diag[..., :, :, None, :] * eye).flatten(-4, -3).flatten(-2, -1)[..., :C, :C]

    return products(q), products(e)
