"""The attention contract, as reusable checks: every registered mechanism and each pattern it declares.

A mechanism is built from embed_dim/num_heads/pattern only (its defaults must be usable). Exactness checks run in
float64 on random inputs drawn from ``seed``. Mechanisms declaring ``deterministic = False`` skip the checks that
compare two outputs exactly (their eval output is not a fixed function of the real tokens).

The checks' arguments, stated here once for every ``check_*`` function, :func:`attention_checks` and
:func:`check_attention`:

    name: a registered attention's name (``lavo-zoo list attentions``).
    pattern: the attention pattern to build it for (causal, noncausal or cross; one it declares).
    seed: the seed of the random inputs (the weights are drawn from the global generator, seeded 0).

A check that fails raises AssertionError naming the mechanism and what broke; one that does not apply to the
mechanism skips (``pytest.skip``).
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import torch

from lavo_zoo.attention import PATTERNS, attention_class, attention_info, build_attention
from lavo_zoo.errors import UsageError

D, H = 32, 4
ATOL, RTOL = 1e-9, 1e-7  # float64: chunked / reordered sums differ from one pass only by rounding


def _skip(reason: str) -> None:
    import pytest

    pytest.skip(reason)


def _exact_only(name: str, check: str) -> None:
    if not attention_class(name).deterministic:
        _skip(f"{name} declares deterministic=False: its eval output depends on more than the real tokens "
              f"(sampling), so the exact check '{check}' does not apply")


def _build(name: str, pattern: str, dtype: torch.dtype = torch.float64, seed: int = 0,
           options: dict[str, Any] | None = None) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_attention(name, D, H, pattern, **(options or {})).to(dtype).eval()


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def randomise_zero_parameters(module: torch.nn.Module) -> torch.nn.Module:
    """Draw every parameter of ``module`` that is all zeros from N(0, 1), in place (from the global generator).

    Parameters that start at zero (an embedded position encoding, a relative bias, a gate) make a wrong index or sign
    in them invisible to a comparison; randomised, the misuse shows.

    Args:
        module: any module (an attention, a decoder).

    Returns:
        ``module`` itself, for chaining.
    """
    with torch.no_grad():
        for p in module.parameters():
            if not p.any():
                p.normal_()
    return module


def _right_padding(B: int, T: int, lengths: list[int]) -> torch.Tensor:
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # [B, T] True = real


# ------------------------------------------------------------------------------------------------ declarations
def check_declared_capabilities(name: str) -> None:
    """``list_attentions`` describes the mechanism: known patterns, streaming only with causal, a description."""
    info = attention_info(name)
    assert info.patterns and set(info.patterns) <= set(PATTERNS), f"{name}: patterns {info.patterns}"
    assert isinstance(info.streaming, bool), f"{name}: streaming must be a bool"
    assert not info.streaming or "causal" in info.patterns, f"{name}: streaming needs the causal pattern"
    assert info.description, f"{name}: no description (set `description` or a class docstring)"


def check_refuses_unsupported_patterns(name: str) -> None:
    """Building for a pattern it does not declare, or an unknown pattern, is a clear error naming what it supports."""
    cls = attention_class(name)
    for pattern in (p for p in PATTERNS if p not in cls.patterns):
        try:
            build_attention(name, D, H, pattern)
        except UsageError as e:
            assert all(p in str(e) for p in cls.patterns), f"{name}: the refusal does not name {cls.patterns}: {e}"
        else:
            raise AssertionError(f"{name}: build_attention accepted unsupported pattern '{pattern}'")
        try:
            cls(embed_dim=D, num_heads=H, pattern=pattern)
        except ValueError as e:
            assert "supports" in str(e), f"{name}: the class's refusal does not say what it supports: {e}"
        else:
            raise AssertionError(f"{name}: the class itself accepted unsupported pattern '{pattern}'")
    try:
        build_attention(name, D, H, "casual")
    except UsageError as e:
        assert "causal" in str(e), f"{name}: an unknown pattern's refusal does not list the patterns: {e}"
    else:
        raise AssertionError(f"{name}: build_attention accepted the unknown pattern 'casual'")


# ------------------------------------------------------------------------------------------------------ shapes
def check_output_shapes(name: str, pattern: str, seed: int = 0) -> None:
    """[B, T, D] in, [B, T, D] out (T = 1 and 23, with and without padding), finite; streaming only if declared."""
    g = torch.Generator().manual_seed(seed)
    attn = _build(name, pattern, torch.float32)
    for T in (1, 23):
        x = _randn(g, 2, T, D, dtype=torch.float32)
        kw = {}
        if pattern == "cross":
            kw = {"context": _randn(g, 2, 11, D, dtype=torch.float32), "context_mask": _right_padding(2, 11, [11, 6])}
        for mask in (None, _right_padding(2, T, [T, max(1, T - 5)])):
            y = attn(x, mask, **kw)
            assert y.shape == (2, T, D) and y.dtype == torch.float32, f"{name}/{pattern}: output {y.shape} {y.dtype}"
            assert torch.isfinite(y).all(), f"{name}/{pattern}: non-finite output (T={T}, mask={mask is not None})"
    x = _randn(g, 2, 5, D, dtype=torch.float32)
    if pattern == "causal" and attention_class(name).streaming:
        y, state = attn(x, return_state=True)
        assert y.shape == (2, 5, D) and state is not None, f"{name}: streaming returned no state"
    else:
        try:
            attn(x, return_state=True, **({"context": _randn(g, 2, 4, D, dtype=torch.float32)}
                                          if pattern == "cross" else {}))
        except ValueError as e:
            assert "stream" in str(e), f"{name}/{pattern}: the refusal of return_state does not say why: {e}"
        else:
            raise AssertionError(f"{name}/{pattern}: return_state accepted without streaming support")


def check_reproducible(name: str, pattern: str, seed: int = 0) -> None:
    """In eval mode the same input gives the same output."""
    _exact_only(name, "same input, same output")
    g = torch.Generator().manual_seed(seed)
    attn = _build(name, pattern)
    x = _randn(g, 2, 17, D)
    kw = {"context": _randn(g, 2, 9, D)} if pattern == "cross" else {}
    torch.testing.assert_close(attn(x, **kw), attn(x, **kw), atol=0, rtol=0)


# --------------------------------------------------------------------------------------------------- causality
def check_causality(name: str, seed: int = 0) -> None:
    """Changing tokens >= t0 changes no output < t0 (several cut points), and d y_t / d x_s = 0 for s > t."""
    _exact_only(name, "no future leakage")
    g = torch.Generator().manual_seed(seed)
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
    x = _randn(g, 1, 29, D).requires_grad_(True)
    t = 12
    attn(x)[0, t].square().sum().backward()
    assert torch.isfinite(x.grad).all(), f"{name}: non-finite gradient"
    past = x.grad[0, : t + 1].abs().max()
    assert past > 0, f"{name}: output {t} has no gradient from its past"
    # exactly 0 for masked forms; rounding-level for FFT convolutions (S4D)
    assert x.grad[0, t + 1:].abs().max() <= 1e-12 * past, f"{name}: output {t} has a gradient from a future token"


# ----------------------------------------------------------------------------------------------------- padding
def check_padding_invariance(name: str, pattern: str, seed: int = 0) -> None:
    """Whatever is in padded positions (of x, and of the context for cross), the real outputs do not change; an
    all-True mask equals no mask. Patterns noncausal and cross (causal outputs never see later padding).
    """
    _exact_only(name, "padding invariance")
    g = torch.Generator().manual_seed(seed)
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
    full = torch.ones(B, T, dtype=torch.bool)
    kw_full = {"context": kw["context"], "context_mask": torch.ones(B, S, dtype=torch.bool)} if kw else {}
    kw_none = {"context": kw["context"]} if kw else {}
    torch.testing.assert_close(attn(x, full, **kw_full), attn(x, **kw_none), atol=ATOL, rtol=RTOL,
                               msg=lambda m: f"{name}/{pattern}: an all-True mask differs from no mask\n{m}")


def check_padded_row_alone(name: str, pattern: str, seed: int = 0, options: dict[str, Any] | None = None) -> None:
    """A row padded in front or behind (x; for cross, the context) gives the real outputs the row alone gives, for 3
    and 17 padded positions (not multiples of any window or segment a mechanism cuts at), in a batch with an unpadded
    row: windows, segments, landmarks and sinks are counted over the real tokens, not from the start of the batch.

    ``options``: the mechanism's options (None: its defaults), e.g. ``{"num_sinks": 4}`` for ``local``'s sinks;
    its other arguments are stated in `lavo_zoo.testing.attention`.
    """
    _exact_only(name, "padded row == the row alone")
    g = torch.Generator().manual_seed(seed)
    attn = randomise_zero_parameters(_build(name, pattern, options=options))
    T, S = 29, 13
    for side, pad in itertools.product(("front", "behind"), (3, 17)):
        n = S if pattern == "cross" else T                            # the padded sequence's real length
        real = slice(pad, pad + n) if side == "front" else slice(0, n)
        mask = torch.ones(2, n + pad, dtype=torch.bool)               # row 0: unpadded; row 1: `pad` padded positions
        mask[1] = False
        mask[1, real] = True
        if pattern == "cross":
            x, ctx = _randn(g, 2, T, D), _randn(g, 2, S + pad, D)
            got = attn(x, context=ctx, context_mask=mask)[1]
            alone = attn(x[1:], context=ctx[1:, real])[0]             # [T, D]
        else:
            x = _randn(g, 2, T + pad, D)
            got = attn(x, mask)[1, real]
            alone = attn(x[1:, real])[0]                              # [T, D]
        assert torch.isfinite(got).all(), f"{name}/{pattern}: non-finite outputs with padding {side}"
        torch.testing.assert_close(got, alone, atol=ATOL, rtol=RTOL, msg=lambda m, side=side, pad=pad: (
            f"{name}/{pattern}: a row with {pad} padded positions {side} differs from the row alone\n{m}"))


# --------------------------------------------------------------------------------------------------- streaming
def check_streaming_matches_full(name: str, seed: int = 0) -> None:
    """Uneven chunks (single tokens included) carrying the state give the one-pass output; a full pass's state
    continues the sequence like the chunked one.
    """
    _exact_only(name, "streaming == full")
    g = torch.Generator().manual_seed(seed)
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
    y_a, state_a = attn(x[:, :40], return_state=True)
    y_b, _ = attn(x[:, 40:], state=state_a, return_state=True)
    torch.testing.assert_close(torch.cat([y_a, y_b], 1), y_full, atol=ATOL, rtol=RTOL,
                               msg=lambda m: f"{name}: a full pass's state does not continue the sequence\n{m}")


# ---------------------------------------------------------------------------------------------------- decoding
DECODE_CHUNKS = [1, 4, 2, 7, 1, 1]  # 16 positions in uneven steps, single tokens included


def _build_randomised(name: str, pattern: str) -> torch.nn.Module:
    """float64, eval mode, with zero-initialised parameters (position biases) randomised so that misuse shows."""
    return randomise_zero_parameters(_build(name, pattern))


def _decode(attn: torch.nn.Module, x: torch.Tensor, state: object, sizes: list[int]) -> torch.Tensor:
    ys, start = [], 0
    for n in sizes:
        y, state = attn.step(x[:, start:start + n], state)
        ys.append(y)
        start += n
    return torch.cat(ys, 1)


def _per_prefix(attn: torch.nn.Module, x: torch.Tensor, sizes: list[int], **kw: object) -> torch.Tensor:
    """What a mechanism that mixes queries gives step by step: each step's rows of the forward over its prefix."""
    ends = list(itertools.accumulate(sizes))
    return torch.cat([attn(x[:, :e], **kw)[:, e - n:e] for e, n in zip(ends, sizes)], 1)


def check_decoding_step(name: str, seed: int = 0) -> None:
    """``step`` in uneven chunks from no state gives the forward pass (for a mechanism that mixes queries: the
    forward over each prefix).
    """
    _exact_only(name, "step == forward")
    g = torch.Generator().manual_seed(seed)
    attn = _build_randomised(name, "causal")
    x = _randn(g, 2, sum(DECODE_CHUNKS), D)
    ref = _per_prefix(attn, x, DECODE_CHUNKS) if "causal" in attn.mixes_queries else attn(x)
    torch.testing.assert_close(_decode(attn, x, None, DECODE_CHUNKS), ref, atol=ATOL, rtol=RTOL,
                               msg=lambda m: f"{name}: step-by-step decoding differs from the forward pass\n{m}")


def check_cross_cache(name: str, seed: int = 0) -> None:
    """Steps reading ``cross_cache(source)`` (padded sources) give cross attention recomputed from the source."""
    _exact_only(name, "cross cache == cross forward")
    g = torch.Generator().manual_seed(seed)
    attn = _build_randomised(name, "cross")
    ctx, x = _randn(g, 3, 11, D), _randn(g, 3, sum(DECODE_CHUNKS), D)
    mask = _right_padding(3, 11, [11, 6, 1])
    kw = {"context": ctx, "context_mask": mask}
    ref = _per_prefix(attn, x, DECODE_CHUNKS, **kw) if "cross" in attn.mixes_queries else attn(x, **kw)
    torch.testing.assert_close(_decode(attn, x, attn.cross_cache(ctx, mask), DECODE_CHUNKS), ref, atol=ATOL,
                               rtol=RTOL, msg=lambda m: f"{name}: decoding from the cross cache differs\n{m}")


# --------------------------------------------------------------------------------------------------- gradients
def check_finite_gradients(name: str, pattern: str, seed: int = 0) -> None:
    """Training mode, float32, with and without padding: every gradient is finite and the input gets one."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
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
        attn(x, pm, **kw).square().mean().backward()
        if pattern != "cross" or attn.reads_queries:  # a control that ignores its queries (mean): none in cross
            assert torch.isfinite(x.grad).all(), f"{name}/{pattern}: non-finite input gradient (masked={masked})"
            assert x.grad.abs().sum() > 0, f"{name}/{pattern}: the input gets no gradient"
        if pattern == "cross":
            assert torch.isfinite(kw["context"].grad).all() and kw["context"].grad.abs().sum() > 0, \
                f"{name}/cross: the context gets no finite gradient"
        for pname, p in attn.named_parameters():
            if p.grad is not None:
                assert torch.isfinite(p.grad).all(), f"{name}/{pattern}: non-finite gradient of {pname}"
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in attn.parameters()), \
            f"{name}/{pattern}: no parameter gets a gradient"


# ---------------------------------------------------------------------------------------------------- the kit
def attention_checks(name: str, seed: int = 0) -> list[Callable[[], None]]:
    """Every contract check that applies to attention ``name``, as zero-argument callables with readable names
    (for ``pytest.mark.parametrize(..., ids=str)``).
    """
    cls = attention_class(name)
    checks: list[tuple[Callable, tuple]] = [(check_declared_capabilities, (name,)),
                                            (check_refuses_unsupported_patterns, (name,))]
    for pattern in cls.patterns:
        checks += [(check_output_shapes, (name, pattern, seed)), (check_reproducible, (name, pattern, seed)),
                   (check_finite_gradients, (name, pattern, seed))]
        if pattern in ("noncausal", "cross"):
            checks.append((check_padding_invariance, (name, pattern, seed)))
        checks.append((check_padded_row_alone, (name, pattern, seed)))
    if "cross" in cls.patterns:
        checks.append((check_cross_cache, (name, seed)))
    if "causal" in cls.patterns:
        checks += [(check_causality, (name, seed)), (check_decoding_step, (name, seed))]
        if cls.streaming:
            checks.append((check_streaming_matches_full, (name, seed)))
    out = []
    for fn, args in checks:
        bound = functools.partial(fn, *args)
        label = "-".join(str(a) for a in args if not isinstance(a, int))
        out.append(_Named(bound, f"{fn.__name__.removeprefix('check_')}[{label}]"))
    return out


class _Named:
    """A zero-argument check whose ``str`` is its test id."""

    def __init__(self, fn: Callable[[], None], label: str) -> None:
        self.fn, self.label = fn, label

    def __call__(self) -> None:
        self.fn()

    def __repr__(self) -> str:
        return self.label


def check_attention(name: str, seed: int = 0) -> None:
    """Run every applicable contract check for ``name`` (outside pytest: checks that do not apply are skipped)."""
    for check in attention_checks(name, seed):
        try:
            check()
        except BaseException as e:  # pytest's Skipped derives from BaseException
            if type(e).__name__ != "Skipped":
                raise
