"""LAVO's Triton kernels through Triton's compiler front end for the H100/H200 (sm_90), on the CPU
(benchmarks/gpu/compile_kernels.py): what the interpreter accepts and the compiler refuses fails here, not on a lent
GPU (a module global that is not a ``tl.constexpr`` did: every kernel of the first device run fell back), and so
does a kernel that transposes a product's result (what Triton 3.4 to 3.7.0 can miscompile on Hopper)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]
KERNELS = {"window_fwd", "window_delta", "window_bwd_dq", "window_bwd_dkdv", "window_bwd_dbias", "read_fwd",
           "read_bwd", "decode", "memory_fwd", "memory_bwd"}


def test_every_kernel_compiles_for_sm_90(tmp_path):
    """Causal, noncausal and cross LAVO layers (fp32, bf16, fp16; dropout; padding) and the decoding step, forward
    and backward: every kernel each launch would try is accepted by the compiler, and no layer falls back."""
    out = tmp_path / "compiled.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "compile_kernels.py"), "--front-end",
                          "--json", str(out)], check=False, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TRITON_CACHE_DIR": str(tmp_path)})
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["failures"] == {} and result["fell_back"] == []
    assert result["transposed"] == {}                            # no product's result transposed
    assert set(result["shared"]) == KERNELS                       # each launched, so each compiled
    assert all(len(configs) >= 1 for configs in result["shared"].values())


PATTERNS = """
import json
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, {gpu!r})
import compile_kernels


@triton.jit
def transposed_result(A, B, O, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(A + r[:, None] * N + r[None, :])
    b = tl.load(B + r[:, None] * N + r[None, :])
    p = tl.exp(tl.dot(a, b))                                   # a product's result, then elementwise
    tl.store(O + r[:, None] * N + r[None, :], tl.dot(tl.trans(p), b))


@triton.jit
def transposed_carry(A, B, O, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(A + r[:, None] * N + r[None, :])
    b = tl.load(B + r[:, None] * N + r[None, :])
    acc = tl.zeros([N, N], tl.float32)
    for i in range(3):                                         # carried through the loop
        acc += tl.dot(a, b)
    tl.store(O + r[:, None] * N + r[None, :], tl.dot(tl.trans(acc), b))


@triton.jit
def transposed_tiles(A, B, O, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(A + r[:, None] * N + r[None, :])
    b = tl.load(B + r[:, None] * N + r[None, :])
    acc = tl.zeros([N, N], tl.float32)
    for i in range(3):
        p = tl.exp(tl.dot(b, tl.trans(a)))                     # loaded tiles transposed: fine
        acc += tl.dot(p, tl.trans(b))
    tl.store(O + r[:, None] * N + r[None, :], tl.dot(acc, b))


triton.runtime.driver.set_active(compile_kernels.CompileOnlyDriver(90))
found, current = {{}}, [""]
triton.compiler.compile = compile_kernels.checking(None, found, current)
x = torch.zeros(16, 16)
for kernel in (transposed_result, transposed_carry, transposed_tiles):
    current[0] = kernel.__name__
    kernel.warmup(x, x, x, N=16, grid=(1,))
print(json.dumps(found))
"""


def test_the_check_finds_a_transposed_product_and_passes_transposed_tiles(tmp_path):
    """The IR check on three small kernels: a product's result transposed (directly, and carried through a loop) is
    found at its source line; loaded tiles transposed into products are not."""
    script = tmp_path / "patterns.py"
    script.write_text(PATTERNS.format(gpu=str(GPU)))
    run = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TRITON_CACHE_DIR": str(tmp_path)})
    assert run.returncode == 0, run.stdout + run.stderr
    found = json.loads(run.stdout.splitlines()[-1])
    lines = script.read_text().splitlines()
    assert set(found) == {"transposed_result", "transposed_carry"}
    for where in found.values():
        assert len(where) == 1 and where[0].startswith(str(script) + ":")
        assert "tl.trans(" in lines[int(where[0].rsplit(":", 1)[1]) - 1]
