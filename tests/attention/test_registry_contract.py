"""The attention contract (docs/architecture.md), checked for EVERY registered mechanism and each pattern it
declares, through the public kit :mod:`lavo_zoo.testing` that plugins run too (so the kit cannot rot).

A new mechanism is tested here for free by registering it. Random inputs are drawn from a seed derived from the
mechanism's name.
"""
from __future__ import annotations

import zlib

import pytest

from lavo_zoo.attention import ATTENTIONS, attention_info
from lavo_zoo.testing import attention_checks

CHECKS = [check for name in ATTENTIONS.names() for check in attention_checks(name, seed=zlib.crc32(name.encode()))]


@pytest.mark.parametrize("check", CHECKS, ids=repr)
def test_contract(check) -> None:
    check()


def test_registry_is_not_empty() -> None:
    assert {"lavo", "sdpa", "local"} <= set(ATTENTIONS.names())


PATTERN_CASES = [(name, pattern) for name in ATTENTIONS.names() for pattern in attention_info(name).patterns]


@pytest.mark.parametrize("name, pattern", PATTERN_CASES)
def test_runs_under_bf16_autocast(name: str, pattern: str) -> None:
    """Training's mixed precision (fp32 weights, the forward under bf16 autocast; CPU autocast applies CUDA's policy):
    the output and every gradient are finite and the output is the fp32 one up to bf16 rounding, with padding."""
    import torch

    from lavo_zoo.attention import build_attention

    torch.manual_seed(zlib.crc32(name.encode()))
    attn = build_attention(name, 32, 4, pattern).eval()  # eval: no dropout, fixed samples, the same function twice
    x = torch.randn(2, 37, 32, requires_grad=True)
    mask = torch.ones(2, 37, dtype=torch.bool)
    mask[1, 30:] = False
    kw = {"context": torch.randn(2, 23, 32), "context_mask": torch.arange(23)[None].expand(2, 23) < 20} \
        if pattern == "cross" else {}
    want = attn(x, mask, **kw)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = attn(x, mask, **kw)
    (got.float() * mask[..., None]).square().sum().backward()
    grads = [g for g in (x.grad, *(p.grad for p in attn.parameters())) if g is not None]  # 'mean' cross: no x
    assert torch.isfinite(got).all() and all(torch.isfinite(g).all() for g in grads)
    rows = mask[..., None]
    err = ((got.float() - want) * rows).norm() / (want * rows).norm()
    assert err < 5e-2, f"{name} {pattern}: bf16 autocast output off by {err:.2e} (relative)"


# the tests' sequence length (mechanism_testing.py, test_naive_references.py): a built-in mechanism's test options
# must cut it into several chunks or windows
TEST_LENGTH = 37


def test_no_registered_mechanism_escapes_the_tests() -> None:
    """Every registered mechanism is in every list the attention tests derive from the registry, for each pattern it
    declares: the contract kit (the checks that apply to the pattern), bf16 autocast, the naive reference (with its
    test options too, where it declares them), step decoding at both decoder sites, the recurrent mechanisms' own
    tests for those on the recurrent base. A built-in one with a chunk or window size declares test options that cut
    the tests' sequences into several. A list written by hand, or a mechanism that declares nothing, fails here."""
    from lavo_zoo.attention import attention_class
    from lavo_zoo.attention.recurrent import RecurrentAttention
    from lavo_zoo.attention.registry import option_defaults
    from tests.attention import test_decoding, test_naive_references, test_recurrent
    from tests.nn import test_encoder_decoder

    labels = {repr(check) for check in CHECKS}
    naive_ids = {case.id for case in test_naive_references._cases()}
    sites = set(test_encoder_decoder.SITES)
    for name in ATTENTIONS.names():
        cls = attention_class(name)
        assert cls.patterns, f"{name} declares no pattern: no contract check would run"
        for pattern in cls.patterns:
            want = {f"{check}[{name}-{pattern}]" for check in ("output_shapes", "reproducible", "finite_gradients",
                                                               "padded_row_alone")}
            if pattern == "causal":
                want |= {f"causality[{name}]", f"decoding_step[{name}]"}
                want |= {f"streaming_matches_full[{name}]"} if cls.streaming else set()
            if pattern == "cross":
                want.add(f"cross_cache[{name}]")
            assert want <= labels, f"{name} {pattern}: the contract kit misses {sorted(want - labels)}"
            assert (name, pattern) in PATTERN_CASES, f"{name} {pattern} escapes the bf16 autocast test"
            variants = ["default"] + (["small"] if cls.test_options_for(pattern) else [])
            missing = [v for v in variants if f"{name}-{pattern}-{v}" not in naive_ids]
            assert not missing, f"{name} {pattern} escapes the naive reference test ({missing})"
        if "causal" in cls.patterns:
            assert name in test_decoding.CAUSAL and (name, "sdpa") in sites | {("sdpa", "sdpa")}
            assert cls.state_grows or not cls.streaming or name in test_decoding.BOUNDED
        if "cross" in cls.patterns:
            assert name in test_decoding.CROSS and ("sdpa", name) in sites | {("sdpa", "sdpa")}
        if issubclass(cls, RecurrentAttention):
            assert name in test_recurrent.NAMES, f"{name} escapes the recurrent mechanisms' tests"
        if cls.__module__.startswith("lavo_zoo.attention."):
            options = option_defaults(cls)
            for size in ("chunk_size", "window_size"):
                if size in options:
                    assert cls.test_options.get(size, options[size]) < TEST_LENGTH, (
                        f"{name}: set `test_options` on its class with a {size} below {TEST_LENGTH}, so that the "
                        "tests cross its boundaries")
