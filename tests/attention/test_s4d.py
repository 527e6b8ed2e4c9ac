"""S4D (s4d.py) beyond its naive reference (test_naive_references.py): chunked streaming and single steps follow the
recurrence, the factorised kernel equals the direct Vandermonde form, the paper's default state size."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.s4d import naive, naive_kernel
from tests.attention.mechanism_testing import ATOL, RTOL, D, H, build, gen, randn, small_options


def test_s4d_streaming_matches_recurrence(request) -> None:
    """S4D chunked streaming (FFT convolution + carried state) equals the token-by-token recurrence."""
    g = gen(request)
    attn = build("s4d", "causal", **small_options("s4d", "causal"))
    x = randn(g, 2, 23, D)
    y1, h = attn(x[:, :9], return_state=True)
    y2, h2 = attn(x[:, 9:], state=h, return_state=True)
    y_ref, h_ref = naive(attn, x, return_state=True)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y_ref, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(h2.h, h_ref, atol=ATOL, rtol=RTOL)
    # decoding: single recurrent steps from an empty state, then from the carried one
    ys, state = [], None
    for t in range(5):
        y, state = attn(x[:, t:t + 1], state=state, return_state=True)
        ys.append(y)
    y_ref, h_ref = naive(attn, x[:, :5], return_state=True)
    torch.testing.assert_close(torch.cat(ys, 1), y_ref, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(state.h, h_ref, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("L", [1, 2, 5, 16, 17, 50])
def test_s4d_factorised_kernel_matches_vandermonde(L: int) -> None:
    """K from A^(a c + j) = A^(a c) A^j equals the direct Vandermonde sum; the decayed state sum likewise."""
    attn = build("s4d", "noncausal", state_size=8)
    dtA, cb = attn.discretize()
    torch.testing.assert_close(attn.kernel(dtA, cb, L), naive_kernel(dtA, cb, L), atol=ATOL, rtol=RTOL)
    u = torch.randn(2, D, L, dtype=torch.float64)
    pos = torch.arange(L).to(dtA.dtype)
    direct = torch.einsum("bdl,dnl->bdn", u.to(dtA.dtype), torch.exp(dtA[0][..., None] * pos))
    torch.testing.assert_close(attn.decayed_sum(u, dtA[0]), direct, atol=ATOL, rtol=RTOL)


def test_paper_defaults() -> None:
    """Defaults follow the paper's table: state size 64."""
    assert build_attention("s4d", D, H, "causal").state_size == 64
