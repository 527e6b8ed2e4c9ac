"""The (gated) delta rule on flash-linear-attention's kernels (the ``fla`` extra): the op's ``fla`` kernel, its calls
and the calls fla 0.6 covers. What every op's fla glue shares (where fla runs, its layout) is
:mod:`lavo_zoo.attention.ops.fla`."""
from __future__ import annotations

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops import fla

MAX_HEAD_DIM = 256  # fla 0.6's delta-rule kernels: key head dims up to 256
# fla's calls of this op, each with the op's gate arguments that select it and their size per token ("head": one
# per head, "key": one per key channel); the device check (benchmarks/gpu/check_kernels.py) runs each of them
FLA_CALLS = {
    "delta_rule": ("chunk_delta_rule", {"beta": "head"}),
    "gated_delta_rule": ("chunk_gated_delta_rule", {"beta": "head", "g": "head"}),
}


def delta_rule_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                       g: torch.Tensor | None = None, state: torch.Tensor | None = None, chunk_size: int = 64) -> bool:
    """Whether fla's delta rule covers this call (the op's arguments, see :func:`fla_chunk_delta_rule`): key head
    dims up to :data:`MAX_HEAD_DIM`, and a per-head gate's backward where fla has it
    (:func:`~lavo_zoo.attention.ops.fla.gated_backward_refused`)."""
    if q.shape[-1] > MAX_HEAD_DIM:
        return False
    return g is None or not (fla.needs_backward(q, k, v, beta, g, state) and fla.gated_backward_refused(q.device))


def fla_chunk_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                         g: torch.Tensor | None = None, state: torch.Tensor | None = None, chunk_size: int = 64
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~lavo_zoo.attention.ops.delta_rule.chunk_delta_rule` on fla's kernels: ``chunk_delta_rule`` or, with a
    gate, ``chunk_gated_delta_rule`` (queries and keys as given: normalised by the caller).

    Args:
        q, k: queries and keys [B, H, T, K] in fp16 / bf16 (k of unit norm); k, v and beta are cast to q's dtype.
        v: values [B, H, T, V].
        beta: write strengths [B, H, T].
        g: log decays (<= 0) [B, H, T], or None; passed in fp32.
        state: the state before the first token [B, H, K, V] (None: zeros).
        chunk_size: unused: fla's kernels take their own chunk size.

    Returns:
        (o [B, H, T, V] in the compute dtype, the state after the last token [B, H, K, V] in fp32).

    Raises:
        KernelUnavailable: the kernel cannot be compiled on this device (warned once; the dispatch reruns the call).
    """
    from lavo_zoo.attention.ops import triton_utils

    args = (fla.to_fla(q), fla.to_fla(k, q.dtype), fla.to_fla(v, q.dtype))
    if g is None:
        from fla.ops.delta_rule import chunk_delta_rule

        with triton_utils.compiling("fla.chunk_delta_rule"):
            o, final = chunk_delta_rule(*args, fla.to_fla(beta, q.dtype), scale=1.0,
                                        initial_state=fla.initial_state(state), output_final_state=True)
    else:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        with triton_utils.compiling("fla.chunk_gated_delta_rule"):
            o, final = chunk_gated_delta_rule(*args, fla.to_fla(g, torch.float32), fla.to_fla(beta, q.dtype),
                                              scale=1.0, initial_state=fla.initial_state(state),
                                              output_final_state=True)
    return o.transpose(1, 2).to(compute_dtype(q.dtype)), final
