"""The gated linear attention on flash-linear-attention's kernels (the ``fla`` extra): the op's ``fla`` kernel, its
calls and the calls fla 0.6 covers. What every op's fla glue shares (where fla runs, its layout) is
:mod:`lavo_zoo.attention.ops.fla`."""
from __future__ import annotations

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops import fla

# fla's calls of this op, each with the op's gate arguments that select it and their size per token ("head": one
# per head, "key": one per key channel); the device check (benchmarks/gpu/check_kernels.py) runs each of them
FLA_CALLS = {
    "linear": ("chunk_simple_gla", {}),
    "simple_gla": ("chunk_simple_gla", {"g": "head"}),
    "gla": ("chunk_gla", {"g": "key"}),
}


def gated_linear_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None,
                         state: torch.Tensor | None = None, chunk_size: int = 64) -> bool:
    """Whether fla's gated linear attention covers this call (the op's arguments, see :func:`fla_chunk_gated_linear`):
    one gate per key channel always; one gate per head or none with even K and V in half precision (fla's
    ``chunk_bwd_dv`` refuses odd ones, e.g. Based's 153 features), and a per-head gate's backward where fla has it
    (:func:`~lavo_zoo.attention.ops.fla.gated_backward_refused`).

    Its arguments are stated on `lavo_zoo.attention.ops.gated_linear.chunk.chunk_gated_linear`.
    """
    if g is not None and g.dim() == 4:
        return True
    if q.dtype in fla.HALF and (q.shape[-1] % 2 or v.shape[-1] % 2):
        return False
    return g is None or not (fla.needs_backward(q, k, v, g, state) and fla.gated_backward_refused(q.device))


def fla_chunk_gated_linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None,
                           state: torch.Tensor | None = None, chunk_size: int = 64
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~lavo_zoo.attention.ops.gated_linear.chunk_gated_linear` on fla's kernels: ``chunk_gla`` (one gate per
    key channel) or ``chunk_simple_gla`` (one per head, or none).

    Args:
        q: queries [B, H, T, K] (any scale already applied); k and v are cast to q's dtype.
        k: keys [B, H, T, K].
        v: values [B, H, T, V].
        g: log decays (<= 0): [B, H, T], [B, H, T, K] or None; passed in fp32.
        state: the state before the first token [B, H, K, V] (None: zeros).
        chunk_size: unused: fla's kernels take their own chunk size.

    Returns:
        (o [B, H, T, V] in the compute dtype, the state after the last token [B, H, K, V] in fp32).

    Raises:
        KernelUnavailable: the kernel cannot be compiled on this device (warned once; the dispatch reruns the call).
    """
    from lavo_zoo.attention.ops import triton_utils

    args = (fla.to_fla(q), fla.to_fla(k, q.dtype), fla.to_fla(v, q.dtype))
    if g is not None and g.dim() == 4:
        from fla.ops.gla import chunk_gla

        with triton_utils.compiling("fla.chunk_gla"):
            o, final = chunk_gla(*args, g=fla.to_fla(g, torch.float32), scale=1.0,
                                 initial_state=fla.initial_state(state), output_final_state=True)
    else:
        from fla.ops.simple_gla import chunk_simple_gla

        with triton_utils.compiling("fla.chunk_simple_gla"):
            o, final = chunk_simple_gla(*args, g=fla.to_fla(g, torch.float32), scale=1.0,
                                        initial_state=fla.initial_state(state), output_final_state=True)
    return o.transpose(1, 2).to(compute_dtype(q.dtype)), final
