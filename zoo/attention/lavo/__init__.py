"""LAVO, linear attention via orthogonal memory (Zhang et al. 2023; the project's reading: docs/lavo.md).

As flash-linear-attention lays out a mechanism (``fla/layers/<op>.py`` beside stateless ``fla/ops/<op>/``):

- ``layer.py``: :class:`LavoAttention` (registered ``lavo``): projections, parameters, its streaming state
  (:class:`LavoState`, and :class:`LavoStaticState`, the fixed-shape form a CUDA graph captures) and
  cross-attention cache, and its ``kernels`` option;
- ``ops.py``: the stateless op, pure functions of tensors: the read with its options, the joining of the branches,
  with the streaming state in and out, the decoding steps; the read's, the decoding step's and the fused layer's
  kernels as the dispatch sees them, and LAVO's whole set (``LAVO_KERNELS``: the window's, the read's, the step's,
  the fused layer's);
- ``memory.py``: the memory rows in PyTorch (context dissection's per-window sums and their prefix, the running
  mean, one mean per sequence) and the memory's part of the state;
- ``read.py``: the read's PyTorch kernels (``recompute``: a backward that recomputes; ``autograd``);
- ``binding.py``: the same two kernels for the binding memory (``memory='binding'``: an [r, d] matrix per head,
  which the Triton kernels do not read);
- ``triton.py``: the read's Triton kernels (CUDA; forward and backward) and the decoding step's;
- ``triton_memory.py``: the memory rows' Triton kernels and their gradient's;
- ``fused.py``: a whole self-attention call on the Triton kernels, one operation forward and backward;
- ``naive.py``: the slow, per-position forms of the op and of the layer that the tests compare with.

The local branch is the shared sliding-window op, :mod:`lavo_zoo.attention.ops.window` (its Triton kernels:
``ops/window/triton.py``); the dispatch (:mod:`lavo_zoo.attention.ops.dispatch`) chooses the kernels of a call once,
and ``LavoAttention.kernels_used`` reports the last call's.
"""
from lavo_zoo.attention.lavo.layer import LavoAttention, LavoCrossCache, LavoState, LavoStaticState

__all__ = ["LavoAttention", "LavoCrossCache", "LavoState", "LavoStaticState"]
