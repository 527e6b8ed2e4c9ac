"""Performer / FAVOR+ (performer.py) beyond its naive reference (test_naive_references.py): the causal form
accumulates, the random features are orthogonal blocks, FAVOR+ approaches softmax attention, the paper's default."""
from __future__ import annotations

import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.ops.naive import softmax_attention
from lavo_zoo.attention.performer import orthogonal_gaussian
from tests.attention.mechanism_testing import D, H, assert_causal_is_cumulative, build, gen, randn


def test_causal_is_cumulative_not_the_cab_defect(request) -> None:
    assert_causal_is_cumulative("performer", request)


def test_performer_features_are_orthogonal_blocks() -> None:
    torch.manual_seed(0)
    w = orthogonal_gaussian(20, 8, torch.float64)  # blocks of 8, 8, 4 rows
    for a in range(0, 20, 8):
        blk = w[a:a + 8]
        gram = blk @ blk.T
        torch.testing.assert_close(gram - torch.diag(torch.diagonal(gram)), torch.zeros_like(gram), atol=1e-10,
                                   rtol=0)


def test_performer_approaches_softmax_attention(request) -> None:
    """FAVOR+ is an estimator of softmax attention: with many features it is close to the exact output."""
    g = gen(request)
    attn = build("performer", "noncausal", num_features=4096)
    x = 0.5 * randn(g, 1, 16, D)
    heads = lambda t: t.view(1, 16, H, D // H).transpose(1, 2)
    q, k, v = heads(attn.q_proj(x)), heads(attn.k_proj(x)), heads(attn.v_proj(x))
    exact = attn.out_proj(softmax_attention(q, k, v).transpose(1, 2).reshape(1, 16, D))
    err = (attn(x) - exact).norm() / (exact - attn.out_proj.bias).norm()
    assert err < 0.1, f"relative error {err:.3f}"


def test_paper_defaults() -> None:
    """Defaults follow the paper's table: 64 features."""
    assert build_attention("performer", D, H, "causal").num_features == 64
