"""What the Triton kernels share (ops/triton_utils.py): where they run, tile extents, the dot products' precision,
the launch layout, the one-axis grid and its limit, the launch's compile-failure handling (a stand-in kernel raises
what Triton raises). The kernels themselves: tests/attention/lavo/test_triton.py."""
from __future__ import annotations

import warnings

import pytest
import torch

triton_utils = pytest.importorskip("lavo_zoo.attention.ops.triton_utils", exc_type=ImportError)
import triton
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources, PTXASError


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


def test_the_grid_is_one_axis_up_to_its_limit():
    """Batch x heads past CUDA's 65,535 limit of the y and z axes: one x axis of programs, clear error past 2^31-1."""
    assert triton_utils.grid(70_000 * 4, "the window's forward") == (280_000,)
    assert triton_utils.grid(2**31 - 1, "x") == (2**31 - 1,)
    with pytest.raises(ValueError, match=r"the window's forward: 2147483648 Triton programs exceed the launch "
                                         r"grid's limit of 2147483647; split the batch or the sequence"):
        triton_utils.grid(2**31, "the window's forward")


class _Kernel:
    """Stands in for a @triton.jit kernel: kernel[grid](*args) raises ``error`` (or records the call)."""

    def __init__(self, error: BaseException | None = None):
        self.error, self.calls = error, []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            if self.error is not None:
                raise self.error
        return run


@pytest.mark.parametrize("error", [
    OutOfResources(300_000, 232_448, "shared memory"), PTXASError("ptxas fatal"),
    CompilationError("def _fwd(...)", None, "unsupported construct"),
    RuntimeError("Internal Triton PTX codegen error: ptxas failed"),
], ids=["out-of-resources", "ptxas", "compilation", "runtime-ptxas"])
def test_a_compile_failure_warns_once_and_marks_the_kernel_failed(monkeypatch, error):
    monkeypatch.setattr(triton_utils, "_failures", {})
    bad, good = _Kernel(error), _Kernel()
    with pytest.warns(RuntimeWarning, match=r"the Triton kernel window_fwd could not be compiled on this device"), \
            pytest.raises(triton_utils.KernelUnavailable, match="window_fwd"):
        triton_utils.launch("window_fwd", bad, (4,), 1, 2, X=3)
    assert list(triton_utils.failures()) == ["window_fwd"] and len(bad.calls) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")                               # no second warning, no second attempt
        with pytest.raises(triton_utils.KernelUnavailable):
            triton_utils.launch("window_fwd", bad, (4,), 1, 2, X=3)
        triton_utils.launch("read_fwd", good, (2,), 5)                # other kernels still launch
    assert len(bad.calls) == 1 and good.calls == [((2,), (5,), {})]


@pytest.mark.parametrize("error", [ValueError("bad argument"), torch.OutOfMemoryError("CUDA out of memory"),
                                   RuntimeError("CUDA error: an illegal memory access was encountered")])
def test_other_launch_errors_are_not_compile_failures(monkeypatch, error):
    """A bug or a full device is not hidden behind a fallback: it propagates and marks nothing."""
    monkeypatch.setattr(triton_utils, "_failures", {})
    with pytest.raises(type(error)):
        triton_utils.launch("window_fwd", _Kernel(error), (1,))
    assert triton_utils.failures() == {}


def test_a_library_kernel_launched_under_the_guard_falls_back_the_same_way(monkeypatch):
    """A library's Triton kernel (fla's) launched under ``compiling``: a compile failure warns, is recorded (the
    Triton kernels are off in the dispatch) and raises KernelUnavailable; another error propagates unmarked."""
    from lavo_zoo.attention.ops import dispatch

    monkeypatch.setattr(triton_utils, "_failures", {})
    with pytest.raises(ValueError, match="bad head dim"), triton_utils.compiling("fla_chunk"):
        raise ValueError("bad head dim")
    assert triton_utils.failures() == {}
    with pytest.warns(RuntimeWarning, match="the Triton kernel fla_chunk could not be compiled"), \
            pytest.raises(triton_utils.KernelUnavailable), triton_utils.compiling("fla_chunk"):
        raise OutOfResources(300_000, 232_448, "shared memory")
    assert list(triton_utils.failures()) == ["fla_chunk"]
    assert not dispatch.triton_runs(torch.zeros(1, 1, 4, 8))


def test_band_tiles_skip_exactly():
    """A program of `block` rows scans its band of block + span rows in tiles of band_tile(): less than one tile
    more than the band (a 16-key causal window: 80 keys per 64 queries, not the 128 of 64-key tiles)."""
    assert (triton_utils.band_tile(64, 15), triton_utils.scanned(64, 15, 16)) == (16, 80)     # w = 16 causal
    assert (triton_utils.band_tile(128, 15), triton_utils.scanned(128, 15, 16)) == (16, 144)
    assert (triton_utils.band_tile(64, 30), triton_utils.scanned(64, 30, 32)) == (32, 96)     # w = 16 noncausal
    assert (triton_utils.band_tile(64, 510), triton_utils.scanned(64, 510, 64)) == (64, 576)  # LRA: w = 256
    assert triton_utils.band_tile(64, 0) == 64                                                 # w = 1
    for block in (64, 128):
        for span in range(0, 600, 7):
            tile = triton_utils.band_tile(block, span)
            assert 0 <= triton_utils.scanned(block, span, tile) - (block + span) < tile


@pytest.mark.skipif(triton_utils.INTERPRETED, reason="the interpreter runs one fixed configuration")
def test_window_and_read_kernels_are_autotuned_over_blocks_and_warps_with_the_exact_tile():
    """On a GPU: each window kernel tunes 64 / 128 rows per program and 4 / 8 warps, every configuration pruned to
    the tile that skips exactly for the call's window; the read's forward tunes 32 / 64 / 128 queries; neither
    specialises on the sequence length."""
    from lavo_zoo.attention.lavo import triton as lavo_triton
    from lavo_zoo.attention.ops.window import triton as window_triton

    for kernel in (window_triton._fwd, window_triton._bwd_dq, window_triton._bwd_dkdv):
        assert isinstance(kernel, triton.runtime.Autotuner) and kernel.keys == window_triton.KEY
        assert sorted((c.kwargs["BM"], c.num_warps) for c in kernel.configs) == [(64, 4), (64, 8), (128, 4),
                                                                                 (128, 8)]
        causal16 = kernel.early_config_prune(kernel.configs, {"W": 16, "CAUSAL": True})
        assert {(c.kwargs["BM"], c.kwargs["BN"]) for c in causal16} == {(64, 16), (128, 16)}
        lra = kernel.early_config_prune(kernel.configs, {"W": 256, "CAUSAL": False})
        assert {(c.kwargs["BM"], c.kwargs["BN"]) for c in lra} == {(64, 64), (128, 64)}
        assert "T" in kernel.fn.do_not_specialize
    read = lavo_triton._fwd
    assert sorted(c.kwargs["BM"] for c in read.configs) == [32, 32, 64, 64, 128, 128]
    assert "T" in read.fn.do_not_specialize
