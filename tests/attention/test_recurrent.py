"""The recurrent mechanisms (every registered one on recurrent.py's base) beyond the registry-wide contract and
naive tests: a padded row gives what the row alone gives (left, right and inner padding,
every pattern), the state is constant in size and measured from its object, the cross cache keeps no source token,
and each mechanism's defaults are its reference layer's."""
from __future__ import annotations

import math

import pytest
import torch

from lavo_zoo.attention import attention_class, attention_info, build_attention, tensor_bytes
from lavo_zoo.attention.based import taylor_features
from lavo_zoo.attention.recurrent import SourceMemory
from lavo_zoo.attention.registry import option_defaults
from tests.attention.mechanism_testing import ATOL, RTOL, D, H, build, gen, randn, recurrent_names, small_options

NAMES = recurrent_names()


@pytest.mark.parametrize("pattern", ["causal", "noncausal", "cross"])
@pytest.mark.parametrize("name", NAMES)
def test_padded_row_equals_row_alone(name: str, pattern: str, request) -> None:
    """Rows padded on the left, on the right and inside give, at their real tokens, the output of the real tokens
    alone (the short convolutions included)."""
    g = gen(request)
    attn = build(name, pattern, **small_options(name, pattern))
    real = randn(g, 1, 9, D)
    masks = [torch.tensor([False] * 4 + [True] * 9), torch.tensor([True] * 9 + [False] * 4),
             torch.tensor([True, False, True, True, False, False, True, True, True, True, False, True, True])]
    ctx_alone = randn(g, 1, 6, D) if pattern == "cross" else None
    alone = attn(real, context=ctx_alone) if pattern == "cross" else attn(real)
    for mask in masks:
        x = randn(g, 1, 13, D) * 50
        x[0, mask] = real[0]
        kw = {}
        if pattern == "cross":
            cmask = torch.tensor([False, True, True, False, True, True, True, True])
            ctx = randn(g, 1, 8, D) * 50
            ctx[0, cmask] = ctx_alone[0]
            kw = {"context": ctx, "context_mask": cmask[None]}
        y = attn(x, mask[None], **kw)
        torch.testing.assert_close(y[0, mask], alone[0], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", NAMES)
def test_state_is_constant_and_measured(name: str, request) -> None:
    """The causal state has the same tensors after 3 and after 53 tokens; tensor_bytes counts exactly them."""
    g = gen(request)
    attn = build(name, "causal", **small_options(name, "causal"))
    _, s1 = attn(randn(g, 2, 3, D), return_state=True)
    _, s2 = attn(randn(g, 2, 50, D), state=s1, return_state=True)
    shapes = [s1.memory.shape, *(c.shape for c in s1.conv)]
    assert shapes == [s2.memory.shape, *(c.shape for c in s2.conv)]
    assert tensor_bytes(s2) == sum(math.prod(s) for s in shapes) * 8  # float64
    with pytest.raises(TypeError, match="RecurrentState"):
        attn(randn(g, 2, 3, D), state=object(), return_state=True)


@pytest.mark.parametrize("name", NAMES)
def test_cross_cache_is_one_state(name: str, request) -> None:
    """The cross cache of a source of 5 or 80 tokens is one state of the same size: no source token is kept."""
    g = gen(request)
    attn = build(name, "cross", **small_options(name, "cross"))
    small, large = attn.cross_cache(randn(g, 2, 5, D)), attn.cross_cache(randn(g, 2, 80, D))
    assert isinstance(large, SourceMemory) and large.memory.shape == small.memory.shape
    assert large.memory.shape[:2] == (2, H)


def test_taylor_features_give_the_second_order_expansion(request) -> None:
    g = gen(request)
    x, y = randn(g, 7, 16), randn(g, 7, 16)
    fx, fy = taylor_features(x), taylor_features(y)
    dot = (x * y).sum(-1)
    assert fx.shape[-1] == 1 + 16 + 16 * 17 // 2
    torch.testing.assert_close((fx * fy).sum(-1), 1 + dot / 4 + dot ** 2 / 32, atol=ATOL, rtol=RTOL)


def test_defaults_are_the_reference_layers() -> None:
    """flash-linear-attention's layer defaults: Based f = 16 without convolution; GLA keys at half width, gate rank
    16 normalised by 16, no convolution; Mamba-2 expand 2, state 128, 4-tap convolution; DeltaNet and Gated DeltaNet
    4-tap convolutions, Gated DeltaNet values twice as wide."""
    based = build_attention("based", 64, 2)
    assert based.feature_dim == 16 and based.k_conv.kernel_size == 0
    gla = build_attention("gla", 64, 2)
    assert gla.key_dim == 32 and gla.gk_proj[0].out_features == 16 and gla.gate_logit_normalizer == 16
    assert gla.k_conv.kernel_size == 0
    mamba = build_attention("mamba2", 64, 2)
    assert (mamba.expand, mamba.state_size, mamba.conv.kernel_size) == (2, 128, 4)
    delta, gated = build_attention("deltanet", 64, 2), build_attention("gated_deltanet", 64, 2)
    assert delta.k_conv.kernel_size == gated.k_conv.kernel_size == 4
    assert delta.value_dim == 64 and gated.value_dim == 128
    for name in NAMES:
        info = attention_info(name)
        assert info.patterns == ("causal", "noncausal", "cross") and info.streaming


def test_option_values_are_checked() -> None:
    from lavo_zoo.errors import OptionError

    for name, opts in [("based", {"feature_dim": 0}), ("gla", {"expand_k": 0.01}), ("mamba2", {"state_size": 0}),
                       ("deltanet", {"conv_size": -1}), ("gated_deltanet", {"expand_v": 0.01})]:
        with pytest.raises(OptionError):
            build_attention(name, 64, 2, **opts)


@pytest.mark.parametrize("name", NAMES)
def test_eps_and_widths_that_break_the_output_are_refused(name: str) -> None:
    """An epsilon that is not a finite number > 0 (a negative one gave NaN outputs with exit 0), and a width
    expand * D that is not whole (it was truncated: expand_v 0.3 at D 16 gave 4 channels) are refused, naming the
    option."""
    from lavo_zoo.errors import OptionError

    options = option_defaults(attention_class(name))
    eps = next(o for o in ("eps", "norm_eps") if o in options)
    for value in (-1.0, 0.0, math.inf):
        with pytest.raises(OptionError, match=eps):
            build_attention(name, 16, 2, **{eps: value})
    build_attention(name, 16, 2, **{eps: 1e-3})
    for expand in (o for o in options if o.startswith("expand_")):  # widths as multiples of D
        with pytest.raises(OptionError, match=rf"{expand} 0.3 \* 16 = 4.8"):
            build_attention(name, 16, 2, **{expand: 0.3})
        assert build_attention(name, 16, 2, **{expand: 0.25}) is not None  # 4 channels, 2 per head


@pytest.mark.parametrize("name", NAMES)
def test_a_state_from_another_configuration_is_refused(name: str, request) -> None:
    """A state returned by a layer of another configuration (short convolution of other taps, none, another width,
    another mechanism) is refused with a message naming the mismatch, before any op runs on it: Based and DeltaNet
    took a 4-tap convolution's cache into a 2-tap layer and returned 2 outputs too many for a 5-token chunk."""
    g = gen(request)
    x = randn(g, 2, 5, 16)
    layer = build_attention(name, 16, 2, conv_size=2).double()
    others = [build_attention(name, 16, 2, conv_size=4).double(), build_attention(name, 16, 2, conv_size=0).double(),
              build_attention(next(n for n in NAMES if n != name), 16, 2, conv_size=2).double()]  # another one
    for other in others:
        _, state = other(x, return_state=True)
        with pytest.raises(ValueError, match="another configuration"):
            layer(x, state=state)
    _, state = build_attention(name, 32, 2, conv_size=2).double()(randn(g, 2, 5, 32), return_state=True)
    with pytest.raises(ValueError, match="another configuration"):
        layer(x, state=state)
    _, state = layer(x, return_state=True)  # its own state still continues it
    assert layer(x, state=state).shape == x.shape


@pytest.mark.parametrize("name", NAMES)
def test_empty_chunks_and_inputs(name: str, request) -> None:
    """T = 0: an empty input gives an empty output, and an empty chunk in a stream leaves the state as it was (the
    short convolution raised a raw RuntimeError on both). B = 0 (an empty batch) gives an empty output too (GLA's
    per-channel gate took a max over no elements)."""
    g = gen(request)
    attn = build(name, "causal", **small_options(name, "causal")).double()
    x = randn(g, 2, 6, D).double()
    for pattern in ("causal", "noncausal"):
        assert build(name, pattern, **small_options(name, pattern)).double()(randn(g, 2, 0, D)).shape == (2, 0, D)
        for form in ("bidirectional", "final_state") if pattern == "noncausal" else (None,):
            opts = dict(small_options(name, pattern), **({"noncausal_form": form} if form else {}))
            assert build(name, pattern, **opts).double()(randn(g, 0, 5, D)).shape == (0, 5, D)
    y1, state = attn(x[:, :3], return_state=True)
    empty, state = attn(x[:, :0], state=state, return_state=True)
    assert empty.shape == (2, 0, D)
    y2 = attn(x[:, 3:], state=state)
    torch.testing.assert_close(torch.cat([y1, y2], 1), attn(x), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("option, value", [("gate_logit_normalizer", -1.0), ("gate_logit_normalizer", 0.0),
                                           ("chunk_size", 0), ("gate_low_rank_dim", 0)])
def test_a_gla_option_out_of_range_is_named_with_its_value(option: str, value: float) -> None:
    """Found by the sweep: the refusal named three options at once and no value."""
    from lavo_zoo.errors import OptionError

    with pytest.raises(OptionError, match=rf"^attention 'gla': {option} must be a finite number > 0, got {value!r}$"):
        build_attention("gla", 16, 2, **{option: value})
