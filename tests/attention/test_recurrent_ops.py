"""The chunked recurrent ops (ops/gated_linear, ops/delta_rule) against their token-by-token recurrences, and the
short convolution and row packing (ops/short_conv): float64, fresh random inputs, chunk sizes that do and do not
divide the length, a carried state, gradients."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.ops.delta_rule import chunk_delta_rule
from lavo_zoo.attention.ops.delta_rule.naive import naive_delta_rule
from lavo_zoo.attention.ops.gated_linear import chunk_gated_linear
from lavo_zoo.attention.ops.gated_linear.naive import naive_gated_linear
from lavo_zoo.attention.ops.short_conv import ShortConv, gather_rows, naive_short_conv, pack
from tests.attention.mechanism_testing import ATOL, RTOL, gen, randn

B, H, T, K, V = 2, 3, 29, 5, 4


def _close_with_grads(fast, slow, inputs) -> None:
    out_f, out_s = fast(), slow()
    for a, b in zip(out_f, out_s):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)
    w = [torch.randn_like(o) for o in out_f]
    gf = torch.autograd.grad(sum((o * x).sum() for o, x in zip(out_f, w)), inputs)
    gs = torch.autograd.grad(sum((o * x).sum() for o, x in zip(out_s, w)), inputs)
    for a, b in zip(gf, gs):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)


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


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("chunk", [1, 8, 64])
def test_delta_rule_chunks_match_recurrence(gated: bool, chunk: int, request) -> None:
    g0 = gen(request)
    q, v = randn(g0, B, H, T, K), randn(g0, B, H, T, V)
    k = torch.nn.functional.normalize(randn(g0, B, H, T, K), dim=-1)
    beta = torch.rand(B, H, T, generator=g0, dtype=torch.float64)
    S0 = randn(g0, B, H, K, V)
    g = -2 * torch.rand(B, H, T, generator=g0, dtype=torch.float64) if gated else None
    inputs = [t.requires_grad_() for t in (q, k, v, beta, S0) + ((g,) if gated else ())]
    _close_with_grads(lambda: chunk_delta_rule(q, k, v, beta, g, S0, chunk),
                      lambda: naive_delta_rule(q, k, v, beta, g, S0), inputs)


def test_delta_rule_overwrites_a_key() -> None:
    """Writing v2 under a key that holds v1 (beta = 1) retrieves v2 alone; a linear attention would return v1 + v2."""
    k = torch.zeros(1, 1, 2, 3, dtype=torch.float64)
    k[..., 0] = 1.0
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]], dtype=torch.float64)
    o, S = chunk_delta_rule(k, k, v, torch.ones(1, 1, 2, dtype=torch.float64))
    torch.testing.assert_close(o[0, 0, 1], v[0, 0, 1])
    torch.testing.assert_close(S[0, 0, 0], v[0, 0, 1])


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


@pytest.mark.parametrize("kernel", [0, 1, 4])
def test_short_conv_matches_definition_and_streams(kernel: int, request) -> None:
    g0 = gen(request)
    torch.manual_seed(0)
    conv = ShortConv(6, kernel, activation=True, bias=True).double()
    x = randn(g0, 2, 11, 6)
    y, _ = conv(x)
    torch.testing.assert_close(y, naive_short_conv(conv, x), atol=ATOL, rtol=RTOL)
    y1, cache = conv(x[:, :4])
    y2, _ = conv(x[:, 4:], cache)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, atol=ATOL, rtol=RTOL)
    with pytest.raises(ValueError, match="conv_size"):
        ShortConv(6, -1)


def test_pack_moves_real_tokens_first_in_order() -> None:
    mask = torch.tensor([[False, True, False, True, True], [True, True, True, True, True]])
    x = torch.arange(10).view(2, 5)
    order, inverse, packed = pack(mask)
    assert gather_rows(x, order)[0, :3].tolist() == [1, 3, 4]
    assert packed.tolist() == [[True, True, True, False, False], [True] * 5]
    assert torch.equal(gather_rows(gather_rows(x, order), inverse), x)


# ------------------------------------------------------------------------ flash-linear-attention's kernels (ops/fla)
def test_kernel_choice_without_cuda_is_pytorch(monkeypatch) -> None:
    """On CPU tensors (or with LAVO_ZOO_FLA=0) the ops run their PyTorch forms, fla installed or not."""
    from lavo_zoo.attention.ops import fla

    q = torch.zeros(1, 1, 2, 4)
    assert fla.gated_linear_kernel(q) is chunk_gated_linear and fla.delta_rule_kernel(q.half()) is chunk_delta_rule
    monkeypatch.setenv("LAVO_ZOO_FLA", "0")
    monkeypatch.setattr(q.__class__, "is_cuda", property(lambda self: True))
    assert fla.gated_linear_kernel(q) is chunk_gated_linear


@pytest.mark.parametrize("gated", [False, True])
def test_a_failing_fla_kernel_falls_back_once(gated: bool, monkeypatch, request) -> None:
    """fla missing, or its kernel failing (here: no CUDA), gives the PyTorch result, one warning, and the PyTorch
    kernels from then on."""
    from lavo_zoo.attention.ops import fla

    monkeypatch.setattr(fla, "_FAILED", {})
    g0 = gen(request)
    q, k, v = randn(g0, B, H, T, K), randn(g0, B, H, T, K), randn(g0, B, H, T, V)
    beta = torch.rand(B, H, T, generator=g0, dtype=torch.float64)
    g = -torch.rand(B, H, T, generator=g0, dtype=torch.float64) if gated else None
    with pytest.warns(RuntimeWarning, match="PyTorch kernels run from now on"):
        got = fla.fla_chunk_delta_rule(q, k, v, beta, g)
    torch.testing.assert_close(got, chunk_delta_rule(q, k, v, beta, g), atol=0, rtol=0)
    assert "chunk_delta_rule" in fla.failures()
    monkeypatch.setattr(q.__class__, "is_cuda", property(lambda self: True))
    assert fla.delta_rule_kernel(q.half()) is chunk_delta_rule  # failed once: no more tries in this process
