"""The one kernel choice (ops/dispatch.py): the (window, read) kernels for each request, device, dtype, length,
dropout and switch, stated here as literal pairs. CPU cases run everywhere; the CUDA cases where a GPU is (with
Triton installed for the Triton ones); the Triton interpreter's cases run in test_lavo_triton.py."""
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
def _switches_on(monkeypatch):
    """Neither path switched off by the environment or by an earlier compile failure, unless a test says so."""
    monkeypatch.delenv("LAVO_ZOO_TRITON", raising=False)
    monkeypatch.delenv("LAVO_ZOO_FLEX", raising=False)
    monkeypatch.setattr(flex, "_failure", None)


def _q(length: int = 512, dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    return torch.zeros(1, 2, length, 8, dtype=dtype, device=device)


@pytest.mark.parametrize("backend, dropout, training, want", [
    ("auto", 0.0, True, ("recompute", "recompute")),
    ("auto", 0.1, False, ("recompute", "recompute")),   # dropout applies in training only
    ("auto", 0.1, True, ("autograd", "autograd")),      # the only kernels with dropout
    ("recompute", 0.0, True, ("recompute", "recompute")),
    ("recompute", 0.1, True, ("autograd", "autograd")),
    ("autograd", 0.0, False, ("autograd", "autograd")),
    ("flex", 0.0, False, ("flex", "recompute")),        # forced: the read has no flex kernel
    ("flex", 0.1, True, ("autograd", "autograd")),
    ("triton", 0.1, True, ("autograd", "autograd")),
])
def test_cpu_choices(backend, dropout, training, want):
    assert choose_kernels(_q(), backend, dropout=dropout, training=training) == want
    assert choose_kernels(_q(), backend, dropout=dropout, training=training, auto_triton=False) == want


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


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("backend, length, dtype, auto_triton, switched_off, want", [
    ("auto", 512, torch.float32, True, (), ("triton", "triton")),
    ("auto", 16, torch.float32, True, (), ("triton", "triton")),            # Triton whatever the length
    ("auto", 512, torch.bfloat16, True, (), ("triton", "triton")),
    ("auto", 512, torch.float64, True, (), ("flex", "recompute")),          # no fp64 Triton kernel
    ("auto", 512, torch.float32, False, (), ("flex", "recompute")),         # the local mechanism keeps flex
    ("auto", 16, torch.float32, False, (), ("recompute", "recompute")),     # short chunks: no flex compile
    ("auto", 512, torch.float32, True, ("LAVO_ZOO_TRITON",), ("flex", "recompute")),
    ("auto", 512, torch.float32, True, ("LAVO_ZOO_TRITON", "LAVO_ZOO_FLEX"), ("recompute", "recompute")),
    ("triton", 512, torch.float64, True, (), ("recompute", "recompute")),
    ("triton", 16, torch.float32, False, (), ("triton", "triton")),
])
def test_cuda_choices(monkeypatch, backend, length, dtype, auto_triton, switched_off, want):
    if want[0] == "triton" and not HAS_TRITON:
        pytest.skip("Triton is not installed")
    for name in switched_off:
        monkeypatch.setenv(name, "0")
    assert choose_kernels(_q(length, dtype, "cuda"), backend, auto_triton=auto_triton) == want
    assert choose_kernels(_q(length, dtype, "cuda"), backend, dropout=0.1, training=True,
                          auto_triton=auto_triton) == ("autograd", "autograd")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_cuda_flex_compile_failure_turns_flex_off(monkeypatch):
    monkeypatch.setenv("LAVO_ZOO_TRITON", "0")
    monkeypatch.setattr(flex, "_failure", "RuntimeError: no tile configuration fits")
    assert choose_kernels(_q(device="cuda")) == ("recompute", "recompute")
