"""Nystromformer (nystromformer.py) beyond its naive reference (test_naive_references.py): with as many landmarks as
tokens it is softmax attention, the iterative pseudo-inverse converges, the paper's default."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.nystromformer import iterative_pinv
from lavo_zoo.attention.ops.naive import softmax_attention
from tests.attention.mechanism_testing import D, H, build, gen, randn


@pytest.mark.parametrize("pattern", ["noncausal", "cross"])
def test_nystromformer_with_all_landmarks_is_softmax_attention(pattern: str, request) -> None:
    g = gen(request)
    attn = build("nystromformer", pattern, num_landmarks=64, pinv_iterations=0)
    x = randn(g, 2, 13, D)
    ctx = randn(g, 2, 13, D) if pattern == "cross" else None
    src = x if ctx is None else ctx
    heads = lambda t: t.view(2, 13, H, D // H).transpose(1, 2)
    o = softmax_attention(heads(attn.q_proj(x)), heads(attn.k_proj(src)), heads(attn.v_proj(src)))
    expected = attn.out_proj(o.transpose(1, 2).reshape(2, 13, D))
    torch.testing.assert_close(attn(x, context=ctx) if ctx is not None else attn(x), expected,
                               atol=1e-8, rtol=1e-6)


def test_iterative_pinv_converges(request) -> None:
    g = gen(request)
    a = torch.softmax(randn(g, 3, 7, 5), -1)  # rectangular, as in cross attention
    torch.testing.assert_close(iterative_pinv(a, 30), torch.linalg.pinv(a), atol=1e-9, rtol=1e-7)
    assert iterative_pinv(a, 0).shape == (3, 5, 7)


def test_paper_defaults() -> None:
    """Defaults follow the paper's table: 64 landmarks."""
    assert build_attention("nystromformer", D, H, "noncausal").num_landmarks == 64
