"""The recall decoder: logits at the selected positions equal the full [B, T, V] logits there, causality for every
kind of mechanism, positions only where the attention does not encode them, and the recurrent state's size against
the size its state object's fields give by hand (KV cache, window, LAVO's sums, SSM state, feature-map sums)."""
import pytest
import torch

from lavo_zoo.attention import AttentionSchedule, AttentionSpec
from lavo_zoo.recipes.recall.model import ModelConfig, RecallModel, state_bytes

D, H, T, V = 16, 2, 24, 20


def _model(attention: dict, layers: int = 2, schedule: str | None = None) -> RecallModel:
    torch.manual_seed(0)
    spec = AttentionSpec.from_config(attention, "model.attention", "test")
    schedule = AttentionSchedule.from_config(schedule, "model.attention_schedule", "test") if schedule else None
    return RecallModel(ModelConfig(num_layers=layers, embed_dim=D, num_heads=H, ffn_dim=32, embed_dropout=0.0,
                                   attention=spec, attention_schedule=schedule, vocab_size=V)).eval()


@pytest.mark.parametrize("attention", [{"name": "sdpa"}, {"name": "lavo", "num_bases": 4, "window_size": 4},
                                       {"name": "s4d", "state_size": 8}, {"name": "mean"}])
def test_selected_logits_are_the_full_logits_there_and_causal(attention):
    model = _model(attention)
    tokens = torch.randint(0, V, (3, T))
    full = model.hidden(tokens) @ model.embed_tokens.weight.t()  # [B, T, V]
    select = torch.rand(3, T) < 0.3
    torch.testing.assert_close(model(tokens, select), full[select])
    torch.testing.assert_close(model(tokens), full[:, -1])
    changed = tokens.clone()
    changed[:, 15:] = torch.randint(0, V, (3, T - 15))
    torch.testing.assert_close(model.hidden(changed)[:, :15], model.hidden(tokens)[:, :15])  # no peeking ahead
    assert not torch.allclose(model.hidden(changed)[:, 15:], model.hidden(tokens)[:, 15:])


def test_positions_are_added_only_where_the_attention_has_none():
    assert _model({"name": "sdpa"}).use_positions and _model({"name": "mean"}).use_positions
    assert not _model({"name": "lavo", "num_bases": 4}).use_positions  # EPE
    assert not _model({"name": "local", "window_size": 4, "relative_bias": True}).use_positions
    assert not _model({"name": "sdpa", "rope": True}).use_positions


FLOAT = 4  # bytes of a float32


@pytest.mark.parametrize("attention, per_layer, grows", [
    ({"name": "sdpa"}, 2 * T * D * FLOAT, True),  # keys and values of every token
    ({"name": "local", "window_size": 6}, 2 * 5 * D * FLOAT, False),  # the last w - 1 keys and values
    ({"name": "lavo", "num_bases": 4, "window_size": 6}, (2 * 5 * D + 2 * D) * FLOAT, False),  # + two feature sums
    ({"name": "mean"}, D * FLOAT, False),  # the sum of the values
    ({"name": "s4d", "state_size": 8}, D * 4 * 2 * FLOAT, False),  # [D, N/2] complex64
    ({"name": "performer", "num_features": 8}, (H * 8 * (D // H) + H * 8 + H) * FLOAT, False),
    ({"name": "abc", "num_slots": 5}, (2 * H * 5 * (D // H) + 2 * H * 5) * FLOAT, False),
    ({"name": "cosformer"}, (2 * H * (D // H) ** 2 + 2 * H * (D // H)) * FLOAT, False),
    ({"name": "longshort", "window_size": 4}, T * D * FLOAT, True),  # cannot stream: its whole input
])
def test_state_bytes_are_what_the_state_objects_hold(attention, per_layer, grows):
    assert state_bytes(_model(attention, layers=2), T) == (2 * per_layer, grows)



def test_a_hybrids_state_is_measured_layer_by_layer():
    """Three LAVO layers keep their window and sums, the fourth (sdpa) a KV cache that grows by 2 D floats a token:
    each layer says what it keeps, and the model's state is their sum."""
    model = _model({"name": "lavo", "num_bases": 4, "window_size": 6}, layers=4, schedule="lavo*3+sdpa")
    lavo, sdpa = (2 * 5 * D + 2 * D) * FLOAT, 2 * T * D * FLOAT
    layers = model.layer_states(T)
    assert [(s.layer, s.attention, s.bytes, s.grows) for s in layers] == [
        (0, "lavo", lavo, False), (1, "lavo", lavo, False), (2, "lavo", lavo, False), (3, "sdpa", sdpa, True)]
    assert [s.per_token for s in layers] == [0, 0, 0, 2 * D * FLOAT]
    assert state_bytes(model, T) == (3 * lavo + sdpa, True)
