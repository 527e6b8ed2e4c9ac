"""Attention-level decoding API beyond the contract kit (whose step and cross-cache checks every mechanism passes in
test_registry_contract.py): caches that never touch the source, bounded recurrent states, reordered states, refusals.

float64 throughout; tolerances as the attention contract's (chunked sums differ from one pass only by rounding).
"""
from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch

from lavo_zoo.attention import ATTENTIONS, attention_class, build_attention
from lavo_zoo.attention.base import SourceCache, reorder_batch
from lavo_zoo.testing import randomise_zero_parameters
from tests.attention import mechanism_testing

D, H = 32, 4
ATOL, RTOL = 1e-9, 1e-7
NAMES = ATTENTIONS.names()
CAUSAL = [n for n in NAMES if "causal" in attention_class(n).patterns]
CROSS = [n for n in NAMES if "cross" in attention_class(n).patterns]
# the streaming mechanisms whose causal state has a constant size
BOUNDED = [n for n in CAUSAL if attention_class(n).streaming and not attention_class(n).state_grows]
CHUNKS = [1, 4, 2, 7, 1, 1]  # 16 positions, uneven


def _gen(request) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _build(name: str, pattern: str) -> torch.nn.Module:
    torch.manual_seed(0)
    # zero-initialised parameters (EPE, relative bias) randomised so that misuse shows
    return randomise_zero_parameters(build_attention(name, D, H, pattern).double().eval())


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _decode(attn, x: torch.Tensor, state, sizes: list[int]) -> tuple[torch.Tensor, object]:
    ys, start = [], 0
    for n in sizes:
        y, state = attn.step(x[:, start:start + n], state)
        ys.append(y)
        start += n
    return torch.cat(ys, 1), state


class _Refuse(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("a decoding step re-projected the source")


@pytest.mark.parametrize("name", ["lavo", "sdpa"])
def test_cross_step_does_not_touch_the_source(name: str, request) -> None:
    """LAVO keeps only its [H, d] mean memory per source, sdpa its projected K/V: a step never re-projects it."""
    g = _gen(request)
    attn = _build(name, "cross")
    ctx, x = _randn(g, 2, 50, D), _randn(g, 2, 3, D)
    cache = attn.cross_cache(ctx)
    ref = attn(x, context=ctx)
    if name == "lavo":
        assert cache.memory.shape == (2, H, 1, attn.head_dim)  # not the 50 source tokens
        attn.v_proj = _Refuse()
    else:
        assert cache.keys.shape == cache.values.shape == (2, H, 50, D // H)
        attn.k_proj, attn.v_proj = _Refuse(), _Refuse()
    y, _ = attn.step(x, cache)
    torch.testing.assert_close(y, ref, atol=ATOL, rtol=RTOL)
    assert attention_class(name).decoding("cross") == "cache"


@pytest.mark.parametrize("name", CAUSAL)
def test_reordered_state_decodes_like_the_reordered_batch(name: str, request) -> None:
    """Every state class (streaming states and the prefix fallback) reorders its batch: duplicated and permuted
    rows then decode exactly like a batch built in that order from the start."""
    g = _gen(request)
    attn = _build(name, "causal")
    x, nxt = _randn(g, 3, 9, D), _randn(g, 4, 5, D)
    index = torch.tensor([2, 0, 2, 1])
    _, state = _decode(attn, x, None, [4, 5])
    state = reorder_batch(state, index)
    assert attn._state_batch(state) == 4
    y, _ = _decode(attn, nxt, state, [2, 3])
    ref, _ = _decode(attn, torch.cat([x[index], nxt], 1), None, [4, 5, 2, 3])
    torch.testing.assert_close(y, ref[:, 9:], atol=ATOL, rtol=RTOL)


def _tensor_shapes(state) -> list[tuple[int, ...]]:
    """The shapes of every tensor a decoding state holds (its dataclasses, tuples and lists walked)."""
    if torch.is_tensor(state):
        return [tuple(state.shape)]
    if dataclasses.is_dataclass(state):
        state = [getattr(state, f.name) for f in dataclasses.fields(state)]
    if isinstance(state, (list, tuple)):
        return [s for item in state for s in _tensor_shapes(item)]
    return []


@pytest.mark.parametrize("name", BOUNDED)
def test_streaming_state_is_bounded(name: str, request) -> None:
    """A state declared constant in size (``state_grows`` False) does not grow with the number of tokens fed, once a
    window's keys are held (20 tokens: beyond every window of the small options)."""
    g = _gen(request)
    attn = mechanism_testing.build(name, "causal", **mechanism_testing.small_options(name, "causal"))
    _, s1 = attn(_randn(g, 2, 20, D), return_state=True)
    _, s2 = attn(_randn(g, 2, 40, D), state=s1, return_state=True)  # 60 tokens: within cosformer's max_length
    assert _tensor_shapes(s1) == _tensor_shapes(s2) and _tensor_shapes(s1)


@pytest.mark.parametrize("name", CROSS)
def test_reordered_cross_cache(name: str, request) -> None:
    g = _gen(request)
    attn = _build(name, "cross")
    ctx, x = _randn(g, 3, 7, D), _randn(g, 4, 3, D)
    index = torch.tensor([1, 1, 0, 2])
    y, _ = attn.step(x, reorder_batch(attn.cross_cache(ctx), index))
    ref, _ = attn.step(x, attn.cross_cache(ctx[index]))
    torch.testing.assert_close(y, ref, atol=ATOL, rtol=RTOL)


def test_step_refuses_bad_state() -> None:
    attn = _build("sdpa", "causal")
    _, state = attn.step(torch.randn(3, 2, D, dtype=torch.float64))
    with pytest.raises(ValueError, match="state is for batch 3"):
        attn.step(torch.randn(2, 1, D, dtype=torch.float64), state)
    cross = _build("vanilla", "cross")
    with pytest.raises(ValueError, match="cross_cache"):
        cross.step(torch.randn(2, 1, D, dtype=torch.float64), None)
    with pytest.raises(ValueError, match="noncausal"):
        _build("sdpa", "noncausal").step(torch.randn(2, 1, D, dtype=torch.float64))
    assert isinstance(cross.cross_cache(torch.randn(2, 5, D, dtype=torch.float64)), SourceCache)


def test_list_attentions_by_pattern_or_site(capsys) -> None:
    """`lavo-zoo list attentions --pattern cross` shows what can go where, and how each one decodes."""
    import json

    from lavo_zoo.cli import main

    for flag, pattern in (("cross", "cross"), ("decoder_self", "causal"), ("noncausal", "noncausal")):
        assert main(["list", "attentions", "--pattern", flag, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert {r["name"] for r in rows} == {n for n in NAMES if pattern in attention_class(n).patterns}
    assert main(["list", "attentions", "--pattern", "cross", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert "cross:cache" in rows["lavo"]["decoding"] and "cross:prefix" in rows["nystromformer"]["decoding"]
    assert main(["list", "attentions", "--pattern", "causal"]) == 0
    out = capsys.readouterr().out
    assert "causal:prefix" in out and "falls back to re-running the prefix" in out  # longshort, probsparse
    assert main(["list", "attentions", "--pattern", "crosss"]) == 2
    assert main(["list", "recipes", "--pattern", "cross"]) == 2
