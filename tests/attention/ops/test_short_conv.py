"""The short convolution (ops/short_conv.py) against its definition, and streamed in parts."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention.ops.short_conv import ShortConv, naive_short_conv
from tests.attention.mechanism_testing import ATOL, RTOL, gen, randn


@pytest.mark.parametrize("kernel", [0, 1, 4])
def test_short_conv_matches_definition_and_streams(kernel: int, request) -> None:
    g0 = gen(request)
    torch.manual_seed(0)
    conv = ShortConv(6, kernel, activation=True, bias=True).double()
    x = randn(g0, 2, 11, 6)
    y, _ = conv(x)
    torch.testing.assert_close(y, naive_short_conv(conv, x), atol=ATOL, rtol=RTOL)
    y1, cache = conv(x[:, :4])
    y2, _ = conv(x[:, 4:], cache)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, atol=ATOL, rtol=RTOL)
    with pytest.raises(ValueError, match="conv_size"):
        ShortConv(6, -1)

