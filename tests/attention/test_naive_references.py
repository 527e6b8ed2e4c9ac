"""Every registered mechanism against its slow reference ``naive``, for each pattern it declares (timm style:
registering a mechanism that has a ``naive`` tests it for free; a built-in mechanism without one fails here).

``naive(attn, x, padding_mask, ...)`` is the function ``naive`` in the module that defines the mechanism's class, or
in the ``naive`` module of that module's package (LAVO: lavo/naive.py). float64, fresh random inputs, unpadded and
padded (real rows only): the outputs, and the gradients of the real rows w.r.t. the inputs and every parameter
(except for the mechanisms in OUTPUT_ONLY, which say why).
Built-in mechanisms also run with small non-default options (mechanism_testing.SMALL), so that every chunk / window /
segment / landmark boundary is crossed at T = 37, plus method-specific facts in test_<mechanism>.py.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable

import pytest
import torch

from lavo_zoo.attention import ATTENTIONS, attention_class
from lavo_zoo.testing import randomise_zero_parameters
from tests.attention.mechanism_testing import D, assert_matches_reference, build, gen, randn, small_options

# options every variant needs for the fast form to be the reference's formula exactly
EXACT = {"nystromformer": {"pinv_iterations": 0}}  # the reference uses the exact pseudo-inverse
# mechanisms whose gradients are compared by their own tests or not at all, and why
OUTPUT_ONLY = {"nystromformer": "the pseudo-inverse's backward scales rounding by the landmark matrix's condition "
                                "number (1e-4 relative at 37 landmarks): outputs agree to 1e-10, gradients do not"}


def naive_of(name: str) -> Callable | None:
    """The ``naive`` reference of attention ``name``: beside its class, or in its package's ``naive`` module."""
    module = attention_class(name).__module__
    package = module.rpartition(".")[0]
    for candidate in [module] + ([f"{package}.naive"] if package else []):
        try:
            mod = importlib.import_module(candidate)
        except ModuleNotFoundError as e:
            if e.name != candidate:
                raise
            continue
        if callable(getattr(mod, "naive", None)):
            return mod.naive
    return None


def _cases() -> list:
    cases = []
    for name in ATTENTIONS.names():
        for pattern in attention_class(name).patterns:
            small = small_options(name, pattern)
            for label, opts in ([("small", small)] if small else []) + [("default", {})]:
                cases.append(pytest.param(name, pattern, {**opts, **EXACT.get(name, {})},
                                          id=f"{name}-{pattern}-{label}"))
    return cases


@pytest.mark.parametrize("name, pattern, opts", _cases())
def test_matches_naive(name: str, pattern: str, opts: dict, request) -> None:
    naive = naive_of(name)
    if naive is None:
        module = attention_class(name).__module__
        if module.startswith("lavo_zoo.attention."):
            pytest.fail(f"built-in attention '{name}' has no slow reference: add `naive` to {module} "
                        "(see lavo_zoo.attention's docstring)")
        pytest.skip(f"attention '{name}' ({module}) has no `naive` reference")
    g = gen(request)
    attn = randomise_zero_parameters(build(name, pattern, **opts))  # so that misuse of a zero-initialised one shows
    B, T, S = 2, 37, 19
    x = randn(g, B, T, D).requires_grad_(True)
    pm = torch.arange(T)[None] < torch.tensor([[T], [26]])  # [B, T]
    ctx = context_mask = None
    if pattern == "cross":
        ctx = randn(g, B, S, D).requires_grad_(True)
        context_mask = torch.arange(S)[None] < torch.tensor([[11], [S]])
    assert_matches_reference(attn, naive, x, context=ctx, grads=False)
    weights = randn(g, int(pm.sum()), D) if name not in OUTPUT_ONLY else None  # of the real rows
    assert_matches_reference(attn, naive, x, pm, context=ctx, context_mask=context_mask, rows=pm, weights=weights,
                             grads=name not in OUTPUT_ONLY)
