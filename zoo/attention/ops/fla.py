"""What every op's flash-linear-attention glue shares (the ``fla`` extra: ``pip install "lavo-zoo[fla]"``): whether
the library imports here, where its kernels can run, its tensor layout, and the one limit it has for every op.

Each op folder that runs on fla keeps its own calls and limits in its ``fla.py`` (``ops/<op>/fla.py``: the kernel
function with the op's signature, named after the algorithm, and ``applies``, the calls fla covers), declared in the
op's ``__init__.py`` beside the PyTorch chunked form, which is its fallback. What they take from here:

- where they run (:func:`runs`): a CUDA tensor, the dispatch's Triton kernels usable there
  (:func:`~lavo_zoo.attention.ops.dispatch.triton_runs`: ``LAVO_ZOO_TRITON`` not 0, Triton, fp16 / bf16 / fp32, no
  Triton kernel failed to compile in this process), ``fla`` importable. An op whose fla kernels take fewer dtypes
  declares them on its kernel (:class:`~lavo_zoo.attention.ops.dispatch.Kernel` ``dtypes``; :data:`HALF`). fla's
  kernels do not run in Triton's interpreter (its autotuned kernels fail there), so they are checked on a GPU only
  (benchmarks/gpu/check_kernels.py, the ``fla`` cases, which it builds from the ops' declared ``FLA_CALLS``).
- its layout (:func:`to_fla`, :func:`initial_state`): fla takes [B, T, H, ...] and keeps states in fp32.
- the limit every op shares (:func:`gated_backward_refused`): no backward of a per-head gate on a Hopper GPU under
  Triton 3.4 to 3.7.0 without ``tilelang`` (fla refuses it there: wrong results).
- 'auto' takes them under the dispatch's Triton rule (:func:`~lavo_zoo.attention.ops.dispatch.triton_by_default`),
  as the project's own Triton kernels; ``kernels='fla'`` requests them.
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

from lavo_zoo.attention.ops import dispatch

HALF = (torch.float16, torch.bfloat16)  # the dtypes of an fla kernel that refuses fp32 (its Kernel's ``dtypes``)


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


# ------------------------------------------------------------------------------------------- the shared limit
def needs_backward(*tensors: torch.Tensor | None) -> bool:
    """Whether a call on these tensors will be differentiated (grad mode on and one of them requires grad).

    Args:
        *tensors: the call's tensor arguments (None where absent).
    """
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


@functools.cache
def gated_backward_refused(device: torch.device) -> bool:
    """Whether fla 0.6 refuses the backward of a per-head gate here: a Hopper GPU (compute capability 9) under
    Triton >= 3.4.0 and < 3.7.1 without ``tilelang`` (its ``chunk_bwd_dqkwg`` raises, naming wrong results there).

    Args:
        device: the CUDA device of the call.
    """
    import triton
    from packaging.version import Version

    hopper = torch.cuda.get_device_capability(device)[0] == 9
    broken = (3, 4, 0) <= Version(triton.__version__).release < (3, 7, 1)
    return hopper and broken and importlib.util.find_spec("tilelang") is None


# ------------------------------------------------------------------------------------------------ the layout
def to_fla(t: torch.Tensor | None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """[B, H, T, ...] -> fla's [B, T, H, ...] layout, contiguous (in ``dtype``, where given; None stays None).

    Args:
        t: a per-token tensor of an op's call.
        dtype: the dtype fla takes it in (None: t's own).
    """
    if t is None:
        return None
    t = t.transpose(1, 2)
    return (t if dtype is None else t.to(dtype)).contiguous()


def initial_state(state: torch.Tensor | None) -> torch.Tensor | None:
    """The state before the first token [B, H, K, V] as fla takes it: fp32 (its kernels assert it).

    Args:
        state: the op's ``state`` argument (None: zeros).
    """
    return None if state is None else state.float()
