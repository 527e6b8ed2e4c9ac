"""``sdpa`` (sdpa.py): fast path == its naive dense reference (outputs and gradients), streaming == full, the KV cache
grows with the sequence, padding, rotary, errors."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.sdpa import naive

F64 = torch.float64


@pytest.mark.parametrize("T", [3, 8, 11])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("pattern, rope", [("causal", False), ("causal", True), ("noncausal", True), ("cross", False)])
def test_sdpa_equals_reference(helpers, pattern, rope, padded, T):
    helpers.compare(helpers.make("sdpa", pattern, rope=rope), naive, T, padded)


@pytest.mark.parametrize("options", [{}, {"rope": True}], ids=str)
def test_streaming_equals_full(helpers, options):
    attn = helpers.make("sdpa", "causal", **options)
    x = torch.randn(2, 19, 16, dtype=F64)
    y = attn(x)
    torch.testing.assert_close(helpers.stream(attn, x, [2, 1, 6, 3, 7]), y)
    torch.testing.assert_close(helpers.stream(attn, x, [1] * 19), y)


def test_state_size():
    sdpa = build_attention("sdpa", 16, 2, "causal")
    _, cache = sdpa(torch.randn(1, 30, 16), return_state=True)
    assert cache.keys.shape == (1, 2, 30, 8) and cache.position == 30


def test_noncausal_padding_invariance(helpers):
    attn = helpers.make("sdpa", "noncausal", rope=True)
    x = torch.randn(1, 9, 16, dtype=F64)
    padded = torch.cat([x, 100 * torch.randn(1, 4, 16, dtype=F64)], 1)
    torch.testing.assert_close(attn(padded, torch.arange(13)[None] < 9)[:, :9], attn(x))


def test_rope_makes_sdpa_position_aware():
    plain, rope = build_attention("sdpa", 16, 2, "causal"), build_attention("sdpa", 16, 2, "causal", rope=True)
    assert not plain.encodes_position and rope.encodes_position
    rope.load_state_dict(plain.state_dict())
    x = torch.randn(1, 6, 16)
    assert not torch.allclose(rope(x), plain(x))
    torch.testing.assert_close(rope(x)[:, 0], plain(x)[:, 0])   # position 0 is not rotated


def test_errors():
    with pytest.raises(ValueError, match="rope=True needs self-attention"):
        build_attention("sdpa", 16, 2, "cross", rope=True)
    with pytest.raises(TypeError, match="KVCache"):
        build_attention("sdpa", 16, 2, "causal")(torch.randn(1, 3, 16), state=object(), return_state=True)
