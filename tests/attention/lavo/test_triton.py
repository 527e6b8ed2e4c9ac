"""LAVO's Triton kernels (ops/window/triton.py, lavo/triton.py), run in Triton's interpreter on CPU tensors: float32
outputs and every gradient against float64 references (the dense window, the autograd read, the layer's recompute
path), causal / noncausal / cross, with padding, T not a multiple of w or of the block, T < w; and the kernel choice
where the kernels run (the interpreter). Block sizes are 16 so that small sequences cross block boundaries.

Triton decides on interpretation when it is first imported (its own library functions are ``@triton.jit`` too), so
these tests run in a subprocess started with TRITON_INTERPRET=1 (:func:`test_kernels_in_the_triton_interpreter`);
in a process started that way (``TRITON_INTERPRET=1 pytest tests/attention/lavo/test_triton.py``) they run
directly, and the driver skips."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.lavo.ops import LAVO_KERNELS
from lavo_zoo.attention.lavo.read import read_memory_autograd
from lavo_zoo.attention.ops.dispatch import triton_runs
from lavo_zoo.attention.ops.naive import key_mask_4d
from lavo_zoo.attention.ops.window import window_attention
from lavo_zoo.attention.ops.window.blocked import window_autograd
from lavo_zoo.attention.ops.window.naive import dense_attention, relative_bias, window_mask

pytest.importorskip("triton")

F32, F64 = torch.float32, torch.float64
TOL = {"rtol": 1e-4, "atol": 2e-5}  # float32 kernels against float64 (measured errors ~1e-6)


INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(not INTERPRETING, reason="runs in the Triton-interpreter subprocess of "
                                 "test_kernels_in_the_triton_interpreter")


@pytest.mark.skipif(INTERPRETING, reason="this process runs the tests itself")
def test_kernels_in_the_triton_interpreter():
    """Runs this file's other tests in a fresh process with TRITON_INTERPRET=1 (it must be set before Triton is
    first imported, which other tests of this session may have done)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("LAVO_ZOO_TRITON", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", __file__, "-k",
                          "not test_kernels_in_the_triton_interpreter"], env=env, cwd=Path(__file__).parents[3],
                         capture_output=True, text=True, timeout=900, check=False)
    skipped = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert len(skipped) == 1 and "bf16" in skipped[0], skipped  # only the bf16 case the interpreter cannot run


def _pair(choice) -> tuple[str, str]:
    """The (window, read) kernels of a choice."""
    return choice.window.name, choice.read.name


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)  # the same inputs on every run


@pytest.fixture(scope="module")
def kernels():
    """(window module, read module), decorated for the interpreter in this process."""
    from lavo_zoo.attention.lavo import triton as lavo_triton
    from lavo_zoo.attention.ops import triton_utils
    from lavo_zoo.attention.ops.window import triton as window_triton
    assert triton_utils.INTERPRETED and triton_utils.usable(torch.zeros(1))
    return window_triton, lavo_triton


def _leaves(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    return [torch.randn(*s, dtype=F32, requires_grad=True) for s in shapes]


def _f64(*ts: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().double().requires_grad_() for t in ts]


def _close(got: list[torch.Tensor], want: list[torch.Tensor], names: list[str]) -> None:
    for name, a, b in zip(names, got, want):
        torch.testing.assert_close(a.double(), b, **TOL, msg=lambda m, name=name: f"{name}: {m}")


# ------------------------------------------------------------------------------------------------- the window
@interpreted
@pytest.mark.parametrize("causal, w, T, masked, bias, block_n", [
    (True, 5, 21, True, True, 16),    # T % w and T % block != 0, padding holes
    (False, 5, 21, True, True, 32),   # noncausal; key tiles larger than query blocks
    (True, 5, 3, False, True, 16),    # T < w
    (False, 18, 24, False, False, 16),  # w > block: the band spans three key tiles; no bias
    (True, 18, 24, True, True, None),   # the default configuration (64-query blocks, the band's exact tile)
])
def test_window_kernels_match_the_dense_reference(kernels, causal, w, T, masked, bias, block_n):
    _check_window_kernels(kernels, causal, w, T, masked, bias, 16 if block_n else None, block_n)


@interpreted
@pytest.mark.parametrize("causal", [True, False])
def test_window_kernels_in_the_largest_autotuned_blocks(kernels, causal):
    """128 queries per program with the tile the autotuner pairs with it (the interpreter runs 64 by default)."""
    from lavo_zoo.attention.ops.triton_utils import band_tile

    w = 16
    _check_window_kernels(kernels, causal, w, 150, True, True, 128, band_tile(128, (w - 1) * (1 if causal else 2)))


def _check_window_kernels(kernels, causal: bool, w: int, T: int, masked: bool, bias: bool, block_m, block_n) -> None:
    window_triton, _ = kernels
    B, H, d = 2, 2, 8
    q, k, v, table = _leaves((B, H, T, d), (B, H, T, d), (B, H, T, d), (H, 2 * w - 1))
    mask = None
    if masked:
        mask = torch.rand(B, T) > 0.3
        mask[:, 0] = True
    rows = torch.ones(B, 1, T, 1) if mask is None else mask[:, None, :, None].to(F32)  # padded rows: garbage
    g = torch.randn(B, H, T, d) * rows
    out = window_triton.triton_window_attention(q, k, v, w, causal=causal, bias=table if bias else None,
                                                key_mask=mask, block_m=block_m, block_n=block_n)
    leaves = [q, k, v] + ([table] if bias else [])
    grads = torch.autograd.grad((out * g).sum(), leaves)
    q2, k2, v2, t2 = _f64(q, k, v, table)
    allowed = window_mask(T, w, causal)[None, None] & key_mask_4d(mask, B, T)
    ref = dense_attention(q2, k2, v2, allowed, relative_bias(t2, T, w) if bias else None)
    refs = torch.autograd.grad((ref * g.double()).sum(), [q2, k2, v2] + ([t2] if bias else []))
    _close([out * rows, *grads], [ref * rows.double(), *refs], ["out", "dq", "dk", "dv", "dbias"])


@interpreted
@pytest.mark.parametrize("P, T, w", [
    (3, 21, 5),    # a streaming chunk after 3 tokens
    (4, 2, 5),     # a 2-token chunk, T < w
    (9, 21, 17),   # 16 + w - 1 keys per block fill the key tiles exactly: a band not shifted by P would miss keys
])
def test_window_kernels_with_a_streaming_prefix(kernels, P, T, w):
    """Causal chunk whose window reaches into the state's last P keys: output and the gradients of q, k, v, the EPE
    and the prefix keys and values against the float64 blocked kernel."""
    window_triton, _ = kernels
    B, H, d = 2, 2, 8
    q, k, v, table, pk, pv = _leaves((B, H, T, d), (B, H, T, d), (B, H, T, d), (H, 2 * w - 1), (B, H, P, d),
                                     (B, H, P, d))
    g = torch.randn(B, H, T, d)
    out = window_triton.triton_window_attention(q, k, v, w, causal=True, bias=table, prefix=(pk, pv), block_m=16,
                                                block_n=16)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v, table, pk, pv))
    q2, k2, v2, t2, pk2, pv2 = _f64(q, k, v, table, pk, pv)
    ref = window_attention(q2, k2, v2, w, causal=True, bias=t2, prefix=(pk2, pv2), kernel="recompute")
    refs = torch.autograd.grad((ref * g.double()).sum(), (q2, k2, v2, t2, pk2, pv2))
    _close([out, *grads], [ref, *refs], ["out", "dq", "dk", "dv", "dbias", "dprefix_k", "dprefix_v"])


@interpreted
def test_window_dispatch(kernels):
    """kernel='triton' runs the kernels where they apply (dropout included) and falls back for fp64."""
    q, k, v = (torch.randn(1, 2, 9, 8) for _ in range(3))
    assert triton_runs(q) and not triton_runs(q.double())
    assert _pair(LAVO_KERNELS.choose(q, "triton", dropout=0.1, training=True)) == ("triton", "triton")  # dropout
    torch.testing.assert_close(window_attention(q, k, v, 4, causal=True, kernel="triton"),
                               window_attention(q, k, v, 4, causal=True, kernel="recompute"), **TOL)


@interpreted
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs(kernels, dtype):
    """Half-precision q, k, v, bases (tl.dot on half operands, fp32 statistics, half outputs and gradients): the
    window (causal, padded, with EPE) and the per-window read within 3e-3 of the float64 reference's largest entry."""
    if dtype == torch.bfloat16:
        pytest.skip("Triton 3.6's interpreter multiplies bf16 tl.dot operands wrongly (a 16x16 product is off by "
                    "1e10); fp16 covers the half-precision paths here, bf16 runs in benchmarks/gpu/check_kernels.py")
    window_triton, lavo_triton = kernels
    B, H, T, d, w, r = 2, 2, 37, 16, 5, 4
    q, k, v = (torch.randn(B, H, T, d).to(dtype).requires_grad_() for _ in range(3))
    table = torch.randn(H, 2 * w - 1, requires_grad=True)
    mem = torch.randn(B, H, 8, d, requires_grad=True)
    bases = torch.linalg.qr(torch.randn(H, d, r)).Q.mT.contiguous().to(dtype).requires_grad_()
    mask = torch.rand(B, T) > 0.3
    mask[:, 0] = True
    rows = mask[:, None, :, None].double()
    g = torch.randn(B, H, T, d) * rows.float()
    local = window_triton.triton_window_attention(q, k, v, w, causal=True, bias=table, key_mask=mask, block_m=16,
                                                  block_n=16)
    glob = lavo_triton.read_memory_triton(q, mem, bases, 2, 5, block_m=16)
    got = [local * rows, glob, *torch.autograd.grad(((local + glob) * g).sum(), (q, k, v, table, mem, bases))]
    q2, k2, v2, t2, m2, b2 = _f64(q, k, v, table, mem, bases)
    allowed = window_mask(T, w, causal=True)[None, None] & key_mask_4d(mask, B, T)
    ref_local = dense_attention(q2, k2, v2, allowed, relative_bias(t2, T, w))
    ref_glob = read_memory_autograd(q2, m2, b2, 2, 5)
    want = [ref_local * rows, ref_glob, *torch.autograd.grad(((ref_local + ref_glob) * g.double()).sum(),
                                                             (q2, k2, v2, t2, m2, b2))]
    assert [t.dtype for t in (local, glob, *got[2:])] == [dtype] * 5 + [torch.float32, torch.float32, dtype]
    for name, a, b in zip(["local", "global", "dq", "dk", "dv", "depe", "dmem", "dbases"], got, want):
        err = (a.double() - b).abs().max().item()
        assert err <= 3e-3 * b.abs().max().item(), (name, err)


@interpreted
@pytest.mark.parametrize("causal, P, masked", [(True, 3, False), (False, 0, True)])
def test_window_dropout_equals_the_autograd_window_with_the_kernels_mask(kernels, causal, P, masked):
    """Dropout inside the window kernels: output and every gradient equal the float64 autograd window under the
    mask the kernels draw (materialised by dropout_mask from the same seed), with other calls between forward and
    backward (backward regenerates the forward's mask)."""
    from lavo_zoo.attention.ops.triton_utils import dropout_mask

    window_triton, _ = kernels
    B, H, T, d, w, p, seed = 2, 2, 13, 8, 5, 0.3, 1234
    q, k, v, table, pk, pv = _leaves((B, H, T, d), (B, H, T, d), (B, H, T, d), (H, 2 * w - 1), (B, H, P, d),
                                     (B, H, P, d))
    mask = None
    if masked:
        mask = torch.rand(B, T) > 0.3
        mask[:, 0] = True
    rows = torch.ones(B, 1, T, 1) if mask is None else mask[:, None, :, None].to(F32)
    g = torch.randn(B, H, T, d) * rows
    prefix = (pk, pv) if P else None
    run = lambda s: window_triton.triton_window_attention(q, k, v, w, causal=causal, bias=table, key_mask=mask,
                                                          prefix=prefix, dropout=p, seed=s, block_m=16, block_n=16)
    out = run(seed)
    run(seed + 1)                                       # another mask between forward and backward
    leaves = [q, k, v, table] + ([pk, pv] if P else [])
    grads = torch.autograd.grad((out * g).sum(), leaves)
    keep = dropout_mask(seed, (B, H, T, 2 * w - 1), p, "cpu").double()
    q2, k2, v2, t2, pk2, pv2 = _f64(q, k, v, table, pk, pv)
    ref = window_autograd(q2, [pk2, k2] if P else [k2], [pv2, v2] if P else [v2], w, causal, t2, mask, P, keep=keep)
    refs = torch.autograd.grad((ref * g.double()).sum(), [q2, k2, v2, t2] + ([pk2, pv2] if P else []))
    _close([out * rows, *grads], [ref * rows.double(), *refs], ["out", "dq", "dk", "dv", "dbias", "dpk", "dpv"])
    plain = window_triton.triton_window_attention(q, k, v, w, causal=causal, bias=table, key_mask=mask,
                                                  prefix=prefix, block_m=16, block_n=16)
    assert not torch.allclose(out * rows, plain * rows)


@interpreted
def test_dropout_mask_drops_at_rate_p_and_repeats(kernels):
    from lavo_zoo.attention.ops.triton_utils import dropout_mask

    p, shape = 0.25, (2, 3, 64, 31)
    z = dropout_mask(99, shape, p, "cpu")
    n = z.numel()
    assert z.unique().tolist() == [0.0, pytest.approx(1 / (1 - p))]
    assert abs((z == 0).double().mean().item() - p) < 4 * (p * (1 - p) / n) ** 0.5   # within 4 standard deviations
    assert torch.equal(z, dropout_mask(99, shape, p, "cpu")) and not torch.equal(z, dropout_mask(98, shape, p, "cpu"))


class _Uncompilable:
    """Stands in for a @triton.jit kernel whose compilation fails on the device (as OutOfResources does)."""

    def __getitem__(self, grid):
        from triton.runtime.errors import OutOfResources

        def launch(*args, **kwargs):
            raise OutOfResources(300_000, 232_448, "shared memory")
        return launch


@pytest.fixture
def no_failures(monkeypatch):
    from lavo_zoo.attention.ops import triton_utils
    monkeypatch.setattr(triton_utils, "_failures", {})
    return triton_utils


@interpreted
def test_a_forward_kernel_that_fails_to_compile_falls_back_with_one_warning(kernels, monkeypatch, no_failures):
    """The window's forward kernel cannot be compiled: one warning naming it and the reason, the call (and every
    later one) runs on the recompute kernels with the same result, and the choice of kernels says so."""
    window_triton, _ = kernels
    monkeypatch.setattr(window_triton, "_fwd", _Uncompilable())
    attn = _layer("causal")
    ref = copy.deepcopy(attn)
    ref.kernels = "recompute"
    x = torch.randn(2, 11, 16, requires_grad=True)
    q = torch.zeros(1, 2, 11, 8)
    assert triton_runs(q)
    with pytest.warns(RuntimeWarning, match=r"Triton kernel window_fwd could not be compiled .*OutOfResources"):
        y = attn(x)
    assert attn.kernels_used == "recompute" and not triton_runs(q) and "window_fwd" in no_failures.failures()
    torch.testing.assert_close(y, ref(x), **TOL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # warned once: later calls are silent
        torch.testing.assert_close(attn(x), y, rtol=0, atol=0)
    assert _pair(attn.choose_kernels(q)) == ("recompute", "recompute")


@interpreted
def test_backward_kernels_that_fail_to_compile_leave_the_gradients_to_pytorch(kernels, monkeypatch, no_failures):
    """The window's dK/dV kernel and the read's backward kernel cannot be compiled: the gradients (under dropout:
    the forward's mask) come from the PyTorch kernels, equal to the Triton kernels' own."""
    window_triton, lavo_triton = kernels
    B, H, T, d, w, r, p, seed = 2, 2, 9, 8, 4, 4, 0.3, 77
    q, k, v, table, mem = _leaves((B, H, T, d), (B, H, T, d), (B, H, T, d), (H, 2 * w - 1), (B, H, 3, d))
    bases = torch.linalg.qr(torch.randn(H, d, r)).Q.mT.contiguous().requires_grad_()
    g = torch.randn(B, H, T, d)

    log_t, gain = (torch.randn(H) * 0.5).requires_grad_(), torch.randn(H).requires_grad_()

    def grads():  # the layer's causal path: the window, then the fused read with temperature and learned gain
        local = window_triton.triton_window_attention(q, k, v, w, causal=True, bias=table, dropout=p, seed=seed,
                                                      block_m=16, block_n=16)
        out = lavo_triton.read_memory_triton(q, mem, bases, 1, w, block_m=16, dropout=p, seed=seed,
                                             log_temperature=log_t, local=local, gain=gain)
        return torch.autograd.grad((out * g).sum(), (q, k, v, table, mem, bases, log_t, gain))
    want = grads()
    monkeypatch.setattr(window_triton, "_bwd_dkdv", _Uncompilable())
    monkeypatch.setattr(lavo_triton, "_bwd", _Uncompilable())
    with pytest.warns(RuntimeWarning) as record:
        got = grads()
    assert sorted(str(w.message).split()[3] for w in record) == ["read_bwd", "window_bwd_dkdv"]
    for name, a, b in zip(["dq", "dk", "dv", "dbias", "dmem", "dbases", "dtemperature", "dgain"], got, want):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, name=name: f"{name}: {m}")


class _SharedMemoryOver:
    """Stands in for the read's backward kernel on a device whose shared memory holds blocks of at most ``rows``
    queries: a larger block raises OutOfResources at launch (as the device does); a smaller one runs the kernel."""

    def __init__(self, kernel, rows: int) -> None:
        self.kernel, self.rows, self.blocks = kernel, rows, []

    def __getitem__(self, grid):
        from triton.runtime.errors import OutOfResources

        def launch(*args, **kwargs):
            self.blocks.append(kwargs["BM"])
            if kwargs["BM"] > self.rows:
                raise OutOfResources(kwargs["BM"] * 4096, self.rows * 4096, "shared memory")
            return self.kernel[grid](*args, **kwargs)
        return launch


@interpreted
def test_a_backward_block_too_large_for_the_device_retries_smaller(kernels, monkeypatch, no_failures):
    """The read's backward in a block of 64 queries needs more shared memory than the device has (fp32, d = 128 on
    an H200): the backward takes the next smaller block that fits, silently, with the same gradients, and the Triton
    kernels stay on."""
    _, lavo_triton = kernels
    B, H, T, d, r = 1, 2, 70, 8, 4
    q, mem = _leaves((B, H, T, d), (B, H, 1, d))
    bases = torch.linalg.qr(torch.randn(H, d, r)).Q.mT.contiguous().requires_grad_()
    g = torch.randn(B, H, T, d)

    def grads():
        out = lavo_triton.read_memory_triton(q, mem, bases)          # the backward's block size left to the kernel
        return torch.autograd.grad((out * g).sum(), (q, mem, bases))
    want = grads()
    small = _SharedMemoryOver(lavo_triton._bwd, rows=16)
    monkeypatch.setattr(lavo_triton, "_bwd", small)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                 # no compile-failure warning
        got = grads()
    assert small.blocks == list(lavo_triton.BACKWARD_BLOCKS) and small.blocks[-1] == 16
    assert not no_failures.failures() and triton_runs(q)
    for name, a, b in zip(["dq", "dmem", "dbases"], got, want):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, name=name: f"{name}: {m}")
    small.rows = 8                                                     # no block fits: PyTorch's gradients, warned
    with pytest.warns(RuntimeWarning, match="read_bwd could not be compiled"):
        got = grads()
    assert "read_bwd" in no_failures.failures()
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)


@interpreted
def test_offsets_are_64_bit(kernels):
    """Queries whose row stride times T passes 2^31 elements (a view into a 4.5 GB virtual buffer, of which only the
    rows read are touched): the window and the read load the right rows (32-bit offsets wrap, read elsewhere and
    crash)."""
    window_triton, lavo_triton = kernels
    T, d, w, S = 272, 16, 4, 2**23                     # row 256 starts at element 2^31
    base = torch.empty(T * S, dtype=torch.float16)
    q = base.as_strided((1, 1, T, d), (T * S, T * S, S, 1))
    q.copy_(torch.randn(1, 1, T, d))
    k, v, mem = torch.randn(1, 1, T, d).half(), torch.randn(1, 1, T, d).half(), torch.randn(1, 1, 1, d)
    bases = torch.linalg.qr(torch.randn(1, d, 4)).Q.mT.contiguous()
    local = window_triton.triton_window_attention(q, k, v, w, causal=True, block_m=16, block_n=16)
    glob = lavo_triton.read_memory_triton(q, mem, bases, block_m=16)
    q2 = q.double()
    ref_local = dense_attention(q2, k.double(), v.double(), window_mask(T, w, True)[None, None])
    ref_glob = read_memory_autograd(q2, mem.double(), bases.double())
    for a, b in ((local, ref_local), (glob, ref_glob)):
        assert (a.double() - b).abs().max().item() <= 3e-3 * b.abs().max().item()
    del base


# --------------------------------------------------------------------------------------------- the memory read
@interpreted
@pytest.mark.parametrize("offset, group, n, d, r, blocks", [
    (2, 5, 8, 8, 4, 16),     # one row per window (context dissection), the chunk starting 2 into its window
    (3, 1, 40, 8, 4, 2),     # one row per token (running mean), offset; backward in 2 programs (partial sums)
    (0, 1, 1, 24, 20, 16),   # one row per sequence (noncausal, cross); d, r not powers of two
])
def test_read_kernels_match_the_autograd_read(kernels, monkeypatch, offset, group, n, d, r, blocks):
    _check_read_kernels(kernels, monkeypatch, offset, group, n, d, r, blocks, 37, 16)


@interpreted
@pytest.mark.parametrize("block_m", [32, 128])
def test_read_kernels_in_every_autotuned_block(kernels, monkeypatch, block_m):
    """The read's other autotuned query blocks (the interpreter runs 64 by default), over several programs."""
    _check_read_kernels(kernels, monkeypatch, 3, 16, 20, 8, 4, 2, 300, block_m)


def _check_read_kernels(kernels, monkeypatch, offset, group, n, d, r, blocks, T, block_m) -> None:
    _, lavo_triton = kernels
    monkeypatch.setattr(lavo_triton, "BLOCKS", blocks)
    B, H = 2, 2
    q, mem = _leaves((B, H, T, d), (B, H, n, d))
    bases = torch.linalg.qr(torch.randn(H, d, r)).Q.mT.contiguous().requires_grad_()
    g = torch.randn(B, H, T, d)
    out = lavo_triton.read_memory_triton(q, mem, bases, offset, group, block_m=block_m)
    grads = torch.autograd.grad((out * g).sum(), (q, mem, bases))
    q2, m2, b2 = _f64(q, mem, bases)
    ref = read_memory_autograd(q2, m2, b2, offset, group)
    refs = torch.autograd.grad((ref * g.double()).sum(), (q2, m2, b2))
    _close([out, *grads], [ref, *refs], ["out", "dq", "dmem", "dbases"])


@interpreted
def test_read_dropout_equals_the_autograd_read_with_the_kernels_mask(kernels):
    """Dropout on the slot probabilities inside the read kernels: output and every gradient equal the float64
    autograd read under the kernels' mask (dropout_mask of the seed, [B, H, T, r]), another call in between."""
    from lavo_zoo.attention.ops.triton_utils import dropout_mask

    _, lavo_triton = kernels
    B, H, T, n, d, r, p, seed = 2, 2, 37, 8, 8, 4, 0.3, 4321
    q, mem = _leaves((B, H, T, d), (B, H, n, d))
    bases = torch.linalg.qr(torch.randn(H, d, r)).Q.mT.contiguous().requires_grad_()
    g = torch.randn(B, H, T, d)
    out = lavo_triton.read_memory_triton(q, mem, bases, 2, 5, block_m=16, dropout=p, seed=seed)
    lavo_triton.read_memory_triton(q, mem, bases, 2, 5, block_m=16, dropout=p, seed=seed + 1)
    grads = torch.autograd.grad((out * g).sum(), (q, mem, bases))
    q2, m2, b2 = _f64(q, mem, bases)
    ref = read_memory_autograd(q2, m2, b2, 2, 5, keep=dropout_mask(seed, (B, H, T, r), p, "cpu").double())
    refs = torch.autograd.grad((ref * g.double()).sum(), (q2, m2, b2))
    _close([out, *grads], [ref, *refs], ["out", "dq", "dmem", "dbases"])
    assert not torch.allclose(out, lavo_triton.read_memory_triton(q, mem, bases, 2, 5, block_m=16))


@interpreted
@pytest.mark.parametrize("temperature, gain, p", [(True, "per-head", 0.3), (False, 3.0, 0.0)])
def test_read_with_temperature_and_combine_inside_the_kernel(kernels, temperature, gain, p):
    """The fused read: local + g * read(q exp(t_h)) from one kernel (per-head learned gain, or a constant), with
    dropout; output and the gradients of q, the memory, the bases, the temperature, the local branch and the gain
    against the float64 torch ops under the kernel's mask."""
    from lavo_zoo.attention.ops.triton_utils import dropout_mask

    _, lavo_triton = kernels
    B, H, T, n, d, r, seed = 2, 2, 21, 5, 8, 4, 99
    q, mem, local = _leaves((B, H, T, d), (B, H, n, d), (B, H, T, d))
    bases = torch.linalg.qr(torch.randn(H, d, r)).Q.mT.contiguous().requires_grad_()
    log_t = (torch.randn(H) * 0.5).requires_grad_() if temperature else None
    g = torch.randn(H).requires_grad_() if gain == "per-head" else gain
    grad = torch.randn(B, H, T, d)
    out = lavo_triton.read_memory_triton(q, mem, bases, 2, 5, block_m=16, dropout=p, seed=seed, log_temperature=log_t,
                                         local=local, gain=g)
    leaves = [q, mem, bases, local] + ([log_t] if temperature else []) + ([g] if gain == "per-head" else [])
    grads = torch.autograd.grad((out * grad).sum(), leaves)
    q2, m2, b2, l2 = _f64(q, mem, bases, local)
    t2 = _f64(log_t)[0] if temperature else None
    g2 = _f64(g)[0] if gain == "per-head" else gain
    keep = dropout_mask(seed, (B, H, T, r), p, "cpu").double() if p else None
    read = read_memory_autograd(q2 * t2.exp()[:, None, None] if temperature else q2, m2, b2, 2, 5, keep=keep)
    ref = l2 + (g2[:, None, None] if gain == "per-head" else g2) * read
    refs = torch.autograd.grad((ref * grad.double()).sum(), [q2, m2, b2, l2] + ([t2] if temperature else [])
                               + ([g2] if gain == "per-head" else []))
    _close([out, *grads], [ref, *refs], ["out", "dq", "dmem", "dbases", "dlocal", "dtemperature", "dgain"])


# ------------------------------------------------------------------------------------------------- the layer
CONFIGS = [("causal", {}, 11), ("causal", {}, 3), ("causal", {"context_dissection": False}, 11),
           ("causal", {"combine": "gain"}, 11), ("causal", {"combine": "half", "read_temperature": 0.0}, 11),
           ("noncausal", {}, 11), ("cross", {}, 11)]


def _layer(pattern: str, **opts) -> torch.nn.Module:
    attn = build_attention("lavo", 16, 2, pattern, num_bases=4, window_size=4, kernels="triton", **opts)
    with torch.no_grad():
        for p in attn.parameters():
            if not p.any():
                p.normal_()  # the EPE
    return attn


@interpreted
@pytest.mark.parametrize("pattern, opts, T", CONFIGS, ids=lambda c: str(c))
def test_layer_triton_equals_recompute_in_float64(kernels, pattern, opts, T):
    """The layer on the Triton kernels (float32) == the same layer on the recompute kernels in float64: outputs,
    the input gradients and every parameter gradient, padded (T = 11 with w = 4; T = 3 < w)."""
    attn = _layer(pattern, **opts)
    ref = copy.deepcopy(attn).double()
    ref.kernels = "recompute"
    B = 2
    x = torch.randn(B, T, 16, requires_grad=True)
    mask = torch.rand(B, T) > 0.3
    mask[:, 0] = True
    kw, kw2 = {}, {}
    inputs = [x]
    if pattern == "cross":
        ctx = torch.randn(B, 9, 16, requires_grad=True)
        kw = {"context": ctx, "context_mask": torch.arange(9)[None].expand(B, 9) < 7}
        kw2 = {"context": ctx.detach().double().requires_grad_(), "context_mask": kw["context_mask"]}
        inputs.append(ctx)
    x2 = x.detach().double().requires_grad_()
    g = torch.randn(B, T, 16)
    y = attn(x, mask, **kw)
    assert attn.kernels_used == "triton"
    y2 = ref(x2, mask, **kw2)
    assert ref.kernels_used == "recompute"
    grads = torch.autograd.grad((y * g).sum(), inputs + list(attn.parameters()), materialize_grads=True)
    inputs2 = [x2] + ([kw2["context"]] if kw2 else [])
    grads2 = torch.autograd.grad((y2 * g.double()).sum(), inputs2 + list(ref.parameters()), materialize_grads=True)
    names = ["y", "x"] + (["context"] if kw else []) + [n for n, _ in attn.named_parameters()]
    _close([y, *grads], [y2, *grads2], names)


@interpreted
def test_streaming_on_triton_equals_the_full_call(kernels):
    """Chunks carrying the constant-size state (the window reaching into the state's keys, the memory sums) give the
    one-pass output, decoding token by token too, and the one-pass gradients through an undetached state. A chunk of
    several tokens runs the Triton kernels; a one-token chunk recording a graph the PyTorch decoding step (the Triton
    step has no backward)."""
    attn = _layer("causal")
    x = torch.randn(2, 14, 16, requires_grad=True)
    g = torch.randn(2, 14, 16)
    y = attn(x)
    full = torch.autograd.grad((y * g).sum(), [x, *attn.parameters()])
    state, ys, used = None, [], []
    for a, b in ((0, 5), (5, 6), (6, 11), (11, 12), (12, 13), (13, 14)):
        y_t, state = attn(x[:, a:b], state=state, return_state=True)
        ys.append(y_t)
        used.append(attn.kernels_used)
    assert used == ["triton", "recompute", "triton", "recompute", "recompute", "recompute"]
    assert state.keys.shape[2] == 3
    streamed = torch.cat(ys, 1)
    torch.testing.assert_close(streamed, y, **TOL)
    for a, b in zip(torch.autograd.grad((streamed * g).sum(), [x, *attn.parameters()]), full):
        torch.testing.assert_close(a, b, **TOL)


@interpreted
def test_kernel_choice_and_mode(kernels, monkeypatch):
    q = torch.randn(1, 2, 512, 8)
    assert _pair(build_attention("lavo", 16, 2, "causal").choose_kernels(q)) == ("recompute", "recompute")  # CPU
    attn = build_attention("lavo", 16, 2, "causal", kernels="triton", dropout=0.1)
    assert _pair(attn.choose_kernels(q)) == ("triton", "triton") and attn.kernels_used == "triton"  # with dropout
    attn.eval()
    assert _pair(attn.choose_kernels(q)) == ("triton", "triton") and attn.kernels_used == "triton"
    assert _pair(attn.choose_kernels(q.double())) == ("recompute", "recompute")          # fp64: the fallback
    monkeypatch.setenv("LAVO_ZOO_TRITON", "0")
    assert _pair(attn.choose_kernels(q)) == ("recompute", "recompute") and attn.kernels_used == "recompute"
    assert build_attention("lavo", 16, 2, "causal").kernels_used == "recompute"            # before any call


@interpreted
@pytest.mark.parametrize("opts", [{"combine": "gain"},
                                  {"combine": "half", "empty_memory": "half", "read_temperature": 0.0,
                                   "memory_norm": "mean", "position_encoding": False, "memory_source": "value"}],
                         ids=lambda o: str(o))
def test_decoding_in_one_kernel_equals_the_full_call_and_the_torch_step(kernels, monkeypatch, opts):
    """Token by token after a one-token prefill, under no_grad (every step one kernel): the outputs equal the full
    call's, through empty memory, window completions and the growing then sliding key ring; the state equals the
    torch ops' step (the same layer on the recompute kernels)."""
    _, lavo_triton = kernels
    steps = []
    kernel_step = lavo_triton.decode_step_triton
    monkeypatch.setattr(lavo_triton, "decode_step_triton", lambda *a, **k: steps.append(1) or kernel_step(*a, **k))
    attn = _layer("causal", **opts)
    ref = copy.deepcopy(attn)
    ref.kernels = "recompute"
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        full = attn(x)
        _, state = attn(x[:, :1], state=None, return_state=True)
        _, ref_state = ref(x[:, :1], state=None, return_state=True)
        ys = []
        for t in range(1, 9):
            y, state = attn(x[:, t:t + 1], state=state, return_state=True)
            _, ref_state = ref(x[:, t:t + 1], state=ref_state, return_state=True)
            ys.append(y)
    assert attn.kernels_used == "triton" and state.position == 9 and state.keys.shape[2] == 3 and len(steps) == 8
    torch.testing.assert_close(torch.cat(ys, 1), full[:, 1:], **TOL)
    for name in ("keys", "values", "sum_complete", "sum_partial"):
        torch.testing.assert_close(getattr(state, name), getattr(ref_state, name), **TOL, msg=name)


@interpreted
@pytest.mark.parametrize("pattern", ["causal", "noncausal", "cross"])
def test_the_binding_memory_runs_the_triton_window_beside_the_pytorch_read(kernels, pattern):
    """memory='binding' with the Triton kernels requested: the window runs on Triton, the read, the decoding step
    and the whole call fall back to PyTorch by the kernels' declared limit (the report says 'triton+recompute';
    'recompute' in cross attention, which has no window), and the layer equals itself on the recompute kernels in
    float64, outputs and gradients, padded; decoding token by token under no_grad equals the full call."""
    attn = _layer(pattern, memory="binding")
    ref = copy.deepcopy(attn).double()
    ref.kernels = "recompute"
    x = torch.randn(2, 11, 16, requires_grad=True)
    mask = torch.rand(2, 11) > 0.3
    mask[:, 0] = True
    kw, kw2, inputs = {}, {}, [x]
    if pattern == "cross":
        ctx = torch.randn(2, 9, 16, requires_grad=True)
        kw = {"context": ctx, "context_mask": torch.arange(9)[None].expand(2, 9) < 7}
        kw2 = {"context": ctx.detach().double(), "context_mask": kw["context_mask"]}
        inputs.append(ctx)
    y = attn(x, mask, **kw)
    assert attn.kernels_used == ("recompute" if pattern == "cross" else "triton+recompute")
    y2 = ref(x.detach().double(), mask, **kw2)
    _close([y], [y2], ["y"])
    g = torch.randn_like(y)
    grads = torch.autograd.grad((y * g).sum(), inputs + list(attn.parameters()), materialize_grads=True)
    ref_inputs = [x.detach().double().requires_grad_()] + ([kw2["context"].requires_grad_()] if kw2 else [])
    y2 = ref(ref_inputs[0], mask, **({**kw2, "context": ref_inputs[1]} if kw2 else {}))
    grads2 = torch.autograd.grad((y2 * g.double()).sum(), ref_inputs + list(ref.parameters()), materialize_grads=True)
    _close(grads, grads2, ["x"] + (["context"] if kw else []) + [n for n, _ in attn.named_parameters()])
    if pattern != "causal":
        return
    with torch.no_grad():
        full, (_, state), ys = attn(x), attn(x[:, :2], return_state=True), []
        for t in range(2, 11):
            y_t, state = attn(x[:, t:t + 1], state=state, return_state=True)
            ys.append(y_t)
    assert attn.kernels_used == "recompute"                              # the PyTorch step, not the Triton one
    torch.testing.assert_close(torch.cat(ys, 1), full[:, 2:], **TOL)


# ------------------------------------------------------------------------------------------------ the fused layer
def _fused_inputs(causal: bool, combine: str, rms: bool, temperature: bool, padded: bool, T: int, w: int,
                  d: int = 8, r: int = 4):
    B, H = 2, 2
    qkv = torch.randn(B, T, 3 * H * d, requires_grad=True)
    bases = torch.linalg.qr(torch.randn(H, d, r)).Q.mT.contiguous().requires_grad_()
    bias = torch.randn(H, 2 * w - 1, requires_grad=True)
    log_t = (torch.randn(H) * 0.5).requires_grad_() if temperature else None
    gain = torch.randn(H).requires_grad_() if combine == "gain" else (1.7 if combine == "sum" else 1.0)
    mask = None
    if padded:
        mask = torch.rand(B, T) > 0.3
        mask[:, 0] = True
    return qkv, bases, bias, log_t, gain, mask


@interpreted
@pytest.mark.parametrize("causal, combine, rms, temperature, padded, dropout, T, w", [
    (True, "sum", True, True, False, 0.0, 37, 4),     # the causal default (rms, temperature): row 0 empty
    (True, "gain", False, False, True, 0.3, 37, 4),   # learned gain, padding holes, dropout on both branches
    (True, "sum", True, True, True, 0.0, 90, 5),      # w not a power of two, two tiles of windows
    (True, "sum", True, False, False, 0.0, 40, 32),   # long windows: 4 per tile, the read's product by broadcast
    (False, "half", True, True, True, 0.3, 37, 4),    # noncausal: the one mean, 'half', padding, dropout
    (False, "gain", False, False, False, 0.0, 130, 3),
])
def test_the_fused_operation_equals_its_pytorch_form_in_float64(kernels, monkeypatch, causal, combine, rms,
                                                                temperature, padded, dropout, T, w):
    """One operation from the q, k, v projection to the joined output (window, memory rows, read): its output and
    every gradient (qkv, bases, EPE, temperature, gain) against the same computation by torch operations in float64
    (fused.pytorch_form), under the kernels' dropout masks of the same seeds."""
    from lavo_zoo.attention.lavo import fused

    seeds = iter([1234, 4321])
    monkeypatch.setattr(fused, "new_seed", lambda: next(seeds))
    qkv, bases, bias, log_t, gain, mask = _fused_inputs(causal, combine, rms, temperature, padded, T, w)
    y = fused.fused_self_attention(qkv, bases, w, heads=2, causal=causal, bias=bias, log_temperature=log_t, gain=gain,
                                   combine=combine, memory_norm="rms" if rms else "mean", key_mask=mask,
                                   dropout=dropout, block_m=16)
    g = torch.randn_like(y)
    per_head = isinstance(gain, torch.Tensor)
    leaves = [t for t in (qkv, bases, bias, log_t, gain if per_head else None) if t is not None]
    grads = torch.autograd.grad((y * g).sum(), leaves)
    half = combine == "half"
    options = fused.FusedOptions(2, w, causal, rms, 0.5 if half else (1.0 if per_head else gain), 0.5 if half else 1.0,
                                 dropout, 1234 if dropout else 0, 4321 if dropout else 0, 16)
    q2, b2, bias2, t2, gain2 = (_f64(t)[0] if t is not None else None
                                for t in (qkv, bases, bias, log_t, gain if per_head else None))
    ref = fused.pytorch_form(q2, b2, bias2, t2, gain2, mask, options)
    refs = torch.autograd.grad((ref * g.double()).sum(), [t for t in (q2, b2, bias2, t2, gain2) if t is not None])
    for name, a, b in zip(["out", "dqkv", "dbases", "depe", "dtemperature", "dgain"], [y, *grads], [ref, *refs]):
        err = (a.double() - b).abs().max().item()
        assert err <= 1e-5 * b.abs().max().item(), (name, err)  # float32 against float64: ~1e-7 measured


@interpreted
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rms", [True, False])
def test_memory_row_kernels_equal_the_torch_rows_and_their_gradient(kernels, causal, rms):
    """The memory rows (context dissection's means of the windows before each, or the noncausal mean) of padded
    features, and the features' gradient the backward kernel gives from a per-query dh through the bases and the rms,
    against float64 autograd of the torch rows. Row 0 of causal attention holds no token: its rms factor is 1e3,
    which the backward keeps out of the suffix sums (subtracting it again lost the precision of the rows before)."""
    from lavo_zoo.attention.lavo import triton_memory
    from lavo_zoo.attention.lavo.memory import dissected_memory, mean_memory
    from lavo_zoo.attention.lavo.read import RMS_EPS

    B, H, T, d, r, w = 2, 2, 23, 8, 4, 4
    feats = torch.randn(B, H, T, d)
    mask = torch.rand(B, T) > 0.3
    mask[:, 0] = True
    bases = torch.linalg.qr(torch.randn(H, d, r)).Q.mT.contiguous()
    dh = torch.zeros(B, H, T, 16)
    dh[..., :r] = torch.randn(B, H, T, r) * mask[:, None, :, None]          # padded queries read nothing
    mem = triton_memory.memory_rows(feats, mask.to(torch.int8), w, causal)
    f2 = feats.double().requires_grad_()
    valid = mask[:, None].double()
    real = f2 * valid[..., None]
    rows = dissected_memory(real, valid, w)[0] if causal else mean_memory(real, valid)
    torch.testing.assert_close(mem.double(), rows, rtol=1e-5, atol=1e-6)
    normed = rows * torch.rsqrt(rows.square().mean(-1, keepdim=True) + RMS_EPS) if rms else rows
    h = normed @ bases.double().mT                                             # [B, H, n, r]
    read = h[:, :, torch.arange(T) // w] if causal else h.expand(B, H, T, r)
    want, = torch.autograd.grad((read * dh[..., :r].double()).sum(), f2)
    dwin = triton_memory.memory_rows_backward(dh, bases, mem, mask.to(torch.int8), w, causal, rms)
    got = dwin.view(B, H, -1, d)[:, :, torch.arange(T) // w if causal else torch.zeros(T, dtype=torch.long)]
    got = got * valid[..., None]                                               # padded features get nothing
    err = (got.double() - want).abs().max().item()
    assert err <= 1e-6 * want.abs().max().item(), err


# The counts of one fwd+bwd (bf16 autocast, training's precision) and of one decoding step, pinned when the fused
# path was written (lavo-zoo bench ops, the benchmark layer D 768, 12 heads, r 64, w 16: the same counts)
TRITON_FWDBWD = 100  # 91 operations + 9 launches; sdpa's layer: 106
TRITON_DECODE = 20   # 19 operations + 1 launch; sdpa's: 38


@interpreted
def test_the_triton_path_dispatches_no_more_than_sdpa(kernels):
    """The fixed cost of a step on a GPU: the Triton path's operations and launches, at most sdpa's and at most the
    pinned counts (tests/bench/test_ops.py pins the CPU paths)."""
    from lavo_zoo.bench.ops import count_path

    spec = {"embed_dim": 32, "heads": 2, "num_bases": 16, "window": 4, "device": "cpu", "warmup": False}
    lavo = count_path({"path": "lavo:triton", "mode": "fwdbwd", "length": 16, "autocast": "bfloat16", **spec})
    sdpa = count_path({"path": "sdpa", "mode": "fwdbwd", "length": 16, "autocast": "bfloat16", **spec})
    assert lavo["kernels"] == "triton" and lavo["launches"] == 9
    assert lavo["total"] <= min(TRITON_FWDBWD, sdpa["total"]), (lavo["by_op"], lavo["kernel_launches"])
    step = count_path({"path": "lavo:triton", "mode": "decode", "length": 20, "autocast": "none", **spec})
    assert step["kernel_launches"] == ["decode"] and step["total"] <= TRITON_DECODE, step["by_op"]


@interpreted
@pytest.mark.parametrize("pattern", ["causal", "noncausal", "cross"])
def test_the_layer_compiles_whole_on_the_triton_kernels(kernels, pattern):
    """torch.compile(fullgraph=True) of the layer on the Triton kernels (their custom operators, traced through
    their fake forms): no graph break, and the compiled forward and backward give the eager ones."""
    import torch._dynamo

    torch._dynamo.reset()
    attn = _layer(pattern)
    x = torch.randn(2, 11, 16, requires_grad=True)
    mask = torch.rand(2, 11) > 0.3
    mask[:, 0] = True
    kw = {"context": torch.randn(2, 9, 16), "context_mask": mask[:, :9]} if pattern == "cross" else {}
    compiled = torch.compile(attn, fullgraph=True, backend="aot_eager")
    y = compiled(x, mask, **kw)
    assert attn.kernels_used == "triton"
    got = torch.autograd.grad(y.square().sum(), [x, *attn.parameters()])
    want_y = attn(x, mask, **kw)
    want = torch.autograd.grad(want_y.square().sum(), [x, *attn.parameters()])
    for a, b in zip([y, *got], [want_y, *want]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@interpreted
def test_a_recipe_model_compiles_whole_on_the_triton_kernels(kernels):
    """lm/tiny-lavo's model, training loss and backward, compiled with fullgraph=True on the Triton kernels: no graph
    break, the eager loss and gradients."""
    from tests.attention.lavo.test_compile import check_model_compiles

    check_model_compiles("triton")
