"""cosFormer (cosformer.py) beyond its naive reference (test_naive_references.py): the causal horizon."""
from __future__ import annotations

import pytest

from tests.attention.mechanism_testing import D, build, gen, randn


def test_cosformer_causal_refuses_positions_past_its_horizon(request) -> None:
    g = gen(request)
    attn = build("cosformer", "causal", max_length=10)
    attn(randn(g, 1, 10, D))
    with pytest.raises(ValueError, match="max_length"):
        attn(randn(g, 1, 11, D))
    _, state = attn(randn(g, 1, 6, D), return_state=True)
    with pytest.raises(ValueError, match="max_length"):
        attn(randn(g, 1, 5, D), state=state)
