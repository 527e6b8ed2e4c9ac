"""``sdpa`` and ``local``: fast path == dense reference (outputs and gradients), streaming == full, rotary, errors."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.local import naive as local_reference
from lavo_zoo.attention.ops.window import window_attention
from lavo_zoo.attention.ops.window.flex import flex_window_attention
from lavo_zoo.attention.sdpa import naive as sdpa_reference
from lavo_zoo.errors import UsageError

F64 = torch.float64


@pytest.mark.parametrize("T", [3, 8, 11])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("pattern, rope", [("causal", False), ("causal", True), ("noncausal", True), ("cross", False)])
def test_sdpa_equals_reference(helpers, pattern, rope, padded, T):
    helpers.compare(helpers.make("sdpa", pattern, rope=rope), sdpa_reference, T, padded)


@pytest.mark.parametrize("T", [3, 8, 11])  # T < w, a multiple of w, not a multiple
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("pattern, relative_bias", [("causal", True), ("causal", False), ("noncausal", True)])
def test_local_equals_reference(helpers, pattern, relative_bias, padded, T):
    helpers.compare(helpers.make("local", pattern, window_size=4, relative_bias=relative_bias), local_reference,
                    T, padded)


@pytest.mark.parametrize("name, options", [("sdpa", {}), ("sdpa", {"rope": True}),
                                           ("local", {"window_size": 4, "relative_bias": True})], ids=str)
def test_streaming_equals_full(helpers, name, options):
    attn = helpers.make(name, "causal", **options)
    x = torch.randn(2, 19, 16, dtype=F64)
    y = attn(x)
    torch.testing.assert_close(helpers.stream(attn, x, [2, 1, 6, 3, 7]), y)
    torch.testing.assert_close(helpers.stream(attn, x, [1] * 19), y)


def test_state_sizes():
    local = build_attention("local", 16, 2, "causal", window_size=4)
    sdpa = build_attention("sdpa", 16, 2, "causal")
    x = torch.randn(1, 30, 16)
    _, ring = local(x, return_state=True)
    _, cache = sdpa(x, return_state=True)
    assert ring.keys.shape == (1, 2, 3, 8)                      # w - 1 keys, whatever the length
    assert ring.keys.untyped_storage().nbytes() == 3 * 16 * 4   # not a view that keeps the whole chunk alive
    assert cache.keys.shape == (1, 2, 30, 8) and cache.position == 30


def test_noncausal_padding_invariance(helpers):
    for attn in (helpers.make("sdpa", "noncausal", rope=True), helpers.make("local", "noncausal", window_size=4)):
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


def test_local_window_is_exact():
    """A key w positions back has no influence; one w-1 back does."""
    attn = build_attention("local", 16, 2, "causal", window_size=4).to(F64)
    x = torch.randn(1, 10, 16, dtype=F64)
    x2 = x.clone()
    x2[:, 2] += 1.0
    d = (attn(x2) - attn(x)).abs().amax(-1)[0]
    assert (d[[0, 1, 6, 7, 8, 9]] == 0).all() and (d[2:6] > 0).all()


def test_errors():
    with pytest.raises(ValueError, match="rope=True needs self-attention"):
        build_attention("sdpa", 16, 2, "cross", rope=True)
    with pytest.raises(UsageError, match="does not support pattern 'cross'"):
        build_attention("local", 16, 2, "cross")
    with pytest.raises(TypeError, match="KVCache"):
        build_attention("sdpa", 16, 2, "causal")(torch.randn(1, 3, 16), state=object(), return_state=True)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("causal, prefix, T, block", [(True, 0, 37, 128), (True, 3, 37, 128), (False, 0, 37, 128),
                                                      (True, 0, 100, 16), (True, 5, 90, 16), (False, 0, 100, 16),
                                                      (False, 0, 100, 8)])
def test_cuda_flex_window_logic_matches_blocked(causal, prefix, T, block):
    """The fused CUDA path's banded block mask, mask_mod and score_mod, run by flex_attention's eager forward on CPU;
    small blocks make the band span several key blocks per query block, as 128-token blocks do at long lengths."""
    B, H, d, w = 2, 2, 8, 4 if block == 128 else 11
    q, k, v = torch.randn(B, H, T, d), torch.randn(B, H, prefix + T, d), torch.randn(B, H, prefix + T, d)
    bias = torch.randn(H, 2 * w - 1)
    key_mask = None if prefix else torch.rand(B, T) > 0.2  # streaming (a prefix) has no padding
    out = flex_window_attention(q, k, v, w, causal=causal, bias=bias, key_mask=key_mask, compiled=False, block=block)
    ref = window_attention(q, k[:, :, prefix:], v[:, :, prefix:], w, causal=causal, bias=bias, key_mask=key_mask,
                           prefix=(k[:, :, :prefix], v[:, :, :prefix]) if prefix else None)
    real = torch.ones(B, 1, T, 1) if key_mask is None else key_mask[:, None, :, None]  # rows with a real key
    torch.testing.assert_close(out * real, ref * real, rtol=1e-5, atol=1e-5)


def test_flex_band_block_mask_lists_exactly_the_touched_key_blocks():
    """Every key block holding a key of some query's window is listed for that query block, and no other."""
    from lavo_zoo.attention.ops.window.flex import band_block_mask
    for q_len, kv_len, w, causal, block in [(100, 100, 11, True, 16), (90, 95, 11, True, 16), (100, 100, 11, False, 8),
                                            (300, 300, 16, True, 128), (64, 64, 40, False, 16)]:
        mask = band_block_mask(q_len, kv_len, w, causal=causal, mask_mod=None, device=torch.device("cpu"), block=block)
        counts, indices = mask.kv_num_blocks[0, 0], mask.kv_indices[0, 0]
        P = kv_len - q_len
        for qb in range(-(-q_len // block)):
            want = set()
            for qi in range(qb * block, min((qb + 1) * block, q_len)):
                t = qi + P
                keys = range(max(0, t - w + 1), (t + 1) if causal else min(kv_len, t + w))
                want |= {s // block for s in keys}
            assert set(indices[qb, :counts[qb]].tolist()) == want, (q_len, kv_len, w, causal, block, qb)
