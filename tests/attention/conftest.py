"""Helpers shared by the LAVO / softmax attention tests: fast path vs reference, streaming in chunks."""
from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from lavo_zoo.attention import Attention, build_attention

F64 = torch.float64


def make(name: str, pattern: str, **options) -> Attention:
    """A float64 module with every zero-initialised parameter (EPE, relative bias) randomised, so that a wrong
    index or sign in it shows."""
    attn = build_attention(name, embed_dim=16, num_heads=2, pattern=pattern, **options).to(F64)
    with torch.no_grad():
        for p in attn.parameters():
            if not p.any():
                p.normal_()
    return attn


def compare(attn: Attention, reference: Callable, T: int, padded: bool) -> None:
    """Outputs and the gradients w.r.t. the inputs and every parameter agree with ``reference`` (float64)."""
    B = 2
    x = torch.randn(B, T, attn.embed_dim, dtype=F64, requires_grad=True)
    kw: dict = {}
    mask = None
    if padded:
        mask = torch.rand(B, T) > 0.3
        mask[:, 0] = True
    inputs = [x]
    if attn.pattern == "cross":
        ctx = torch.randn(B, 7, attn.embed_dim, dtype=F64, requires_grad=True)
        kw = {"context": ctx, "context_mask": (torch.rand(B, 7) > 0.3) | (torch.arange(7) == 3) if padded else None}
        inputs.append(ctx)
    params = [p for p in attn.parameters()]
    y, y_ref = attn(x, mask, **kw), reference(attn, x, mask, **kw)
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-10)
    g = torch.randn_like(y)
    # unused inputs get zero gradients: e.g. the bases when T < w (every query is in window 0, the memory is empty)
    grads = torch.autograd.grad((y * g).sum(), inputs + params, materialize_grads=True)
    grads_ref = torch.autograd.grad((y_ref * g).sum(), inputs + params, materialize_grads=True)
    names = ["x", "context"][:len(inputs)] + [n for n, _ in attn.named_parameters()]
    for name, a, b in zip(names, grads, grads_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10, msg=lambda m, name=name: f"grad of {name}: {m}")


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
