"""Every option value a recurrent mechanism accepts gives finite numbers: the chunked forms (ops/gated_linear,
ops/delta_rule) in float32, over each option's accepted range and input scales far from the unit one, against their
token-by-token recurrences in float64 (finite wherever the recurrence is, and close to it). GLA's chunked form
returned NaN where its recurrence was finite (gate_logit_normalizer 0.1 at unit-scale inputs; the default 16 at 1000x
inputs); weak decays after a strong one lost a few percent to rounding in every gated form; Mamba-2's output at
10,000x inputs was zero where its recurrence's was not (the RMSNorm's squares overflowed)."""
from __future__ import annotations

import importlib

import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.ops.delta_rule import chunk_delta_rule
from lavo_zoo.attention.ops.delta_rule.naive import naive_delta_rule
from lavo_zoo.attention.ops.gated_linear import chunk_gated_linear
from lavo_zoo.attention.ops.gated_linear.naive import naive_gated_linear
from tests.attention.mechanism_testing import gen

SCALES = (1e-3, 1.0, 1e3, 1e4)  # input scales, around the unit one
CLOSE = 2e-3  # float32 against float64: error at most this share of the reference's largest value


def _close_and_finite(out: torch.Tensor, ref: torch.Tensor) -> None:
    assert torch.isfinite(ref).all()  # the recurrence is finite here: so must the chunked form be
    assert torch.isfinite(out).all(), "the chunked form is not finite where its recurrence is"
    err = (out.double() - ref).abs().max().item()
    assert err <= CLOSE * ref.abs().max().item() + 1e-30, f"error {err:.3g}, reference up to {ref.abs().max():.3g}"


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("decay", [1e-4, 0.05, 1.0, 20.0, 1e4])  # mean log decay per token and channel (any >= 0)
@pytest.mark.parametrize("gate", ["head", "channel"])
@pytest.mark.parametrize("chunk", [1, 29, 32, 64])
def test_gated_linear_is_finite_over_decays_and_scales(gate, decay, scale, chunk, request) -> None:
    g0 = gen(request)
    B, H, T, K, V = 1, 2, 70, 4, 3
    q, k, v = (scale * torch.randn(B, H, T, n, generator=g0) for n in (K, K, V))
    shape = (B, H, T) if gate == "head" else (B, H, T, K)
    g = -decay * 2 * torch.rand(*shape, generator=g0)  # from no decay to twice the mean
    out, state = chunk_gated_linear(q, k, v, g, None, chunk)
    ref, ref_state = naive_gated_linear(q.double(), k.double(), v.double(), g.double())
    _close_and_finite(out, ref)
    _close_and_finite(state, ref_state)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("decay", [0.0, 1.0, 1e4])
@pytest.mark.parametrize("chunk", [1, 29, 64])
def test_delta_rule_is_finite_over_decays_and_scales(decay, scale, chunk, request) -> None:
    g0 = gen(request)
    B, H, T, K, V = 1, 2, 70, 4, 3
    q, v = (scale * torch.randn(B, H, T, n, generator=g0) for n in (K, V))
    k = torch.nn.functional.normalize(torch.randn(B, H, T, K, generator=g0), dim=-1)
    beta = torch.rand(B, H, T, generator=g0)
    g = -decay * 2 * torch.rand(B, H, T, generator=g0) if decay else None
    out, state = chunk_delta_rule(q, k, v, beta, g, None, chunk)
    ref, ref_state = naive_delta_rule(q.double(), k.double(), v.double(), beta.double(),
                                      None if g is None else g.double())
    _close_and_finite(out, ref)
    _close_and_finite(state, ref_state)


# each numeric option of each recurrent mechanism at the ends of its accepted range (one at a time, the others at their
# defaults), with small widths so that the token-by-token reference stays quick
RANGES = {
    "gla": {"gate_logit_normalizer": [1e-2, 0.1, 16.0, 1e4], "chunk_size": [1, 7], "expand_k": [0.125, 2.0],
            "gate_low_rank_dim": [1], "conv_size": [2], "norm_eps": [1e-12, 10.0]},
    "based": {"feature_dim": [1, 8], "chunk_size": [1, 7], "eps": [1e-12, 10.0], "conv_size": [2]},
    "mamba2": {"state_size": [1, 32], "expand": [1, 3], "chunk_size": [1, 7], "norm_eps": [1e-12, 10.0],
               "conv_size": [0, 2]},
    "deltanet": {"chunk_size": [1, 7], "norm_eps": [1e-12, 10.0], "conv_size": [0, 2]},
    "gated_deltanet": {"expand_v": [0.25, 2.0], "chunk_size": [1, 7], "norm_eps": [1e-12, 10.0], "conv_size": [0]},
}
CASES = [(name, {option: value}) for name, options in RANGES.items() for option, values in options.items()
         for value in values] + [(name, {}) for name in RANGES]


@pytest.mark.parametrize("name, options", CASES, ids=[f"{n}-{o}" for n, o in CASES])
def test_every_accepted_option_gives_finite_numbers(name, options, request) -> None:
    """Each mechanism's layer in float32 against its token-by-token reference in float64, at each input scale."""
    reference = importlib.import_module(f"lavo_zoo.attention.{name}").naive
    g0 = gen(request)
    torch.manual_seed(0)
    layer = build_attention(name, 16, 2, "causal", **options).eval()
    exact = build_attention(name, 16, 2, "causal", **options).double().eval()
    exact.load_state_dict(layer.state_dict())
    for scale in SCALES:
        x = scale * torch.randn(2, 40, 16, generator=g0)
        with torch.no_grad():
            _close_and_finite(layer(x), reference(exact, x.double()))


@pytest.mark.parametrize("chunk", [29, 32, 64])
def test_the_stable_form_of_a_channel_gate_matches_the_recurrence_with_gradients(chunk, request) -> None:
    """Decays far beyond the fast form's range (it takes the stable one, even in float64): outputs, final state and
    every gradient equal the recurrence's."""
    g0 = gen(request)
    B, H, T, K, V = 1, 2, 70, 4, 3
    q, k, v, S0 = (torch.randn(*shape, generator=g0, dtype=torch.float64) for shape in
                   ((B, H, T, K), (B, H, T, K), (B, H, T, V), (B, H, K, V)))
    g = -40 * torch.rand(B, H, T, K, generator=g0, dtype=torch.float64)  # ~ -20 a token: > 354 across a chunk
    g[..., ::3, :] *= 1e-3  # mixed with weak decays, so that the factors that survive are of every size
    inputs = [t.requires_grad_() for t in (q, k, v, g, S0)]
    fast, slow = chunk_gated_linear(q, k, v, g, S0, chunk), naive_gated_linear(q, k, v, g, S0)
    weights = [torch.randn(o.shape, generator=g0, dtype=torch.float64) for o in fast]
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)
    grads = [torch.autograd.grad(sum((o * w).sum() for o, w in zip(out, weights)), inputs) for out in (fast, slow)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("kind", ["head", "channel", "delta"])
def test_weak_decays_after_a_strong_one_keep_their_precision(kind, request) -> None:
    """One token of log decay -1e6, then weak ones: every factor after it is a sum of the weak decays, which a
    difference of cumulative sums (-1e6 + small, less -1e6) lost to float32 rounding (2 to 3 % off)."""
    g0 = gen(request)
    B, H, T, K, V = 1, 2, 70, 4, 3
    q, k, v = (torch.randn(B, H, T, n, generator=g0) for n in (K, K, V))
    g = -0.1 * torch.rand(*((B, H, T, K) if kind == "channel" else (B, H, T)), generator=g0)
    g[:, :, 5] = -1e6
    if kind == "delta":
        k, beta = torch.nn.functional.normalize(k, dim=-1), torch.rand(B, H, T, generator=g0)
        out, _ = chunk_delta_rule(q, k, v, beta, g, None, 64)
        ref, _ = naive_delta_rule(q.double(), k.double(), v.double(), beta.double(), g.double())
    else:
        out, _ = chunk_gated_linear(q, k, v, g, None, 64)
        ref, _ = naive_gated_linear(q.double(), k.double(), v.double(), g.double())
    torch.testing.assert_close(out.double(), ref, atol=1e-5 * ref.abs().max().item(), rtol=1e-5)


@pytest.mark.parametrize("scale", [0.0, 1e-30, 1e-12, 1e-3, 1.0, 1e20])  # 1e20: squares past float32's range
def test_rms_norm_matches_its_float64_reference_with_gradients(scale, request) -> None:
    """The output RMSNorm of GLA, DeltaNet, Gated DeltaNet, KDA and Mamba-2, in float32, against x / sqrt(mean(x^2) +
    eps) * w in float64, output and gradients. Its inner scale (the largest magnitude of x) took part in the backward
    pass: where |x| < 1e-10 (a state a strong decay has cleared) its infinite partial derivative times zero made the
    gradients NaN."""
    from lavo_zoo.attention.recurrent import rms_norm

    g0 = gen(request)
    eps = 1e-5
    x = scale * torch.randn(3, 8, generator=g0, dtype=torch.float64)
    x[0] = 0.0  # a row that is exactly zero, at every scale
    w = torch.randn(8, generator=g0, dtype=torch.float64)
    up = torch.randn(3, 8, generator=g0, dtype=torch.float64)  # the gradient of the output
    x32, w32 = (t.float().requires_grad_() for t in (x, w))
    x64, w64 = (t.clone().requires_grad_() for t in (x, w))
    out = rms_norm(x32, w32, eps)
    ref = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64
    grads = torch.autograd.grad((out * up.float()).sum(), (x32, w32))
    refs = torch.autograd.grad((ref * up).sum(), (x64, w64))
    for a, b in zip((out, *grads), (ref, *refs)):
        assert torch.isfinite(a).all(), "rms_norm (or its gradient) is not finite where its reference is"
        torch.testing.assert_close(a.double(), b, atol=1e-5 * b.abs().max().item() + 1e-38, rtol=1e-4)
