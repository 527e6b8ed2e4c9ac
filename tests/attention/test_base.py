"""The attention contract's helpers (base.py) beyond what the contract kit checks of every mechanism: a state's bytes
measured from the state object (``tensor_bytes``, which the recall study plots memory against), and what the
Python API refuses with its documented errors (ValueError, TypeError, OptionError), never a raw torch error."""
import pytest
import torch

from lavo_zoo.attention import build_attention, list_attentions, tensor_bytes
from lavo_zoo.errors import OptionError


def test_tensor_bytes_walks_nested_containers():
    t = torch.zeros(3, 4, dtype=torch.float16)
    assert tensor_bytes({"a": [t, (t, 7)], "b": None}) == 2 * t.numel() * 2  # the same tensor twice; the int counts 0
    assert tensor_bytes(torch.zeros(2, dtype=torch.complex64)) == 16


# ------------------------------------------------------------------------------- what the Python API refuses
MECHANISMS = [info.name for info in list_attentions()]


def _pattern(name: str) -> str:
    return next(p for p in ("causal", "noncausal", "cross") if p in next(i for i in list_attentions()
                                                                            if i.name == name).patterns)


@pytest.mark.parametrize("name", MECHANISMS)
def test_an_input_of_another_dtype_than_the_layer_is_a_value_error(name) -> None:
    """A float16, bfloat16 or float64 input into a float32 layer (no autocast) gave a raw torch RuntimeError."""
    pattern = _pattern(name)
    attn = build_attention(name, 32, 4, pattern)
    context = {"context": torch.randn(2, 5, 32)} if pattern == "cross" else {}
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        with pytest.raises(ValueError, match=rf"x is {dtype} and this layer's weights are torch.float32: give x in "):
            attn(torch.randn(2, 5, 32, dtype=dtype), **context)
    with pytest.raises(ValueError, match="x must be a floating-point tensor, got torch.int64"):
        attn(torch.ones(2, 5, 32, dtype=torch.long), **context)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts for the layer's products: allowed
        assert attn(torch.randn(2, 5, 32, dtype=torch.bfloat16), **context).shape == (2, 5, 32)


@pytest.mark.parametrize("value", [32.0, True, "32"])
def test_a_width_or_head_count_that_is_not_an_int_is_refused(value) -> None:
    with pytest.raises(OptionError, match="embed_dim must be a whole number"):
        build_attention("sdpa", value, 4, "causal")
    with pytest.raises(OptionError, match="num_heads must be a whole number"):
        build_attention("gla", 32, 4.0, "causal")


@pytest.mark.parametrize("name", [n for n in MECHANISMS if "cross" in next(
    i for i in list_attentions() if i.name == n).patterns])
def test_another_mechanisms_cross_cache_is_refused(name) -> None:
    """Another mechanism's (or configuration's) cross cache given to step() gave raw torch errors or an
    AttributeError."""
    src, x = torch.randn(2, 5, 32), torch.randn(2, 1, 32)
    attn = build_attention(name, 32, 4, "cross")
    for other in ("sdpa", "gla", "lavo"):  # caches of three kinds, gla's state of a size no other has here
        if other != name:
            with pytest.raises((TypeError, ValueError), match="cache|state"):
                attn.step(x, build_attention(other, 32, 4, "cross").cross_cache(src))
    # its own kind from another configuration: refused where the cache is prepared for the layer (a source kept as it
    # is decodes with any heads, and so does the mean control's cache)
    if attn.decoding("cross") == "cache" and name != "mean":
        with pytest.raises((TypeError, ValueError), match="cache|state"):
            attn.step(x, build_attention(name, 32, 8, "cross").cross_cache(src))


@pytest.mark.parametrize("name, option", [("mamba2", "state_size"), ("gated_deltanet", "expand_v"),
                                          ("based", "feature_dim")])
def test_an_option_too_large_for_the_machine_is_refused_before_any_allocation(name, option, monkeypatch) -> None:
    """An oversized option gave the allocator's raw error (or none at build, and one at the first call)."""
    from lavo_zoo.attention import registry

    monkeypatch.setattr(registry, "available_memory", lambda device: 10_000_000)  # 10 MB free
    value = {"state_size": 10**6, "expand_v": 1024.0, "feature_dim": 400}[option]
    with pytest.raises(OptionError, match=rf"attention '{name}' \(embed_dim 32, 4 heads, {option}={value!r}\) needs "
                                          r"about .* for its parameters \(and one sequence's state\), but this machine "
                                          r"has 10 MB free"):
        build_attention(name, 32, 4, "causal", **{option: value})
    assert build_attention(name, 32, 4, "causal") is not None  # its defaults fit
