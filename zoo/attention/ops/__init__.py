"""Kernels shared by several mechanisms (flash-linear-attention's ``ops/<op>/``), one package per op, each with its
dense or loop reference in its ``naive.py``.

- :mod:`~lavo_zoo.attention.ops.window`: exact sliding-window softmax attention (``local`` and LAVO's local branch).
- :mod:`~lavo_zoo.attention.ops.naive`: the loop pieces that the mechanisms' slow references (``naive``) share.
"""
