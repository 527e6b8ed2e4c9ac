"""Kernels shared by several mechanisms (flash-linear-attention's ``ops/<op>/``), one package per op, each with its
dense or loop reference in its ``naive.py``, and what their kernels share.

- :mod:`~lavo_zoo.attention.ops.dispatch`: the one kernel choice for every mechanism with kernels: where each kernel
  runs, the fallback when one cannot run, the report of what ran (its docstring says how a mechanism plugs in).
- :mod:`~lavo_zoo.attention.ops.window`: exact sliding-window softmax attention (``local`` and LAVO's local branch),
  with attention sinks in ``window/sinks.py``.
- :mod:`~lavo_zoo.attention.ops.gated_linear`: the chunked gated linear attention (``based``, ``gla``, ``mamba2``).
- :mod:`~lavo_zoo.attention.ops.delta_rule`: the chunked (gated) delta rule (``deltanet``, ``gated_deltanet``).
- :mod:`~lavo_zoo.attention.ops.fla`: flash-linear-attention's kernels for those two ops on CUDA (the ``fla``
  extra), declared beside the PyTorch forms in each op's package.
- :mod:`~lavo_zoo.attention.ops.short_conv`: the short causal convolution of the recurrent mechanisms.
- :mod:`~lavo_zoo.attention.ops.padding`: padded rows as the row alone: left alignment (LAVO, Transformer-LS) and
  row packing (the recurrent mechanisms, ``local``'s sinks).
- :mod:`~lavo_zoo.attention.ops.triton_utils`: what the Triton kernels share (where they run, tiles, precision).
- :mod:`~lavo_zoo.attention.ops.dropout`: attention dropout inside the kernels (the call's seed, the masks).
- :mod:`~lavo_zoo.attention.ops.naive`: the loop pieces that the mechanisms' slow references (``naive``) share.

LAVO's own op (its memory, read kernels and naive forms) lives in its package, :mod:`lavo_zoo.attention.lavo`.

:class:`KernelUnavailable` is here, beneath every kernel module and the dispatch, so that a kernel can raise it and
the dispatch catch it without either importing the other.
"""


class KernelUnavailable(RuntimeError):
    """A kernel compiled at run time (Triton, torch.compile) could not be built on this device, now or earlier in
    this process (it warned once and is off for the process): the dispatch reruns the call on the op's fallback."""

