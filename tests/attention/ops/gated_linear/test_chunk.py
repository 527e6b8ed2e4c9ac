"""The gated linear attention's chunked form (ops/gated_linear/chunk.py) against its token-by-token recurrence
(ops/gated_linear/naive.py): float64, fresh random inputs, chunk sizes that do and do not divide the length, a
carried state, gradients; a strong per-channel decay stays finite in fp32."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.ops.gated_linear import chunk_gated_linear
from lavo_zoo.attention.ops.gated_linear.naive import naive_gated_linear
from tests.attention.mechanism_testing import gen, randn
from tests.attention.ops.helpers import B, H, K, T, V, _close_with_grads


@pytest.mark.parametrize("gate", ["none", "head", "channel"])
@pytest.mark.parametrize("chunk", [1, 8, 64])
def test_gated_linear_chunks_match_recurrence(gate: str, chunk: int, request) -> None:
    g0 = gen(request)
    q, k, v = randn(g0, B, H, T, K), randn(g0, B, H, T, K), randn(g0, B, H, T, V)
    S0 = randn(g0, B, H, K, V)
    g = {"none": None, "head": -3 * torch.rand(B, H, T, generator=g0, dtype=torch.float64),
         "channel": -3 * torch.rand(B, H, T, K, generator=g0, dtype=torch.float64)}[gate]
    inputs = [t.requires_grad_() for t in (q, k, v, S0) + (() if g is None else (g,))]
    _close_with_grads(lambda: chunk_gated_linear(q, k, v, g, S0, chunk), lambda: naive_gated_linear(q, k, v, g, S0),
                      inputs)



def test_channel_gate_survives_strong_decay(request) -> None:
    """Log decays of -5 per token and channel over 32-token chunks (exp(+-80) around the chunk's middle) stay finite
    in fp32 and match the recurrence."""
    g0 = gen(request)
    q, k, v = (randn(g0, 1, 1, 64, n).float() for n in (4, 4, 3))
    g = torch.full((1, 1, 64, 4), -5.0)
    o, _ = chunk_gated_linear(q, k, v, g, None, 32)
    ref, _ = naive_gated_linear(q.double(), k.double(), v.double(), g.double())
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o.double(), ref, atol=1e-5, rtol=1e-5)

