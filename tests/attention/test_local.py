"""``local`` (local.py): fast path == its naive dense reference (outputs and gradients), streaming == full, a
constant-size ring of w - 1 keys, padding, the window is exact, errors."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.local import naive
from lavo_zoo.errors import UsageError
from lavo_zoo.testing import check_padded_row_alone

F64 = torch.float64


@pytest.mark.parametrize("T", [3, 8, 11])  # T < w, a multiple of w, not a multiple
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("pattern, relative_bias", [("causal", True), ("causal", False), ("noncausal", True)])
def test_local_equals_reference(helpers, pattern, relative_bias, padded, T):
    helpers.compare(helpers.make("local", pattern, window_size=4, relative_bias=relative_bias), naive, T, padded)


def test_streaming_equals_full(helpers):
    attn = helpers.make("local", "causal", window_size=4, relative_bias=True)
    x = torch.randn(2, 19, 16, dtype=F64)
    y = attn(x)
    torch.testing.assert_close(helpers.stream(attn, x, [2, 1, 6, 3, 7]), y)
    torch.testing.assert_close(helpers.stream(attn, x, [1] * 19), y)


def test_state_size():
    local = build_attention("local", 16, 2, "causal", window_size=4)
    _, ring = local(torch.randn(1, 30, 16), return_state=True)
    assert ring.keys.shape == (1, 2, 3, 8)                      # w - 1 keys, whatever the length
    assert ring.keys.untyped_storage().nbytes() == 3 * 16 * 4   # not a view that keeps the whole chunk alive


def test_noncausal_padding_invariance(helpers):
    attn = helpers.make("local", "noncausal", window_size=4)
    x = torch.randn(1, 9, 16, dtype=F64)
    padded = torch.cat([x, 100 * torch.randn(1, 4, 16, dtype=F64)], 1)
    torch.testing.assert_close(attn(padded, torch.arange(13)[None] < 9)[:, :9], attn(x))


def test_local_window_is_exact():
    """A key w positions back has no influence; one w-1 back does."""
    attn = build_attention("local", 16, 2, "causal", window_size=4).to(F64)
    x = torch.randn(1, 10, 16, dtype=F64)
    x2 = x.clone()
    x2[:, 2] += 1.0
    d = (attn(x2) - attn(x)).abs().amax(-1)[0]
    assert (d[[0, 1, 6, 7, 8, 9]] == 0).all() and (d[2:6] > 0).all()


def test_errors():
    with pytest.raises(UsageError, match="does not support pattern 'cross'"):
        build_attention("local", 16, 2, "cross")


# ------------------------------------------------------------------------------------ attention sinks (num_sinks)
@pytest.mark.parametrize("T", [3, 11, 70])  # fewer tokens than sinks + window, several windows, several blocks
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("pattern, relative_bias", [("causal", True), ("causal", False), ("noncausal", True)])
def test_sinks_equal_reference(helpers, pattern, relative_bias, padded, T):
    """Window + sinks against the dense mask (sinks counted once where the window holds them), outputs and
    gradients, inner and right padding (each row's real tokens alone)."""
    attn = helpers.make("local", pattern, window_size=4, relative_bias=relative_bias, num_sinks=3)
    helpers.compare(attn, naive, T, padded)


def test_sinks_are_seen_from_afar_and_are_exact():
    """With sinks, token 0 changes the output 40 tokens later (it does not without); token 5 (neither sink nor in
    the window) does not."""
    x = torch.randn(1, 45, 16, dtype=F64)
    for sinks, expect in ((0, False), (2, True)):
        torch.manual_seed(0)
        attn = build_attention("local", 16, 2, "causal", window_size=4, num_sinks=sinks).to(F64)
        for pos, moves in ((0, expect), (5, False)):
            x2 = x.clone()
            x2[:, pos] += 1.0
            assert bool((attn(x2) - attn(x))[0, 44].abs().max() > 1e-9) == moves, (sinks, pos)


@pytest.mark.parametrize("chunks", [[2, 1, 6, 3, 7], [1] * 19, [19]])
def test_sinks_stream_in_constant_state(helpers, chunks):
    attn = helpers.make("local", "causal", window_size=4, relative_bias=True, num_sinks=3)
    x = torch.randn(2, 19, 16, dtype=F64)
    torch.testing.assert_close(helpers.stream(attn, x, chunks), attn(x))
    _, state = attn(x, return_state=True)
    assert state.sink_keys.shape[2] == 3 and state.keys.shape[2] == 3 and state.position == 19


@pytest.mark.parametrize("pad_left", [True, False])
def test_sinks_padded_row_equals_row_alone(pad_left):
    """Left or right padding: the sinks are the row's first real tokens, the output its real tokens' alone."""
    torch.manual_seed(0)
    attn = build_attention("local", 16, 2, "causal", window_size=4, num_sinks=2).to(F64)
    x = torch.randn(1, 12, 16, dtype=F64)
    pad = 100 * torch.randn(1, 5, 16, dtype=F64)
    padded = torch.cat([pad, x] if pad_left else [x, pad], 1)
    mask = (torch.arange(17) >= 5) if pad_left else (torch.arange(17) < 12)
    torch.testing.assert_close(attn(padded, mask[None])[0, mask], attn(x)[0])
    with pytest.raises(ValueError):
        build_attention("local", 16, 2, "causal", num_sinks=-1)


@pytest.mark.parametrize("pattern", ["causal", "noncausal"])
def test_sinks_pass_the_kits_padded_row_check(pattern):
    """The contract kit's padded-row check (3 and 17 positions in front or behind) with sinks and a relative bias:
    the sinks are the row's first real tokens."""
    check_padded_row_alone("local", pattern, options={"window_size": 4, "num_sinks": 3, "relative_bias": True})


@pytest.mark.parametrize("sinks", [0, 2])
def test_a_cache_of_another_window_or_sinks_is_refused(sinks):
    """A cache filled by a layer of another window (or number of sinks) is refused, naming both: window 3's cache
    continued a window-5 layer to outputs 0.2 away from the full call's, with exit 0."""
    torch.manual_seed(0)
    x = torch.randn(1, 9, 16)
    layer = build_attention("local", 16, 2, "causal", window_size=5, num_sinks=sinks)
    for other in (build_attention("local", 16, 2, "causal", window_size=3, num_sinks=sinks),
                  build_attention("local", 16, 2, "causal", window_size=5, num_sinks=sinks + 1)):
        _, state = other(x[:, :6], return_state=True)
        with pytest.raises((ValueError, TypeError), match="another configuration|SinkCache|KVCache"):
            layer(x[:, 6:], state=state)
    _, state = layer(x[:, :6], return_state=True)
    assert layer(x[:, 6:], state=state).shape == (1, 3, 16)
