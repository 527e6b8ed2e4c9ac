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
