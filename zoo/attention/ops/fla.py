"""flash-linear-attention's kernels (the ``fla`` extra: ``pip install "lavo-zoo[fla]"``) for the recurrent ops, on
CUDA where that package is installed; everywhere else the PyTorch chunked forms of
:mod:`~lavo_zoo.attention.ops.gated_linear` and :mod:`~lavo_zoo.attention.ops.delta_rule`.

The kernels are functions named after their algorithm, with the PyTorch forms' signatures and results, and the
choice is one call per op (:func:`gated_linear_kernel`, :func:`delta_rule_kernel`), made once per call by the
mechanism::

    o, state = gated_linear_kernel(q)(q, k, v, g, state, chunk_size)

fla's kernel runs when: ``LAVO_ZOO_FLA`` is not 0, ``fla`` imports, the tensors are on CUDA, and (delta rule) in
half precision (fla's delta-rule kernels refuse fp32), and no fla kernel failed in this process. A kernel that raises
is reported once (a warning naming it and the error) and the PyTorch form runs from then on. The device check
(benchmarks/gpu/check_kernels.py, the ``fla`` cases) compares each kernel with the PyTorch form. fla's kernels do
not run in Triton's interpreter (its autotuned kernels fail there with fla 0.6), so they are checked on a GPU only.
"""
from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Callable

import torch

from lavo_zoo.attention.ops import delta_rule as torch_delta_rule
from lavo_zoo.attention.ops import gated_linear as torch_gated_linear

HALF = (torch.float16, torch.bfloat16)
_FAILED: dict[str, str] = {}  # kernel name -> the error that stopped it in this process


def installed() -> bool:
    """Whether flash-linear-attention is importable (without importing it)."""
    return importlib.util.find_spec("fla") is not None


def runs(q: torch.Tensor, dtypes: tuple[torch.dtype, ...] = (*HALF, torch.float32)) -> bool:
    """Whether fla's kernels run for queries q: ``LAVO_ZOO_FLA`` not 0, fla installed, CUDA, a dtype they take, no
    fla kernel failed in this process."""
    return (os.environ.get("LAVO_ZOO_FLA", "") != "0" and q.is_cuda and q.dtype in dtypes and not _FAILED
            and installed())


def failures() -> dict[str, str]:
    """The fla kernels that failed in this process, with their errors."""
    return dict(_FAILED)


def _fallback(name: str, error: Exception) -> None:
    _FAILED[name] = f"{type(error).__name__}: {error}"
    warnings.warn(f"flash-linear-attention's {name} failed ({_FAILED[name][:300]}); the PyTorch kernels run from "
                  "now on", RuntimeWarning, stacklevel=3)


def _btHk(t: torch.Tensor) -> torch.Tensor:
    """[B, H, T, ...] -> fla's [B, T, H, ...] layout."""
    return t.transpose(1, 2).contiguous()


def fla_chunk_gated_linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None,
                           state: torch.Tensor | None = None, chunk_size: int = 64
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~lavo_zoo.attention.ops.gated_linear.chunk_gated_linear` on fla's kernels: ``chunk_simple_gla`` (no
    gate, or one per head) or ``chunk_gla`` (one per key channel); ``chunk_size`` is fla's own."""
    try:
        if g is not None and g.dim() == 4:
            from fla.ops.gla import chunk_gla

            o, final = chunk_gla(_btHk(q), _btHk(k), _btHk(v), g=_btHk(g), scale=1.0, initial_state=state,
                                 output_final_state=True)
        else:
            from fla.ops.simple_gla import chunk_simple_gla

            o, final = chunk_simple_gla(_btHk(q), _btHk(k), _btHk(v), g=None if g is None else _btHk(g), scale=1.0,
                                        initial_state=state, output_final_state=True)
    except Exception as e:  # noqa: BLE001 - any failure of the optional kernel: the PyTorch form instead
        _fallback("chunk_gla", e)
        return torch_gated_linear.chunk_gated_linear(q, k, v, g, state, chunk_size)
    return o.transpose(1, 2), final


def fla_chunk_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                         g: torch.Tensor | None = None, state: torch.Tensor | None = None, chunk_size: int = 64
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~lavo_zoo.attention.ops.delta_rule.chunk_delta_rule` on fla's kernels: ``chunk_delta_rule`` or, with
    a gate, ``chunk_gated_delta_rule`` (queries and keys as given: normalised by the caller)."""
    try:
        if g is None:
            from fla.ops.delta_rule import chunk_delta_rule

            o, final = chunk_delta_rule(_btHk(q), _btHk(k), _btHk(v), _btHk(beta), scale=1.0, initial_state=state,
                                        output_final_state=True)
        else:
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule

            o, final = chunk_gated_delta_rule(_btHk(q), _btHk(k), _btHk(v), _btHk(g), _btHk(beta), scale=1.0,
                                              initial_state=state, output_final_state=True)
    except Exception as e:  # noqa: BLE001 - any failure of the optional kernel: the PyTorch form instead
        _fallback("chunk_delta_rule", e)
        return torch_delta_rule.chunk_delta_rule(q, k, v, beta, g, state, chunk_size)
    return o.transpose(1, 2), final


Kernel = Callable[..., tuple[torch.Tensor, torch.Tensor]]  # (..., state, chunk_size) -> (o, final state)


def gated_linear_kernel(q: torch.Tensor) -> Kernel:
    """The gated-linear-attention kernel for queries q: fla's where :func:`runs`, else the PyTorch chunked form."""
    return fla_chunk_gated_linear if runs(q) else torch_gated_linear.chunk_gated_linear


def delta_rule_kernel(q: torch.Tensor) -> Kernel:
    """The delta-rule kernel for queries q: fla's where :func:`runs` in half precision, else the PyTorch form."""
    return fla_chunk_delta_rule if runs(q, HALF) else torch_delta_rule.chunk_delta_rule
