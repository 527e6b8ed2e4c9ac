"""The ``mean`` control (mean.py): each query gets the mean of the real values it may see; streaming in any chunks
equals one call with a constant-size state; padding never matters; the cross cache is the source's mean and a step
never touches the source; fp32 sums. Its naive reference is checked in test_naive_references.py and the contract
(causality, padding, streaming, decoding) in test_registry_contract.py, as for every mechanism."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention import attention_class, build_attention
from lavo_zoo.attention.mean import MeanCrossCache, MeanState

F64 = torch.float64


def _make(pattern: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_attention("mean", 16, 2, pattern).to(F64).eval()


@pytest.mark.parametrize("pattern", ["causal", "noncausal", "cross"])
def test_output_is_the_mean_of_the_visible_values(pattern):
    attn = _make(pattern)
    x, src = torch.randn(2, 9, 16, dtype=F64), torch.randn(2, 5, 16, dtype=F64)
    if pattern == "cross":
        y, want = attn(x, context=src), attn.v_proj(src).mean(1, keepdim=True).expand(2, 9, 16)
    elif pattern == "noncausal":
        y, want = attn(x), attn.v_proj(x).mean(1, keepdim=True).expand(2, 9, 16)
    else:
        y, want = attn(x), attn.v_proj(x).cumsum(1) / torch.arange(1, 10, dtype=F64)[:, None]
    torch.testing.assert_close(y, attn.out_proj(want))


def test_streaming_in_uneven_chunks_and_token_by_token_equals_full():
    attn = _make("causal")
    x = torch.randn(2, 23, 16, dtype=F64)
    y = attn(x)
    for sizes in ([1, 3, 2, 7, 1, 5, 4], [1] * 23, [23]):
        state, ys, start = None, [], 0
        for n in sizes:
            y_n, state = attn(x[:, start:start + n], state=state, return_state=True)
            ys.append(y_n)
            start += n
        torch.testing.assert_close(torch.cat(ys, 1), y)
        assert isinstance(state, MeanState) and state.count == 23 and state.total.shape == (2, 16)  # constant size


@pytest.mark.parametrize("pattern", ["causal", "noncausal"])
def test_padded_keys_are_left_out(pattern):
    """Padded tokens (any content) change no real output; a real query's output is the mean over the real keys."""
    attn = _make(pattern)
    x = torch.randn(1, 10, 16, dtype=F64)
    keep = torch.tensor([0, 2, 3, 5, 6, 9])
    mask = torch.zeros(1, 10, dtype=torch.bool)
    mask[:, keep] = True
    noisy = torch.where(mask[..., None], x, 100 * torch.randn(1, 10, 16, dtype=F64))
    torch.testing.assert_close(attn(noisy, mask)[:, keep], attn(x[:, keep]))


def test_cross_padding_and_a_step_never_touches_the_source():
    attn = _make("cross")
    x, src = torch.randn(2, 4, 16, dtype=F64), torch.randn(2, 9, 16, dtype=F64)
    mask = torch.arange(9)[None] < torch.tensor([[9], [5]])
    ref = attn(x, context=src, context_mask=mask)
    torch.testing.assert_close(ref[1], attn(x[1:], context=src[1:, :5])[0])
    cache = attn.cross_cache(src, mask)
    assert isinstance(cache, MeanCrossCache) and cache.memory.shape == (2, 1, 16)  # not the 9 source tokens
    attn.v_proj = None  # a step that re-projected the source would fail
    y, _ = attn.step(x, cache)
    torch.testing.assert_close(y, ref)
    cls = attention_class("mean")
    assert cls.decoding("cross") == "cache" and cls.decoding("causal") == "state" and not cls.reads_queries


def test_sums_in_fp32_for_bf16():
    attn = build_attention("mean", 16, 2, "causal").to(torch.bfloat16)
    y, state = attn(torch.randn(1, 40, 16, dtype=torch.bfloat16), return_state=True)
    assert y.dtype == torch.bfloat16 and state.total.dtype == torch.float32


def test_bad_state_refused():
    attn = _make("causal")
    with pytest.raises(TypeError, match="MeanState"):
        attn(torch.randn(1, 3, 16, dtype=F64), state=("not", "a", "state"), return_state=True)
    _, state = attn(torch.randn(2, 3, 16, dtype=F64), return_state=True)
    with pytest.raises(ValueError, match="batch"):
        attn(torch.randn(3, 1, 16, dtype=F64), state=state, return_state=True)
    with pytest.raises(TypeError, match="MeanCrossCache"):
        _make("cross").cross_step(torch.randn(1, 1, 16, dtype=F64), state)
