"""What the Triton kernels share (ops/triton_utils.py): where they run, tile extents, the dot products' precision,
the launch layout. The kernels themselves: test_lavo_triton.py."""
from __future__ import annotations

import pytest
import torch

triton_utils = pytest.importorskip("lavo_zoo.attention.ops.triton_utils", exc_type=ImportError)


def test_usable_on_cuda_or_in_the_interpreter_for_half_and_fp32_only():
    cpu = torch.zeros(2, 3)
    assert triton_utils.usable(cpu) == triton_utils.INTERPRETED
    assert not triton_utils.usable(cpu.double()) and not triton_utils.usable(torch.zeros(0))
    if torch.cuda.is_available():
        for dtype, want in [(torch.float16, True), (torch.bfloat16, True), (torch.float32, True),
                            (torch.float64, False)]:
            assert triton_utils.usable(torch.zeros(2, 3, dtype=dtype, device="cuda")) == want


def test_block_dim_is_a_power_of_two_of_at_least_16():
    assert [triton_utils.block_dim(n) for n in (1, 8, 16, 17, 24, 64, 65)] == [16, 16, 16, 32, 32, 64, 128]


def test_precision_follows_torchs_float32_matmul_setting():
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert triton_utils.precision(torch.float32) == "ieee"
        torch.set_float32_matmul_precision("high")
        assert triton_utils.precision(torch.float32) == "tf32"
    finally:
        torch.set_float32_matmul_precision(before)
    assert triton_utils.precision(torch.bfloat16) == "tf32"  # ignored for half operands


def test_rowmajor_and_strides():
    t = torch.randn(2, 3, 5, 4)                        # [B, H, T, d]
    assert triton_utils.rowmajor(t) is t and triton_utils.strides(t) == (60, 20, 4)
    heads_major = t.transpose(1, 2)                    # still unit column stride: no copy
    assert triton_utils.rowmajor(heads_major) is heads_major and triton_utils.strides(heads_major) == (60, 4, 20)
    cols = t.transpose(-1, -2)
    copy = triton_utils.rowmajor(cols)
    assert copy.stride(-1) == 1 and torch.equal(copy, cols)
