"""The attention contract (zoo/attention/base.py, docs/architecture.md), checked for EVERY registered mechanism
and each pattern it declares.

A new mechanism is tested here for free by registering it. Each mechanism is built from embed_dim/num_heads/pattern
only (its defaults are the paper's). Exactness checks run in float64 on fresh random inputs (a new seed per test).
Mechanisms declaring ``deterministic = False`` are skipped, with the reason, in the checks that compare two outputs
exactly (their eval output is not a fixed function of the real tokens).
"""
from __future__ import annotations

import itertools
import zlib

import pytest
import torch

from lavo_zoo.attention import ATTENTIONS, PATTERNS, attention_class, build_attention, list_attentions
from lavo_zoo.errors import UsageError

D, H = 32, 4
NAMES = ATTENTIONS.names()
CASES = [(n, p) for n in NAMES for p in attention_class(n).patterns]
UNSUPPORTED = [(n, p) for n in NAMES for p in PATTERNS if p not in attention_class(n).patterns]
CAUSAL = [n for n in NAMES if "causal" in attention_class(n).patterns]
STREAMING = [n for n in CAUSAL if attention_class(n).streaming]
MASKED = [(n, p) for n, p in CASES if p in ("noncausal", "cross")]
ATOL, RTOL = 1e-9, 1e-7  # float64: chunked / reordered sums differ from one pass only by rounding


def _gen(request) -> torch.Generator:
    """A fresh, reproducible generator per test (seeded from the test id)."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _build(name: str, pattern: str, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_attention(name, D, H, pattern).to(dtype).eval()


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _skip_nondeterministic(name: str, check: str) -> None:
    if not attention_class(name).deterministic:
        pytest.skip(f"{name} declares deterministic=False: its eval output depends on more than the real tokens "
                    f"(sampling), so the exact check '{check}' does not apply")


def _right_padding(B: int, T: int, lengths: list[int]) -> torch.Tensor:
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # [B, T]


# ----------------------------------------------------------------------------------------------- declarations
def test_registry_lists_capabilities() -> None:
    infos = {i.name: i for i in list_attentions()}
    assert set(infos) == set(NAMES) and NAMES
    for name, info in infos.items():
        assert info.patterns and set(info.patterns) <= set(PATTERNS), name
        assert isinstance(info.streaming, bool), name
        assert not info.streaming or "causal" in info.patterns, f"{name}: streaming needs the causal pattern"
        assert info.description, f"{name}: no description"


@pytest.mark.parametrize("name,pattern", UNSUPPORTED)
def test_unsupported_pattern_refused_at_build(name: str, pattern: str) -> None:
    with pytest.raises(UsageError) as err:
        build_attention(name, D, H, pattern)
    for supported in attention_class(name).patterns:
        assert supported in str(err.value)
    with pytest.raises(ValueError, match="supports"):  # the class itself refuses too
        attention_class(name)(embed_dim=D, num_heads=H, pattern=pattern)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_pattern_refused(name: str) -> None:
    with pytest.raises(UsageError, match="causal"):
        build_attention(name, D, H, "casual")


# ----------------------------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("name,pattern", CASES)
def test_output_shapes(name: str, pattern: str, request) -> None:
    g = _gen(request)
    attn = _build(name, pattern, torch.float32)
    for T in (1, 23):
        x = _randn(g, 2, T, D, dtype=torch.float32)
        kw = {}
        if pattern == "cross":
            kw = {"context": _randn(g, 2, 11, D, dtype=torch.float32),
                      "context_mask": _right_padding(2, 11, [11, 6])}
        pm = _right_padding(2, T, [T, max(1, T - 5)])
        for mask in (None, pm):
            y = attn(x, mask, **kw)
            assert y.shape == (2, T, D) and y.dtype == torch.float32
            assert torch.isfinite(y).all(), f"{name}/{pattern}: non-finite output (T={T}, mask={mask is not None})"
    if pattern == "causal" and attention_class(name).streaming:
        y, state = attn(_randn(g, 2, 5, D, dtype=torch.float32), return_state=True)
        assert y.shape == (2, 5, D) and state is not None
    else:  # no streaming: state requests are refused with a clear message
        with pytest.raises(ValueError, match="stream"):
            attn(_randn(g, 2, 5, D, dtype=torch.float32), return_state=True,
                 **({"context": _randn(g, 2, 4, D, dtype=torch.float32)} if pattern == "cross" else {}))


@pytest.mark.parametrize("name,pattern", CASES)
def test_eval_output_is_reproducible(name: str, pattern: str, request) -> None:
    _skip_nondeterministic(name, "same input, same output")
    g = _gen(request)
    attn = _build(name, pattern)
    x = _randn(g, 2, 17, D)
    kw = {"context": _randn(g, 2, 9, D)} if pattern == "cross" else {}
    torch.testing.assert_close(attn(x, **kw), attn(x, **kw), atol=0, rtol=0)


# ----------------------------------------------------------------------------------------------- causality
@pytest.mark.parametrize("name", CAUSAL)
def test_no_future_leakage(name: str, request) -> None:
    """Changing tokens >= t0 must not change any output < t0 (for several cut points)."""
    _skip_nondeterministic(name, "no future leakage")
    g = _gen(request)
    attn = _build(name, "causal")
    T = 47
    x = _randn(g, 2, T, D)
    y = attn(x)
    for t0 in (1, 16, 17, 33, T - 1):
        x2 = x.clone()
        x2[:, t0:] = 10 * _randn(g, 2, T - t0, D)
        y2 = attn(x2)
        torch.testing.assert_close(y2[:, :t0], y[:, :t0], atol=ATOL, rtol=RTOL,
                                   msg=lambda m, t0=t0: f"{name}: outputs before t0={t0} changed with the future\n{m}")
        assert not torch.allclose(y2[:, t0:], y[:, t0:]), f"{name}: output ignores the input at t >= {t0}"


@pytest.mark.parametrize("name", CAUSAL)
def test_no_gradient_from_the_future(name: str, request) -> None:
    """d y_t / d x_s = 0 for s > t, up to rounding (the gradient also sees NaN paths hidden by masks)."""
    g = _gen(request)
    attn = _build(name, "causal")
    x = _randn(g, 1, 29, D).requires_grad_(True)
    t = 12
    attn(x)[0, t].square().sum().backward()
    assert torch.isfinite(x.grad).all()
    past = x.grad[0, : t + 1].abs().max()
    assert past > 0
    # exactly 0 for masked forms; rounding-level for FFT convolutions (S4D)
    assert x.grad[0, t + 1:].abs().max() <= 1e-12 * past, f"{name}: output {t} has a gradient from a future token"


# ----------------------------------------------------------------------------------------------- padding
@pytest.mark.parametrize("name,pattern", MASKED)
def test_padding_invariance(name: str, pattern: str, request) -> None:
    """Whatever is in padded positions (of x, and of the context for cross), the real outputs do not change."""
    _skip_nondeterministic(name, "padding invariance")
    g = _gen(request)
    attn = _build(name, pattern)
    B, T, S = 3, 37, 21
    x = _randn(g, B, T, D)
    pm = _right_padding(B, T, [T, 30, 9])
    kw, kw2 = {}, {}
    if pattern == "cross":
        ctx = _randn(g, B, S, D)
        cm = _right_padding(B, S, [13, S, 4])
        ctx2 = torch.where(cm[..., None], ctx, 100 * _randn(g, B, S, D))
        kw, kw2 = {"context": ctx, "context_mask": cm}, {"context": ctx2, "context_mask": cm}
    x2 = torch.where(pm[..., None], x, 100 * _randn(g, B, T, D))
    y, y2 = attn(x, pm, **kw), attn(x2, pm, **(kw2 or kw))
    assert torch.isfinite(y).all() and torch.isfinite(y2).all(), f"{name}/{pattern}: non-finite padded outputs"
    torch.testing.assert_close(y2[pm], y[pm], atol=ATOL, rtol=RTOL,
                               msg=lambda m: f"{name}/{pattern}: padded content changed real outputs\n{m}")
    # a sequence with no padding gives the same output with an all-True mask as with none
    full = torch.ones(B, T, dtype=torch.bool)
    kw_full = {"context": kw["context"], "context_mask": torch.ones(B, S, dtype=torch.bool)} if kw else {}
    kw_none = {"context": kw["context"]} if kw else {}
    torch.testing.assert_close(attn(x, full, **kw_full), attn(x, **kw_none), atol=ATOL, rtol=RTOL)


# ----------------------------------------------------------------------------------------------- streaming
@pytest.mark.parametrize("name", STREAMING)
def test_streaming_matches_full(name: str, request) -> None:
    """Feeding uneven chunks and carrying the state gives the one-pass output (incl. single-token steps)."""
    _skip_nondeterministic(name, "streaming == full")
    g = _gen(request)
    attn = _build(name, "causal")
    chunks = [1, 6, 13, 2, 19, 1, 1, 24]  # 67 tokens, crossing every window / chunk boundary in use
    x = _randn(g, 2, sum(chunks), D)
    y_full = attn(x)
    ys, state = [], None
    for a, n in zip(itertools.accumulate([0] + chunks), chunks):
        y, state = attn(x[:, a:a + n], state=state, return_state=True)
        ys.append(y)
    torch.testing.assert_close(torch.cat(ys, 1), y_full, atol=ATOL, rtol=RTOL,
                               msg=lambda m: f"{name}: chunked streaming differs from the full pass\n{m}")
    # the state returned by a full pass continues the sequence like the chunked one does
    y_a, state_a = attn(x[:, :40], return_state=True)
    y_b, _ = attn(x[:, 40:], state=state_a, return_state=True)
    torch.testing.assert_close(torch.cat([y_a, y_b], 1), y_full, atol=ATOL, rtol=RTOL)


# ----------------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name,pattern", CASES)
def test_finite_gradients(name: str, pattern: str, request) -> None:
    """Training mode, float32, with and without padding: every gradient is finite and the input gets one."""
    g = _gen(request)
    torch.manual_seed(0)
    attn = build_attention(name, D, H, pattern).train()
    B, T, S = 2, 21, 13
    for masked in (False, True):
        attn.zero_grad()
        x = _randn(g, B, T, D, dtype=torch.float32).requires_grad_(True)
        pm = _right_padding(B, T, [T, 8]) if masked else None
        kw = {}
        if pattern == "cross":
            ctx = _randn(g, B, S, D, dtype=torch.float32).requires_grad_(True)
            kw = {"context": ctx, "context_mask": _right_padding(B, S, [5, S]) if masked else None}
        y = attn(x, pm, **kw)
        y.square().mean().backward()
        assert torch.isfinite(x.grad).all(), f"{name}/{pattern}: non-finite input gradient (masked={masked})"
        assert x.grad.abs().sum() > 0, f"{name}/{pattern}: the input gets no gradient"
        if pattern == "cross":
            assert torch.isfinite(kw["context"].grad).all() and kw["context"].grad.abs().sum() > 0
        for pname, p in attn.named_parameters():
            if p.grad is not None:
                assert torch.isfinite(p.grad).all(), f"{name}/{pattern}: non-finite gradient of {pname}"
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in attn.parameters()), \
            f"{name}/{pattern}: no parameter gets a gradient"
