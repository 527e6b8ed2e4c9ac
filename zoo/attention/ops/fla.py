"""flash-linear-attention's kernels (the ``fla`` extra: ``pip install "lavo-zoo[fla]"``) for the recurrent ops, as
kernels of the one dispatch (:mod:`lavo_zoo.attention.ops.dispatch`).

Each kernel is a function named after its algorithm with its op's signature and results ([B, H, T, ...] in; the
outputs in the compute dtype and the final state in fp32 out), so the dispatch can run either form of the op; they
are declared in the op's package beside the PyTorch chunked form, which is their fallback: ``FLA`` in
:mod:`lavo_zoo.attention.ops.gated_linear` (``based``, ``gla``, ``mamba2``) and :mod:`lavo_zoo.attention.ops.
delta_rule` (``deltanet``, ``gated_deltanet``). What the declarations take from here:

- where they run (:func:`runs`, :func:`runs_in_half`): a CUDA tensor, the dispatch's Triton kernels usable there
  (:func:`~lavo_zoo.attention.ops.dispatch.triton_runs`: ``LAVO_ZOO_TRITON`` not 0, Triton, fp16 / bf16 / fp32, no
  Triton kernel failed to compile in this process), ``fla`` importable; the delta rule in half precision only (fla
  refuses fp32 there). fla's kernels do not run in Triton's interpreter (its autotuned kernels fail there), so they
  are checked on a GPU only (benchmarks/gpu/check_kernels.py, the ``fla`` cases).
- which calls they cover (:func:`gated_linear_applies`, :func:`delta_rule_applies`): fla 0.6's own limits, so that
  a call it would refuse, in the forward or later in the backward, takes the PyTorch form instead: even head dims in
  half precision (one gate per head or none), head dims up to 256 (the delta rule), and no backward of a per-head
  gate on a Hopper GPU under Triton 3.4 to 3.7.0 without ``tilelang`` (fla refuses it there: wrong results).
- 'auto' takes them under the dispatch's Triton rule (:func:`~lavo_zoo.attention.ops.dispatch.triton_auto`): on
  request (``kernels='fla'``) until a device run of them has passed, as the project's own Triton kernels.
- a compile failure: each launch runs under :func:`~lavo_zoo.attention.ops.triton_utils.compiling`, so it warns
  once, turns the Triton kernels off for the process and the dispatch reruns the call on the PyTorch form. Other
  errors propagate (a bug in the call, a full device), as does a failure to compile fla's backward kernels, which
  run inside its autograd Function.

Importing this module imports neither fla nor Triton; a kernel imports them when it runs.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import warnings

import torch

from lavo_zoo.attention.common import compute_dtype
from lavo_zoo.attention.ops import dispatch

HALF = (torch.float16, torch.bfloat16)
MAX_DELTA_HEAD_DIM = 256  # fla 0.6's delta-rule kernels: key head dims up to 256


# ------------------------------------------------------------------------------------------- where they run
@functools.cache
def available() -> bool:
    """Whether flash-linear-attention's ops import here (imported once, on the first CUDA call that asks). Not
    installed: no; installed but failing to import (a release built for another torch or Triton): no, with one
    warning naming the error."""
    try:
        importlib.import_module("fla.ops")
    except ModuleNotFoundError as e:
        if e.name is not None and e.name.split(".")[0] == "fla":
            return False
        _warn_broken(e)
        return False
    except Exception as e:  # noqa: BLE001 - whatever a broken install raises: the PyTorch forms run
        _warn_broken(e)
        return False
    return True


def _warn_broken(e: BaseException) -> None:
    warnings.warn(f"flash-linear-attention is installed but does not import ({type(e).__name__}: "
                  f"{str(e).strip()[:300]}); the recurrent mechanisms run their PyTorch kernels (reinstall it with "
                  "pip install 'lavo-zoo[fla]')", RuntimeWarning, stacklevel=3)


def runs(q: torch.Tensor) -> bool:
    """Whether fla's kernels can run for queries q: on CUDA where the Triton kernels are usable (module docstring)
    and fla imports.

    Args:
        q: the call's queries [B, H, T, K].
    """
    return dispatch.on_cuda(q) and dispatch.triton_runs(q) and available()


def runs_in_half(q: torch.Tensor) -> bool:
    """:func:`runs`, in fp16 / bf16 only (fla's delta-rule kernels refuse fp32).

    Args:
        q: the call's queries [B, H, T, K].
    """
    return q.dtype in HALF and runs(q)


# ------------------------------------------------------------------------------------------- which calls
def _needs_backward(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


@functools.cache
def gated_backward_refused(device: torch.device) -> bool:
    """Whether fla 0.6 refuses the backward of a per-head gate here: a Hopper GPU (compute capability 9) under
    Triton >= 3.4.0 and < 3.7.1 without ``tilelang`` (its ``chunk_bwd_dqkwg`` raises, naming wrong results there)."""
    import triton
    from packaging.version import Version

    hopper = torch.cuda.get_device_capability(device)[0] == 9
    broken = (3, 4, 0) <= Version(triton.__version__).release < (3, 7, 1)
    return hopper and broken and importlib.util.find_spec("tilelang") is None


def gated_linear_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None,
                         state: torch.Tensor | None = None, chunk_size: int = 64) -> bool:
    """Whether fla's gated linear attention covers this call (the op's arguments, see :func:`fla_chunk_gated_linear`):
    one gate per key channel always; one gate per head or none with even K and V in half precision (fla's
    ``chunk_bwd_dv`` refuses odd ones, e.g. Based's 153 features), and a per-head gate's backward where fla has it.
    """
    if g is not None and g.dim() == 4:
        return True
    if q.dtype in HALF and (q.shape[-1] % 2 or v.shape[-1] % 2):
        return False
    return g is None or not (_needs_backward(q, k, v, g, state) and gated_backward_refused(q.device))


def delta_rule_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                       g: torch.Tensor | None = None, state: torch.Tensor | None = None, chunk_size: int = 64) -> bool:
    """Whether fla's delta rule covers this call (the op's arguments, see :func:`fla_chunk_delta_rule`): key head
    dims up to :data:`MAX_DELTA_HEAD_DIM`, and a gate's backward where fla has it."""
    if q.shape[-1] > MAX_DELTA_HEAD_DIM:
        return False
    return g is None or not (_needs_backward(q, k, v, beta, g, state) and gated_backward_refused(q.device))


# ------------------------------------------------------------------------------------------------ the kernels
def _btHk(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """[B, H, T, ...] -> fla's [B, T, H, ...] layout (in ``dtype``, where given)."""
    t = t.transpose(1, 2)
    return (t if dtype is None else t.to(dtype)).contiguous()


def _initial(state: torch.Tensor | None) -> torch.Tensor | None:
    return None if state is None else state.float()  # fla keeps its states in fp32 (chunk_gla asserts it)


def fla_chunk_gated_linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None,
                           state: torch.Tensor | None = None, chunk_size: int = 64
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~lavo_zoo.attention.ops.gated_linear.chunk_gated_linear` on fla's kernels: ``chunk_gla`` (one gate per
    key channel) or ``chunk_simple_gla`` (one per head, or none).

    Args:
        q, k: queries and keys [B, H, T, K] (any scale already applied); k and v are cast to q's dtype.
        v: values [B, H, T, V].
        g: log decays (<= 0): [B, H, T], [B, H, T, K] or None; passed in fp32.
        state: the state before the first token [B, H, K, V] (None: zeros).
        chunk_size: unused: fla's kernels take their own chunk size.

    Returns:
        (o [B, H, T, V] in the compute dtype, the state after the last token [B, H, K, V] in fp32).

    Raises:
        KernelUnavailable: the kernel cannot be compiled on this device (warned once; the dispatch reruns the call).
    """
    from lavo_zoo.attention.ops import triton_utils

    args = (_btHk(q), _btHk(k, q.dtype), _btHk(v, q.dtype))
    if g is not None and g.dim() == 4:
        from fla.ops.gla import chunk_gla

        with triton_utils.compiling("fla.chunk_gla"):
            o, final = chunk_gla(*args, g=_btHk(g, torch.float32), scale=1.0, initial_state=_initial(state),
                                 output_final_state=True)
    else:
        from fla.ops.simple_gla import chunk_simple_gla

        with triton_utils.compiling("fla.chunk_simple_gla"):
            o, final = chunk_simple_gla(*args, g=None if g is None else _btHk(g, torch.float32), scale=1.0,
                                        initial_state=_initial(state), output_final_state=True)
    return o.transpose(1, 2).to(compute_dtype(q.dtype)), final


def fla_chunk_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                         g: torch.Tensor | None = None, state: torch.Tensor | None = None, chunk_size: int = 64
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~lavo_zoo.attention.ops.delta_rule.chunk_delta_rule` on fla's kernels: ``chunk_delta_rule`` or, with a
    gate, ``chunk_gated_delta_rule`` (queries and keys as given: normalised by the caller).

    Args:
        q, k: queries and keys [B, H, T, K] in fp16 / bf16 (k of unit norm); k, v and beta are cast to q's dtype.
        v: values [B, H, T, V].
        beta: write strengths [B, H, T].
        g: log decays (<= 0) [B, H, T], or None; passed in fp32.
        state: the state before the first token [B, H, K, V] (None: zeros).
        chunk_size: unused: fla's kernels take their own chunk size.

    Returns:
        (o [B, H, T, V] in the compute dtype, the state after the last token [B, H, K, V] in fp32).

    Raises:
        KernelUnavailable: the kernel cannot be compiled on this device (warned once; the dispatch reruns the call).
    """
    from lavo_zoo.attention.ops import triton_utils

    args = (_btHk(q), _btHk(k, q.dtype), _btHk(v, q.dtype))
    if g is None:
        from fla.ops.delta_rule import chunk_delta_rule

        with triton_utils.compiling("fla.chunk_delta_rule"):
            o, final = chunk_delta_rule(*args, _btHk(beta, q.dtype), scale=1.0, initial_state=_initial(state),
                                        output_final_state=True)
    else:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        with triton_utils.compiling("fla.chunk_gated_delta_rule"):
            o, final = chunk_gated_delta_rule(*args, _btHk(g, torch.float32), _btHk(beta, q.dtype), scale=1.0,
                                              initial_state=_initial(state), output_final_state=True)
    return o.transpose(1, 2).to(compute_dtype(q.dtype)), final
