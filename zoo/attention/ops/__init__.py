"""Kernels shared by several mechanisms (flash-linear-attention's ``ops/<op>/``), one package per op.

- :mod:`~lavo_zoo.attention.ops.window`: exact sliding-window softmax attention (``local`` and LAVO's local branch).
"""
