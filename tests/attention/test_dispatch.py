"""The one kernel choice (ops/dispatch.py): the (window, read) kernels for each request, device, dtype, length,
dropout and switch, stated here as literal pairs. The CUDA rules are stated on the CPU too, with the device test
(``dispatch.on_cuda``, ``triton_utils.usable``) answering as a GPU would; where a GPU is, they run on CUDA tensors
as well. The Triton interpreter's cases run in test_lavo_triton.py."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from lavo_zoo.attention.ops import dispatch
from lavo_zoo.attention.ops.dispatch import choose_kernels
from lavo_zoo.attention.ops.window import flex

CUDA = torch.cuda.is_available()
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
HAS_TRITON = importlib.util.find_spec("triton") is not None


@pytest.fixture(autouse=True)
def _switches_unset(monkeypatch):
    """Neither switch set by the environment, no earlier compile failure, unless a test says so."""
    monkeypatch.delenv("LAVO_ZOO_TRITON", raising=False)
    monkeypatch.delenv("LAVO_ZOO_FLEX", raising=False)
    monkeypatch.setattr(flex, "_failure", None)
    if HAS_TRITON:
        from lavo_zoo.attention.ops import triton_utils
        monkeypatch.setattr(triton_utils, "_failures", {})


def _q(length: int = 512, dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    return torch.zeros(1, 2, length, 8, dtype=dtype, device=device)


@pytest.mark.parametrize("backend, dropout, training, want", [
    ("auto", 0.0, True, ("recompute", "recompute")),
    ("auto", 0.1, False, ("recompute", "recompute")),   # dropout applies in training only
    ("auto", 0.1, True, ("recompute", "recompute")),    # the recompute kernels apply dropout themselves
    ("recompute", 0.0, True, ("recompute", "recompute")),
    ("recompute", 0.1, True, ("recompute", "recompute")),
    ("autograd", 0.0, False, ("autograd", "autograd")),
    ("autograd", 0.1, True, ("autograd", "autograd")),
    ("flex", 0.0, False, ("flex", "recompute")),        # forced: the read has no flex kernel
    ("flex", 0.1, True, ("recompute", "recompute")),    # flex_attention has no dropout
])
def test_cpu_choices(backend, dropout, training, want):
    assert choose_kernels(_q(), backend, dropout=dropout, training=training) == want
    assert choose_kernels(_q(), backend, dropout=dropout, training=training, auto_triton=False) == want


def test_dropout_kernels_are_all_but_flex():
    assert dispatch.DROPOUT_KERNELS == {"triton", "recompute", "autograd"}
    assert dispatch.FALLBACK in dispatch.DROPOUT_KERNELS


@pytest.mark.skipif(INTERPRETING, reason="in Triton's interpreter the kernels run on CPU tensors")
def test_triton_requested_where_it_cannot_run_falls_back_to_recompute():
    assert choose_kernels(_q(), "triton") == ("recompute", "recompute")               # a CPU tensor
    assert choose_kernels(_q(dtype=torch.float64), "triton") == ("recompute", "recompute")
    assert not dispatch.triton_runs(_q())


def test_switches_and_fp64_turn_triton_off(monkeypatch):
    assert not dispatch.triton_runs(_q(dtype=torch.float64))
    monkeypatch.setenv("LAVO_ZOO_TRITON", "0")
    assert not dispatch.triton_runs(_q())
    assert choose_kernels(_q(), "triton") == ("recompute", "recompute")


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend must be one of auto, recompute, autograd, flex, triton, got 'fast'"):
        choose_kernels(_q(), "fast")


# The CUDA rules. Until a device run of the Triton kernels has passed, 'auto' on CUDA is the path that has run on a
# GPU (flex window + recompute read); LAVO_ZOO_TRITON=1 makes it take Triton, backend='triton' forces it.
CUDA_CASES = [
    # backend, length, dtype, auto_triton, switches, dropout in training, want
    ("auto", 512, torch.float32, True, {}, False, ("flex", "recompute")),             # the verified default
    ("auto", 512, torch.bfloat16, True, {}, False, ("flex", "recompute")),
    ("auto", 16, torch.float32, True, {}, False, ("recompute", "recompute")),         # short chunks: no flex compile
    ("auto", 512, torch.float32, True, {}, True, ("recompute", "recompute")),         # flex has no dropout
    ("auto", 512, torch.float32, True, {"LAVO_ZOO_TRITON": "1"}, False, ("triton", "triton")),
    ("auto", 16, torch.float32, True, {"LAVO_ZOO_TRITON": "1"}, False, ("triton", "triton")),  # any length
    ("auto", 512, torch.float32, True, {"LAVO_ZOO_TRITON": "1"}, True, ("triton", "triton")),  # dropout inside
    ("auto", 512, torch.float64, True, {"LAVO_ZOO_TRITON": "1"}, False, ("flex", "recompute")),  # no fp64 Triton
    ("auto", 512, torch.float32, False, {"LAVO_ZOO_TRITON": "1"}, False, ("flex", "recompute")),  # local keeps flex
    ("auto", 512, torch.float32, True, {"LAVO_ZOO_FLEX": "0"}, False, ("recompute", "recompute")),
    ("triton", 512, torch.float32, True, {}, False, ("triton", "triton")),          # selectable without the switch
    ("triton", 16, torch.float32, False, {}, True, ("triton", "triton")),
    ("triton", 512, torch.float64, True, {}, False, ("recompute", "recompute")),
    ("triton", 512, torch.float32, True, {"LAVO_ZOO_TRITON": "0"}, False, ("recompute", "recompute")),
    ("flex", 512, torch.float32, True, {}, True, ("recompute", "recompute")),
]


def _cuda_case_ids(case) -> str:
    backend, length, dtype, auto_triton, switches, dropout, _ = case
    return "-".join([backend, str(length), str(dtype).split(".")[-1], "triton" if auto_triton else "local",
                     *(f"{k}={v}" for k, v in switches.items()), "dropout" if dropout else "eval"])


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
@pytest.mark.parametrize("case", CUDA_CASES, ids=_cuda_case_ids)
def test_cuda_choices_stated_on_the_cpu(monkeypatch, case):
    """The CUDA rules with the device test answering 'CUDA' for these CPU tensors (the kernels do not run here)."""
    from lavo_zoo.attention.ops import triton_utils

    backend, length, dtype, auto_triton, switches, dropout, want = case
    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    monkeypatch.setattr(triton_utils, "usable", lambda t: t.dtype in triton_utils.DTYPES and t.numel() > 0)
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    assert choose_kernels(_q(length, dtype), backend, dropout=0.1 if dropout else 0.0, training=True,
                          auto_triton=auto_triton) == want


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("case", CUDA_CASES, ids=_cuda_case_ids)
def test_cuda_choices(monkeypatch, case):
    backend, length, dtype, auto_triton, switches, dropout, want = case
    if "triton" in want and not HAS_TRITON:
        pytest.skip("Triton is not installed")
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    assert choose_kernels(_q(length, dtype, "cuda"), backend, dropout=0.1 if dropout else 0.0, training=True,
                          auto_triton=auto_triton) == want


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")
def test_a_triton_compile_failure_turns_triton_off(monkeypatch):
    from lavo_zoo.attention.ops import triton_utils

    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    monkeypatch.setattr(triton_utils, "usable", lambda t: True)
    monkeypatch.setenv("LAVO_ZOO_TRITON", "1")
    assert choose_kernels(_q()) == ("triton", "triton")
    monkeypatch.setattr(triton_utils, "_failures", {"window_fwd": "OutOfResources: shared memory"})
    assert not dispatch.triton_runs(_q())
    assert choose_kernels(_q()) == ("flex", "recompute") and choose_kernels(_q(), "triton") == ("recompute",
                                                                                                "recompute")


def test_a_flex_compile_failure_turns_flex_off(monkeypatch):
    monkeypatch.setattr(dispatch, "on_cuda", lambda q: True)
    assert choose_kernels(_q()) == ("flex", "recompute")
    monkeypatch.setattr(flex, "_failure", "RuntimeError: no tile configuration fits")
    assert choose_kernels(_q()) == ("recompute", "recompute")
