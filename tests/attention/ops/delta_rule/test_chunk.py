"""The delta rule's chunked form (ops/delta_rule/chunk.py) against its token-by-token recurrence
(ops/delta_rule/naive.py): float64, fresh random inputs, every kind of decay and of strengths, chunk sizes that do
and do not divide the length, a carried state, gradients; finite wherever the recurrence is; its gates' shapes."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.ops.delta_rule import chunk_delta_rule
from lavo_zoo.attention.ops.delta_rule.naive import naive_delta_rule
from tests.attention.mechanism_testing import ATOL, RTOL, gen, randn
from tests.attention.ops.helpers import B, H, K, T, V, _close_with_grads, _delta_gates


@pytest.mark.parametrize("strengths", ["head", "channel"])
@pytest.mark.parametrize("decay", ["none", "head", "channel"])
@pytest.mark.parametrize("chunk", [1, 8, 20, 64])
def test_delta_rule_chunks_match_recurrence(decay: str, strengths: str, chunk: int, request) -> None:
    """The chunked form against the recurrence, outputs, final state and every gradient, for each kind of decay
    (none: DeltaNet, per head: Gated DeltaNet, per key channel: KDA) and of strengths (per head, or GDN-2's erase per
    key channel and write per value channel), chunk sizes that do and do not divide T and the per-channel form's
    blocks (20 = 8 + 8 + 4), with an initial state."""
    g0 = gen(request)
    q, v = randn(g0, B, H, T, K), randn(g0, B, H, T, V)
    k = torch.nn.functional.normalize(randn(g0, B, H, T, K), dim=-1)
    S0 = randn(g0, B, H, K, V)
    gates = _delta_gates(g0, decay, strengths)
    inputs = [t.requires_grad_() for t in (q, k, v, S0, *gates.values())]
    _close_with_grads(lambda: chunk_delta_rule(q, k, v, state=S0, chunk_size=chunk, **gates),
                      lambda: naive_delta_rule(q, k, v, state=S0, **gates), inputs)


@pytest.mark.parametrize("decay", ["head", "channel"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_delta_rule_chunks_stay_finite_where_the_recurrence_is(decay: str, dtype: torch.dtype, request) -> None:
    """Log decays of any size (down to -1e30 and -inf, which clear the state), values of any scale: the chunked form
    in fp32 and fp64 is finite wherever the token-by-token recurrence (fp64) is, and equals it. Without the floor a
    decay of -inf gives inf - inf; with per-channel factors split at one point per chunk instead of per block, a
    factor over 1 overflows."""
    g0 = gen(request)
    q, k = randn(g0, 1, 2, 70, K), torch.nn.functional.normalize(randn(g0, 1, 2, 70, K), dim=-1)
    beta = torch.rand(1, 2, 70, generator=g0, dtype=torch.float64)
    shape = (1, 2, 70) if decay == "head" else (1, 2, 70, K)
    for g_scale, v_scale in ((30.0, 1.0), (1e4, 1e20), (1e30, 1e-20), (float("inf"), 1e10)):
        v = randn(g0, 1, 2, 70, V) * v_scale
        g = -g_scale * torch.rand(*shape, generator=g0, dtype=torch.float64)
        g = torch.where(torch.rand(*shape, generator=g0, dtype=torch.float64) < 0.7, -torch.rand(*shape,
                        generator=g0, dtype=torch.float64), g)  # most decays mild, some huge
        want, want_S = naive_delta_rule(q, k, v, beta, g)
        assert torch.isfinite(want).all() and torch.isfinite(want_S).all()
        got, got_S = chunk_delta_rule(*(t.to(dtype) for t in (q, k, v, beta, g)), chunk_size=64)
        assert torch.isfinite(got).all() and torch.isfinite(got_S).all(), (g_scale, v_scale)
        tol = 1e-10 if dtype == torch.float64 else 2e-4  # fp32: sums of huge log decays lose their small ones
        torch.testing.assert_close(got.double() / v_scale, want / v_scale, atol=tol, rtol=tol)


def test_delta_rule_gates_tied_reduce_to_one_per_head(request) -> None:
    """Gated DeltaNet-2's gates tied (erase strengths equal over the key channels, write strengths equal to them over
    the value channels) are KDA's one strength per head; KDA's decay equal over the key channels is Gated DeltaNet's
    one per head: the chunked forms agree, outputs, state and the gradients (summed over the tied channels)."""
    g0 = gen(request)
    q, v, S0 = randn(g0, B, H, T, K), randn(g0, B, H, T, V), randn(g0, B, H, K, V)
    k = torch.nn.functional.normalize(randn(g0, B, H, T, K), dim=-1)
    beta, g = torch.rand(B, H, T, generator=g0, dtype=torch.float64), -torch.rand(B, H, T, generator=g0,
                                                                                  dtype=torch.float64)
    leaves = [t.requires_grad_() for t in (q, k, v, S0, beta, g)]
    w = [randn(g0, B, H, T, V), randn(g0, B, H, K, V)]

    def loss(o, S):
        return (o * w[0]).sum() + (S * w[1]).sum()

    per_head = chunk_delta_rule(q, k, v, beta, g, S0, 8)
    per_key_decay = chunk_delta_rule(q, k, v, beta, g[..., None].expand(B, H, T, K), S0, 8)          # KDA's gate
    per_channel = chunk_delta_rule(q, k, v, beta[..., None].expand(B, H, T, K), g[..., None].expand(B, H, T, K),
                                   S0, 8, write=beta[..., None].expand(B, H, T, V))                  # GDN-2's gates
    want = torch.autograd.grad(loss(*per_head), leaves)
    for got in (per_key_decay, per_channel):
        torch.testing.assert_close(got, per_head, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(torch.autograd.grad(loss(*got), leaves), want, atol=ATOL, rtol=RTOL)


def test_delta_rule_gates_of_other_shapes_are_refused() -> None:
    q = torch.zeros(1, 2, 5, 4)
    v = torch.zeros(1, 2, 5, 3)
    with pytest.raises(ValueError, match=r"beta must have shape \[1, 2, 5\] or \[1, 2, 5, 4\]"):
        chunk_delta_rule(q, q, v, torch.zeros(1, 2, 5, 3))
    with pytest.raises(ValueError, match=r"g must have shape"):
        chunk_delta_rule(q, q, v, torch.zeros(1, 2, 5), torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"write must have shape \[1, 2, 5, 3\]"):
        chunk_delta_rule(q, q, v, torch.zeros(1, 2, 5), write=torch.zeros(1, 2, 5, 4))
    with pytest.raises(ValueError, match="needs write"):
        chunk_delta_rule(q, q, v, torch.zeros(1, 2, 5, 4))


def test_delta_rule_overwrites_a_key() -> None:
    """Writing v2 under a key that holds v1 (beta = 1) retrieves v2 alone; a linear attention would return v1 + v2."""
    k = torch.zeros(1, 1, 2, 3, dtype=torch.float64)
    k[..., 0] = 1.0
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]], dtype=torch.float64)
    o, S = chunk_delta_rule(k, k, v, torch.ones(1, 1, 2, dtype=torch.float64))
    torch.testing.assert_close(o[0, 0, 1], v[0, 0, 1])
    torch.testing.assert_close(S[0, 0, 0], v[0, 0, 1])
