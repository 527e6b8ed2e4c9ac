"""Kernels shared by several mechanisms (flash-linear-attention's ``ops/<op>/``), one package per op, each with its
dense or loop reference in its ``naive.py``, and what their kernels share.

- :mod:`~lavo_zoo.attention.ops.window`: exact sliding-window softmax attention (``local`` and LAVO's local branch),
  with attention sinks in ``window/sinks.py``.
- :mod:`~lavo_zoo.attention.ops.gated_linear`: the chunked gated linear attention (``based``, ``gla``, ``mamba2``).
- :mod:`~lavo_zoo.attention.ops.delta_rule`: the chunked (gated) delta rule (``deltanet``, ``gated_deltanet``).
- :mod:`~lavo_zoo.attention.ops.short_conv`: the short causal convolution of the recurrent mechanisms, and the row
  packing that gives a padded row the output of the row alone.
- :mod:`~lavo_zoo.attention.ops.fla`: flash-linear-attention's kernels for those two ops on CUDA (the ``fla``
  extra), chosen once per call, the PyTorch forms everywhere else.
- :mod:`~lavo_zoo.attention.ops.dispatch`: the one kernel choice ('triton', 'flex', 'recompute', 'autograd') for the
  window and LAVO's memory read.
- :mod:`~lavo_zoo.attention.ops.triton_utils`: what the Triton kernels share (where they run, tiles, precision).
- :mod:`~lavo_zoo.attention.ops.naive`: the loop pieces that the mechanisms' slow references (``naive``) share.

LAVO's own op (its memory, read kernels and naive forms) lives in its package, :mod:`lavo_zoo.attention.lavo`.
"""
