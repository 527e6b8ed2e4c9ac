"""Helpers for the attention tests: float64 modules of width 32 with 4 heads, random inputs seeded from the test's node
id, the small options that force several chunks / windows / segments / landmarks at T = 37 (each mechanism declares
them on its class, ``test_options``), the registry's recurrent mechanisms, and the one comparison of a mechanism with
its slow reference (:func:`assert_matches_reference`)."""
from __future__ import annotations

import zlib
from collections.abc import Callable

import pytest
import torch

from lavo_zoo.attention import ATTENTIONS, attention_class, build_attention
from lavo_zoo.attention.recurrent import RecurrentAttention

D, H = 32, 4
ATOL, RTOL = 1e-10, 1e-8

def small_options(name: str, pattern: str) -> dict:
    """The small non-default options the mechanism declares for its tests (its class's ``test_options`` for
    ``pattern``): with them every chunk / window / segment / landmark boundary is crossed at T = 37."""
    return attention_class(name).test_options_for(pattern)


def recurrent_names() -> list[str]:
    """The registered mechanisms on the recurrent base (one matrix state per head, ``recurrent.py``)."""
    return [n for n in ATTENTIONS.names() if issubclass(attention_class(n), RecurrentAttention)]


def gen(request: pytest.FixtureRequest) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def build(name: str, pattern: str, **opts) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_attention(name, D, H, pattern, **opts).double().eval()


def assert_causal_is_cumulative(name: str, request: pytest.FixtureRequest) -> None:
    """The paper's benchmark library ran causal ABC without accumulation and causal Performer as noncausal: the
    causal output must differ from the noncausal one and equal it at the last position (where all keys are seen)."""
    g = gen(request)
    causal = build(name, "causal", **small_options(name, "causal"))
    noncausal = build(name, "noncausal", **small_options(name, "noncausal"))
    noncausal.load_state_dict(causal.state_dict())
    x = randn(g, 2, 29, D)
    yc, yn = causal(x), noncausal(x)
    torch.testing.assert_close(yc[:, -1], yn[:, -1], atol=ATOL, rtol=RTOL)
    assert not torch.allclose(yc[:, :-1], yn[:, :-1], atol=1e-3)


def assert_matches_reference(attn: torch.nn.Module, reference: Callable, x: torch.Tensor,
                             padding_mask: torch.Tensor | None = None, *, context: torch.Tensor | None = None,
                             context_mask: torch.Tensor | None = None, rows: torch.Tensor | None = None,
                             weights: torch.Tensor | None = None, grads: bool = True, atol: float = ATOL,
                             rtol: float = RTOL) -> None:
    """``attn`` and its slow ``reference(attn, x, padding_mask, [context=, context_mask=])`` agree: the outputs (the
    ``rows`` a boolean mask selects, e.g. the real ones; all when None) and, with ``grads``, the gradients of
    ``(output * weights).sum()`` (``weights`` default: ``torch.randn_like`` of the output) w.r.t. ``x``, ``context``
    (both must require grad) and every parameter."""
    kw = {} if context is None else {"context": context, "context_mask": context_mask}
    y, y_ref = attn(x, padding_mask, **kw), reference(attn, x, padding_mask, **kw)
    if rows is not None:
        y, y_ref = y[rows], y_ref[rows]
    torch.testing.assert_close(y, y_ref, atol=atol, rtol=rtol)
    if not grads:
        return
    weights = torch.randn_like(y) if weights is None else weights
    inputs = [x] + ([context] if context is not None else [])
    names = ["x", "context"][:len(inputs)] + [n for n, _ in attn.named_parameters()]
    leaves = inputs + list(attn.parameters())
    # unused inputs get zero gradients: e.g. LAVO's bases when T < w (every query is in window 0, the memory is empty)
    grads_out = torch.autograd.grad((y * weights).sum(), leaves, materialize_grads=True)
    grads_ref = torch.autograd.grad((y_ref * weights).sum(), leaves, materialize_grads=True)
    for name, a, b in zip(names, grads_out, grads_ref):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol, msg=lambda m, name=name: f"grad of {name}: {m}")
