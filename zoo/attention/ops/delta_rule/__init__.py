"""The gated delta rule: a matrix state S [K, V] per head that each token overwrites at its key, after a decay (the op
of the mechanisms whose layers declare ``DELTA_RULE_KERNELS``; ``lavo-zoo list attentions``),

    S_t = (I - k_t (b_t . k_t)^T) D_t S_{t-1} + k_t (w_t . v_t)^T,      o_t = S_t^T q_t

with k_t of unit norm, D_t = diag(exp(g_t)) the decay (g_t <= 0: none, one log decay per head as Gated DeltaNet's,
or one per key channel as KDA's), b_t the erase strengths (one per head, beta_t, or one per key channel as
Gated DeltaNet-2's erase gate) and w_t the write strengths (beta_t, or one per value channel as Gated DeltaNet-2's
write gate). With b_t = w_t = beta_t it is the delta rule of DeltaNet, S_t = D_t S_{t-1} + beta_t k_t (v_t -
S_{t-1}^T D_t k_t)^T: the value stored under k_t replaced by v_t, to the extent beta_t. The folder holds everything
of the op (as flash-linear-attention's ``ops/<op>/``): this declaration, the PyTorch chunked form (:mod:`.chunk`:
the WY form, its cost and numerics there), the token-by-token recurrence the tests compare it with (:mod:`.naive`)
and flash-linear-attention's calls and limits (:mod:`.fla`: one fla function per kind of gate, ``FLA_CALLS``).

Kernels, declared for the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) as the op :data:`DELTA_RULE` and the
set its mechanisms choose from, :data:`DELTA_RULE_KERNELS` (a layer's ``kernels`` option: 'auto', 'fla' or
'chunk'):

- ``chunk`` (:func:`~.chunk.chunk_delta_rule`): every device and dtype; the fallback.
- ``fla`` (:func:`~.fla.fla_chunk_delta_rule`): flash-linear-attention's Triton kernels on CUDA in fp16 / bf16
  (declared: ``dtypes``; fla refuses fp32 here) where fla is installed and covers the call
  (:func:`~.fla.delta_rule_applies`); 'auto' takes them under the dispatch's Triton rule, a request for them
  anywhere.
"""
from __future__ import annotations

from lavo_zoo.attention.ops import dispatch
from lavo_zoo.attention.ops.delta_rule.chunk import chunk_delta_rule
from lavo_zoo.attention.ops.delta_rule.fla import delta_rule_applies, fla_chunk_delta_rule
from lavo_zoo.attention.ops.dispatch import Kernel, KernelSet, Op
from lavo_zoo.attention.ops.fla import HALF, runs

__all__ = ["CHUNK", "DELTA_RULE", "DELTA_RULE_KERNELS", "FLA", "chunk_delta_rule"]

# No attention dropout here (no mechanism of this op has one): fla's kernels declare none.
CHUNK = Kernel("chunk", chunk_delta_rule)
FLA = Kernel("fla", fla_chunk_delta_rule, runs=runs, auto=dispatch.triton_auto, dropout=False, compiled=True,
             applies=delta_rule_applies, dtypes=HALF)
DELTA_RULE = Op("delta_rule", (FLA, CHUNK), fallback=CHUNK)
DELTA_RULE_KERNELS = KernelSet("delta_rule", delta_rule=DELTA_RULE)
