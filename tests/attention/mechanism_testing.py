"""Helpers for the per-mechanism tests of the baselines and the oracle test: float64 modules of width 32 with 4 heads,
random inputs seeded from the test's node id, and the small options that force several chunks / windows / segments /
landmarks at T = 37."""
from __future__ import annotations

import zlib

import pytest
import torch

from lavo_zoo.attention import build_attention

D, H = 32, 4
ATOL, RTOL = 1e-10, 1e-8

# small non-default options per built-in mechanism: every chunk / window / segment boundary is crossed at T = 37
SMALL = {
    "vanilla": {},
    "abc": {"num_slots": 5, "chunk_size": 8},
    "performer": {"num_features": 12, "chunk_size": 8},
    "cosformer": {"chunk_size": 8, "max_length": 64},
    "longshort": {"window_size": 6, "num_landmarks": 5, "segment_rank": 2},
    "s4d": {"state_size": 8},
    "lara": {"num_landmarks": 6},
    "nystromformer": {"num_landmarks": 6, "pinv_iterations": 0},
    "lavo": {"num_bases": 3, "window_size": 5},
    "sdpa": {"rope": True},
    "local": {"window_size": 5, "relative_bias": True},
    "probsparse": {"factor": 2},
}


def small_options(name: str, pattern: str) -> dict:
    """``SMALL[name]`` for ``pattern`` (rope needs self-attention: not in cross)."""
    opts = dict(SMALL.get(name, {}))
    if pattern == "cross":
        opts.pop("rope", None)
    return opts


def gen(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def build(name: str, pattern: str, **opts) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_attention(name, D, H, pattern, **opts).double().eval()


def assert_causal_is_cumulative(name: str, request: pytest.FixtureRequest) -> None:
    """The paper's benchmark library ran causal ABC without accumulation and causal Performer as noncausal: the
    causal output must differ from the noncausal one and equal it at the last position (where all keys are seen)."""
    g = gen(request)
    causal, noncausal = build(name, "causal", **SMALL[name]), build(name, "noncausal", **SMALL[name])
    noncausal.load_state_dict(causal.state_dict())
    x = randn(g, 2, 29, D)
    yc, yn = causal(x), noncausal(x)
    torch.testing.assert_close(yc[:, -1], yn[:, -1], atol=ATOL, rtol=RTOL)
    assert not torch.allclose(yc[:, :-1], yn[:, :-1], atol=1e-3)
