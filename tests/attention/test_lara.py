"""LARA (lara.py) beyond its naive reference (test_naive_references.py): random in training, fixed in eval, the
paper's default."""
from __future__ import annotations

import torch

from lavo_zoo.attention import build_attention
from tests.attention.mechanism_testing import D, H, build, gen, randn


def test_lara_is_random_in_training_and_fixed_in_eval(request) -> None:
    g = gen(request)
    attn = build("lara", "noncausal", num_landmarks=6)
    x = randn(g, 2, 20, D)
    torch.testing.assert_close(attn(x), attn(x), atol=0, rtol=0)
    attn.train()
    assert not torch.allclose(attn(x), attn(x))


def test_paper_defaults() -> None:
    """Defaults follow the paper's table: 64 landmarks."""
    assert build_attention("lara", D, H, "noncausal").num_landmarks == 64
