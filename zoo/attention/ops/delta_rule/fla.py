"""The (gated) delta rule on flash-linear-attention's kernels (the ``fla`` extra): the op's ``fla`` kernel, its calls
and the calls fla 0.6 covers. What every op's fla glue shares (where fla runs, its layout) is
:mod:`lavo_zoo.attention.ops.fla`."""
from __future__ import annotations

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops import fla

MAX_HEAD_DIM = 256  # fla 0.6's delta-rule kernels: key head dims up to 256
# fla's calls of this op, each with the op's gate arguments that select it and their size per token ("head": one
# per head, "key": one per key channel, "value": one per value channel); the device check
# (benchmarks/gpu/check_kernels.py) runs each of them
FLA_CALLS = {
    "delta_rule": ("chunk_delta_rule", {"beta": "head"}),
    "gated_delta_rule": ("chunk_gated_delta_rule", {"beta": "head", "g": "head"}),
    "kda": ("chunk_kda", {"beta": "head", "g": "key"}),
    "gdn2": ("chunk_gdn2", {"beta": "key", "g": "key", "write": "value"}),
}


def fla_function(beta: torch.Tensor, g: torch.Tensor | None, write: torch.Tensor | None) -> str:
    """The fla function that runs a call with these gates: ``chunk_delta_rule`` (no decay), ``chunk_gated_delta_rule``
    (a decay per head), ``chunk_kda`` (a decay per key channel), each with one strength per head; ``chunk_gdn2`` for
    erase strengths per key channel or write strengths given.

    Args:
        beta: erase strengths [B, H, T] or [B, H, T, K] (the op's, see
            :func:`~lavo_zoo.attention.ops.delta_rule.chunk_delta_rule`).
        g: log decays [B, H, T], [B, H, T, K] or None.
        write: write strengths [B, H, T, V], or None.
    """
    if beta.dim() == 4 or write is not None:
        return "chunk_gdn2"
    if g is None:
        return "chunk_delta_rule"
    return "chunk_gated_delta_rule" if g.dim() == 3 else "chunk_kda"


def delta_rule_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                       g: torch.Tensor | None = None, state: torch.Tensor | None = None, chunk_size: int = 64,
                       write: torch.Tensor | None = None) -> bool:
    """Whether fla's delta rule covers this call (the op's arguments, see :func:`fla_chunk_delta_rule`): key head
    dims up to :data:`MAX_HEAD_DIM`, and a per-head decay's backward where fla has it (``chunk_gated_delta_rule``'s:
    :func:`~lavo_zoo.attention.ops.fla.gated_backward_refused`; KDA's and GDN-2's kernels have their own).

    Its arguments are stated on `lavo_zoo.attention.ops.delta_rule.chunk.chunk_delta_rule`.
    """
    if q.shape[-1] > MAX_HEAD_DIM:
        return False
    if fla_function(beta, g, write) != "chunk_gated_delta_rule":
        return True
    return not (fla.needs_backward(q, k, v, beta, g, state) and fla.gated_backward_refused(q.device))


def fla_chunk_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                         g: torch.Tensor | None = None, state: torch.Tensor | None = None, chunk_size: int = 64,
                         write: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~lavo_zoo.attention.ops.delta_rule.chunk_delta_rule` on fla's kernels (:func:`fla_function` says which;
    queries and keys as given: normalised by the caller, the gates as given: already activated). ``chunk_gdn2``
    takes every gate per channel: a per-head one is broadcast, a missing decay is 0.

    Args:
        q: queries [B, H, T, K] in fp16 / bf16; k, v and the strengths are cast to q's dtype.
        k: keys [B, H, T, K], of unit norm.
        v: values [B, H, T, V].
        beta: erase (and, without ``write``, write) strengths [B, H, T] or [B, H, T, K].
        g: log decays (<= 0) [B, H, T], [B, H, T, K] or None; passed in fp32, floored as the PyTorch form floors
            them (:func:`~lavo_zoo.attention.ops.delta_rule.chunk.log_decay_floor`).
        state: the state before the first token [B, H, K, V] (None: zeros).
        chunk_size: unused: fla's kernels take their own chunk size.
        write: write strengths [B, H, T, V], or None.

    Returns:
        (o [B, H, T, V] in the compute dtype, the state after the last token [B, H, K, V] in fp32).

    Raises:
        KernelUnavailable: the kernel cannot be compiled on this device (warned once; the dispatch reruns the call).
    """
    from lavo_zoo.attention.ops import triton_utils
    from lavo_zoo.attention.ops.delta_rule.chunk import log_decay_floor

    function = fla_function(beta, g, write)
    args = (fla.to_fla(q), fla.to_fla(k, q.dtype), fla.to_fla(v, q.dtype))
    if g is not None:
        g = g.float().clamp(min=log_decay_floor(torch.float32))
    final_state = {"scale": 1.0, "initial_state": fla.initial_state(state), "output_final_state": True}
    if function == "chunk_delta_rule":
        from fla.ops.delta_rule import chunk_delta_rule as run

        call = (*args, fla.to_fla(beta, q.dtype))
    elif function == "chunk_gated_delta_rule":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as run

        call = (*args, fla.to_fla(g), fla.to_fla(beta, q.dtype))
    elif function == "chunk_kda":
        from fla.ops.kda import chunk_kda as run

        call = (*args, fla.to_fla(g), fla.to_fla(beta, q.dtype))
    else:
        from fla.ops.gdn2 import chunk_gdn2 as run

        if g is None:
            decay = k.new_zeros(k.shape, dtype=torch.float32)
        else:
            decay = g if g.dim() == 4 else g[..., None].expand(k.shape)
        erase = beta if beta.dim() == 4 else beta[..., None].expand(k.shape)
        written = write if write is not None else beta[..., None].expand(v.shape)
        call = (*args, fla.to_fla(decay), fla.to_fla(erase, q.dtype), fla.to_fla(written, q.dtype))
    with triton_utils.compiling(f"fla.{function}"):
        o, final = run(*call, **final_state)
    return o.transpose(1, 2).to(compute_dtype(q.dtype)), final
