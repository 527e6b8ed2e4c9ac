"""LAVO's Triton kernels through Triton's compiler front end for the H100/H200 (sm_90), on the CPU
(benchmarks/gpu/compile_kernels.py): what the interpreter accepts and the compiler refuses fails here, not on a lent
GPU (a module global that is not a ``tl.constexpr`` did: every kernel of the first device run fell back)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]
KERNELS = {"window_fwd", "window_delta", "window_bwd_dq", "window_bwd_dkdv", "window_bwd_dbias", "read_fwd",
           "read_bwd", "decode"}


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
    assert set(result["shared"]) == KERNELS                       # each launched, so each compiled
    assert all(len(configs) >= 1 for configs in result["shared"].values())
