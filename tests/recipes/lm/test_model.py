"""The model: GPT-2 small's size with tied embeddings, streaming in chunks equal to one pass."""
import pytest
import torch

from tests.recipes.lm.helpers import CAUSAL_ATTENTIONS, IDS, tiny_config, tiny_model


def test_gpt2_small_width_and_tied_embeddings():
    recipe, cfg = tiny_config("lavo", {"num_bases": 64, "window_size": 16},  # 2 of GPT-2 small's 12 layers
                              model={"num_layers": 2, "embed_dim": 768, "num_heads": 12, "ffn_dim": 3072},
                              data={"tokenizer": "gpt2"})
    model = recipe.build_model(cfg)
    V, D, F, L, H, r, w = 50257, 768, 3072, 2, 12, 64, 16
    layer = (4 * D * D + 4 * D) + (2 * D * F + F + D) + 4 * D  # attention, FFN, two LayerNorms
    # orthogonal bases + EPE bias + the read temperature per layer (docs/lavo.md: +0.59M over 12 layers)
    lavo = r * D + H * (2 * w - 1) + H
    assert sum(p.numel() for p in model.parameters()) == V * D + 2 * D + L * (layer + lavo)  # tied: no output matrix
    assert not model.use_positions  # LAVO's EPE replaces the sinusoidal positions


@pytest.mark.parametrize("attention,options", CAUSAL_ATTENTIONS, ids=IDS)
def test_streaming_in_chunks_equals_one_pass(attention, options):
    _, _, model = tiny_model(attention, options)
    idx = torch.randint(0, 256, (2, 41))
    x, y = idx[:, :-1], idx[:, 1:]
    full = model(x, y)  # [B, T] NLL
    state, parts = None, []
    for start in range(0, 40, 9):
        nll, state = model(x[:, start:start + 9], y[:, start:start + 9], state=state, return_state=True)
        parts.append(nll)
    assert state.offset == 40
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-4, atol=1e-4)
