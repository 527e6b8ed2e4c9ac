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


def test_tied_decoder_trunk_streams_like_one_pass_and_ties_its_head():
    """The trunk lm's and recall's models share: chunk by chunk with its DecoderState equals one pass over the
    whole sequence, positions added only when the attention does not encode them, logits through the embeddings."""
    from dataclasses import dataclass

    from lavo_zoo.attention import AttentionSpec
    from lavo_zoo.nn.position import sinusoidal_positions
    from lavo_zoo.nn.transformer import TiedDecoderLM

    @dataclass
    class Cfg:
        attention: AttentionSpec
        vocab_size: int = 11
        embed_dim: int = 16
        num_heads: int = 2
        ffn_dim: int = 32
        num_layers: int = 2
        dropout: float = 0.0
        positions: str = "auto"

    torch.manual_seed(0)
    idx = torch.randint(0, 11, (2, 9))
    for spec, positions in ((AttentionSpec("sdpa"), True), (AttentionSpec("lavo", {"num_bases": 4, "window_size": 3}),
                                                             False)):
        model = TiedDecoderLM(Cfg(spec), embed_dropout=0.0).eval()
        assert model.use_positions is positions and model.streaming
        full, _ = model.features(idx)  # [B, T, D]
        first, state = model.features(idx[:, :4], return_state=True)
        rest, state = model.features(idx[:, 4:], state=state)
        assert state.offset == 9
        torch.testing.assert_close(torch.cat([first, rest], 1), full, atol=1e-5, rtol=1e-5)
        x = model.embed_tokens(idx) * 4.0  # sqrt(D)
        if positions:
            x = x + sinusoidal_positions(9, 16, 0, x.dtype, x.device)
        for block in model.blocks:
            x = block(x)
        torch.testing.assert_close(full, model.ln_f(x))
        torch.testing.assert_close(model.logits(full), full @ model.embed_tokens.weight.t())
