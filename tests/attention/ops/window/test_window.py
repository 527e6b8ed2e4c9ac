"""The sliding-window op's own calls (ops/window/__init__.py): a decoding step's window equals the op's last query."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.ops.window import window_attention, window_attention_step
from tests.attention.ops.window.helpers import _leaves


@pytest.mark.parametrize("P", [0, 2, 4])  # no past keys, fewer than w - 1, w - 1
def test_window_step_equals_the_last_query_of_the_window(P):
    """One query after P stored keys (a decoding step): the output of window_attention for that query, with the
    relative bias, and its gradients."""
    B, H, d, w = 2, 2, 3, 5
    q, k, v = _leaves((B, H, 1, d), (B, H, 1, d), (B, H, 1, d), device="cpu")
    pk, pv, bias = _leaves((B, H, P, d), (B, H, P, d), (H, 2 * w - 1), device="cpu")
    step = window_attention_step(q, k, v, w, prefix=(pk, pv), bias=bias)
    full = window_attention(q, k, v, w, causal=True, bias=bias, prefix=(pk, pv) if P else None)
    torch.testing.assert_close(step, full, rtol=1e-12, atol=1e-12)
    leaves = (q, k, v, pk, pv, bias) if P else (q, k, v, bias)
    for a, b in zip(torch.autograd.grad(step.sum(), leaves), torch.autograd.grad(full.sum(), leaves)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
