"""Gated linear attention: a matrix state S [K, V] per head, decayed and written at every token and read by the
queries (the op of the mechanisms whose layers declare ``GATED_LINEAR_KERNELS``; ``lavo-zoo list attentions``),

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,      o_t = S_t^T q_t                     (g_t <= 0: log decays)

with no gate, one gate per head or one per key channel. The folder holds everything of the op (as
flash-linear-attention's ``ops/<op>/``): this declaration, the PyTorch chunked form (:mod:`.chunk`, its numerics
there), the token-by-token recurrence the tests compare it with (:mod:`.naive`) and flash-linear-attention's calls
and limits (:mod:`.fla`).

Kernels, declared for the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) as the op :data:`GATED_LINEAR` and the
set its mechanisms choose from, :data:`GATED_LINEAR_KERNELS` (a layer's ``kernels`` option: 'auto', 'fla' or
'chunk'):

- ``chunk`` (:func:`~.chunk.chunk_gated_linear`): every device and dtype; the fallback.
- ``fla`` (:func:`~.fla.fla_chunk_gated_linear`): flash-linear-attention's Triton kernels on CUDA where fla is
  installed and covers the call (:func:`~.fla.gated_linear_applies`); 'auto' takes them under the dispatch's Triton
  rule, a request for them anywhere.
"""
from __future__ import annotations

from lavo_zoo.attention.ops import dispatch
from lavo_zoo.attention.ops.dispatch import Kernel, KernelSet, Op
from lavo_zoo.attention.ops.fla import runs
from lavo_zoo.attention.ops.gated_linear.chunk import chunk_gated_linear
from lavo_zoo.attention.ops.gated_linear.fla import fla_chunk_gated_linear, gated_linear_applies

__all__ = ["CHUNK", "FLA", "GATED_LINEAR", "GATED_LINEAR_KERNELS", "chunk_gated_linear"]

# No attention dropout here (no mechanism of this op has one): fla's kernels declare none, so a call with dropout in
# training would take the PyTorch form.
CHUNK = Kernel("chunk", chunk_gated_linear)
FLA = Kernel("fla", fla_chunk_gated_linear, runs=runs, auto=dispatch.triton_auto, dropout=False, compiled=True,
             applies=gated_linear_applies)
GATED_LINEAR = Op("gated_linear", (FLA, CHUNK), fallback=CHUNK)
GATED_LINEAR_KERNELS = KernelSet("gated_linear", gated_linear=GATED_LINEAR)
