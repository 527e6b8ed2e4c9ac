"""Kernels shared by several mechanisms, one self-contained folder per op (as flash-linear-attention's ``ops/<op>/``):
its declaration for the dispatch in ``__init__.py``, its PyTorch chunked or blocked form, its dense or loop reference
in ``naive.py`` and, where a library runs it, that library's calls and limits (``fla.py``); and what their kernels
share. Which mechanisms run on which op: their layers' ``kernel_set`` (``lavo-zoo list attentions`` lists them).

- :mod:`~lavo_zoo.attention.ops.dispatch`: the one kernel choice for every mechanism with kernels: where each kernel
  runs, the fallback when one cannot run, the report of what ran (its docstring says how a mechanism plugs in).
- :mod:`~lavo_zoo.attention.ops.window`: exact sliding-window softmax attention, with attention sinks in
  ``window/sinks.py``.
- :mod:`~lavo_zoo.attention.ops.gated_linear`: the chunked gated linear attention.
- :mod:`~lavo_zoo.attention.ops.delta_rule`: the chunked (gated) delta rule.
- :mod:`~lavo_zoo.attention.ops.fla`: what every op's flash-linear-attention glue shares (the ``fla`` extra: where
  its kernels run, its layout); each op's own calls are in its folder's ``fla.py``.
- :mod:`~lavo_zoo.attention.ops.chunking`: a sequence cut into chunks (the chunked forms).
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

