import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.nn.transformer import PreLNDecoderBlock


def test_block_streams_in_chunks_like_one_pass():
    torch.manual_seed(0)
    block = PreLNDecoderBlock(build_attention("vanilla", 32, 4, "causal"), ffn_dim=64).eval()
    x = torch.randn(2, 13, 32)  # [B, T, D]
    full = block(x)
    y1, state = block(x[:, :6], return_state=True)
    y2, _ = block(x[:, 6:], state=state, return_state=True)
    torch.testing.assert_close(torch.cat([y1, y2], 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation,fn", [("gelu", torch.nn.functional.gelu), ("relu", torch.relu)])
def test_feed_forward_is_linear_activation_linear(activation, fn):
    from lavo_zoo.nn.transformer import FeedForward

    torch.manual_seed(0)
    ff = FeedForward(8, 16, dropout=0.5, activation=activation).eval()
    x = torch.randn(2, 3, 8)
    expected = fn(x @ ff.fc1.weight.T + ff.fc1.bias) @ ff.fc2.weight.T + ff.fc2.bias
    torch.testing.assert_close(ff(x), expected)
    with pytest.raises(ValueError, match="activation must be one of gelu, relu"):
        FeedForward(8, 16, activation="swish")
