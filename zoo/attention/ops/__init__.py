"""Kernels shared by several mechanisms (flash-linear-attention's ``ops/<op>/``), one package per op, each with its
dense or loop reference in its ``naive.py``, and what their kernels share.

- :mod:`~lavo_zoo.attention.ops.window`: exact sliding-window softmax attention (``local`` and LAVO's local branch).
- :mod:`~lavo_zoo.attention.ops.dispatch`: the one kernel choice ('triton', 'flex', 'recompute', 'autograd') for the
  window and LAVO's memory read.
- :mod:`~lavo_zoo.attention.ops.triton_utils`: what the Triton kernels share (where they run, tiles, precision).
- :mod:`~lavo_zoo.attention.ops.naive`: the loop pieces that the mechanisms' slow references (``naive``) share.

LAVO's own op (its memory, read kernels and naive forms) lives in its package, :mod:`lavo_zoo.attention.lavo`.
"""
