"""Helpers shared by the LAVO / softmax attention tests: fast path vs reference, streaming in chunks."""
from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from lavo_zoo.attention import Attention, build_attention
from lavo_zoo.testing import randomise_zero_parameters
from tests.attention.mechanism_testing import assert_matches_reference

F64 = torch.float64


def make(name: str, pattern: str, **options) -> Attention:
    """A float64 module with every zero-initialised parameter (EPE, relative bias) randomised, so that a wrong
    index or sign in it shows."""
    return randomise_zero_parameters(build_attention(name, embed_dim=16, num_heads=2, pattern=pattern, **options)
                                     .to(F64))


def compare(attn: Attention, reference: Callable, T: int, padded: bool) -> None:
    """Outputs and the gradients w.r.t. the inputs and every parameter agree with ``reference`` (float64), on
    random inputs of length ``T`` (``padded``: random right and inner padding)."""
    B = 2
    x = torch.randn(B, T, attn.embed_dim, dtype=F64, requires_grad=True)
    mask = None
    if padded:
        mask = torch.rand(B, T) > 0.3
        mask[:, 0] = True
    ctx = ctx_mask = None
    if attn.pattern == "cross":
        ctx = torch.randn(B, 7, attn.embed_dim, dtype=F64, requires_grad=True)
        ctx_mask = (torch.rand(B, 7) > 0.3) | (torch.arange(7) == 3) if padded else None
    assert_matches_reference(attn, reference, x, mask, context=ctx, context_mask=ctx_mask, rtol=1e-9, atol=1e-10)


def stream(attn: Attention, x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Feed x [B, T, D] in chunks of the given sizes, carrying the state; returns the concatenated outputs."""
    assert sum(sizes) == x.shape[1]
    state, ys, start = None, [], 0
    for n in sizes:
        y, state = attn(x[:, start:start + n], state=state, return_state=True)
        ys.append(y)
        start += n
    return torch.cat(ys, 1)


@pytest.fixture
def helpers():
    """make(name, pattern, **options), compare(attn, reference, T, padded), stream(attn, x, sizes)."""
    return SimpleNamespace(make=make, compare=compare, stream=stream)
