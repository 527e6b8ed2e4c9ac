"""LAVO, linear attention via orthogonal memory (Zhang et al. 2023; the project's reading: docs/lavo.md).

- ``layer.py``: :class:`LavoAttention` (registered ``lavo``), its streaming state and cross-attention cache;
- ``memory.py``: the orthogonal-memory read kernels (recompute and autograd);
- ``triton.py``: the read's Triton kernels (CUDA; forward and backward);
- ``naive.py``: the slow, per-position reference the tests compare the layer with.

The local branch is the shared sliding-window op, :mod:`lavo_zoo.attention.ops.window` (its Triton kernels:
``ops/window/triton.py``). :meth:`LavoAttention.kernels` picks the kernels, ``LavoAttention.mode`` reports them.
"""
from lavo_zoo.attention.lavo.layer import LavoAttention, LavoCrossCache, LavoState

__all__ = ["LavoAttention", "LavoCrossCache", "LavoState"]
