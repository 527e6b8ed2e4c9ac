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


# hybrids: three linear-attention layers to one softmax layer, and one layer of each kind with a window and sinks
HYBRIDS = {"lavo*3+sdpa": "lavo*3+sdpa",
           "gdn-local_sinks-kda-sdpa": [{"name": "gated_deltanet", "chunk_size": 8},
                                        {"name": "local", "window_size": 4, "num_sinks": 2},
                                        {"name": "kda", "chunk_size": 8}, "sdpa"]}


@pytest.mark.parametrize("schedule", list(HYBRIDS.values()), ids=list(HYBRIDS))
def test_a_hybrid_decodes_token_by_token_as_it_runs_whole(schedule):
    """Each layer runs its scheduled mechanism and carries its own state (a matrix state, a window with sinks, LAVO's
    sums, a KV cache); fed one token at a time (and in uneven chunks) the hybrid gives the logits of one pass over
    the whole sequence, in float64."""
    from lavo_zoo.testing import randomise_zero_parameters

    recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 4},
                              model={"num_layers": 4, "attention_schedule": schedule})
    torch.manual_seed(0)
    model = randomise_zero_parameters(recipe.build_model(cfg)).double().eval()
    names = [spec.get("name", spec) if isinstance(spec, dict) else spec for spec in schedule] \
        if isinstance(schedule, list) else ["lavo"] * 3 + ["sdpa"]
    assert model.attention_names == names and model.streaming
    assert [type(block.attn).__name__ for block in model.blocks] == [
        {"lavo": "LavoAttention", "sdpa": "SDPAttention", "gated_deltanet": "GatedDeltaNetAttention",
         "local": "LocalAttention", "kda": "KDAAttention"}[name] for name in names]
    idx = torch.randint(0, 256, (2, 29))
    with torch.no_grad():
        whole = model.logits(model.features(idx)[0])  # [B, T, V]
        state, steps = None, []
        for t in range(idx.shape[1]):
            logits, state = model(idx[:, t:t + 1], state=state, return_state=True)  # [B, V]
            steps.append(logits)
        assert state.offset == 29 and [type(s).__name__ for s in state.layers] == [
            {"lavo": "LavoState", "sdpa": "KVCache", "gated_deltanet": "RecurrentState", "local": "SinkCache",
             "kda": "RecurrentState"}[name] for name in names]
        torch.testing.assert_close(torch.stack(steps, 1), whole, rtol=1e-10, atol=1e-10)
        state, chunks = None, []
        for start, stop in ((0, 5), (5, 6), (6, 20), (20, 29)):
            h, state = model.features(idx[:, start:stop], state=state, return_state=True)
            chunks.append(model.logits(h))
        torch.testing.assert_close(torch.cat(chunks, 1), whole, rtol=1e-10, atol=1e-10)


def test_a_state_of_another_stack_is_refused_naming_what_it_takes():
    """Found by the sweep: a state of fewer layers than the model (one of another schedule's depth) ran the missing
    layers with an IndexError, and a list in place of the state raised a raw AttributeError. A state whose layers
    are of another schedule is refused by each layer's own check."""
    def build(schedule: str, layers: int = 2) -> torch.nn.Module:
        recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 4},
                                  model={"num_layers": layers, "attention_schedule": schedule})
        return recipe.build_model(cfg).eval()

    hybrid, flipped, deeper = build("lavo+sdpa"), build("sdpa+lavo"), build("lavo+sdpa", 4)
    idx = torch.randint(0, 256, (2, 6))
    _, state = hybrid(idx, return_state=True)
    for model, bad in ((deeper, state), (hybrid, [None, None]), (hybrid, {"layers": []})):
        with pytest.raises(ValueError, match=r"state must be the DecoderState this model returned .* each of its "
                                             rf"{len(model.blocks)} layers; got"):
            model(idx, state=bad, return_state=True)
    with pytest.raises((TypeError, ValueError), match="state"):
        flipped(idx, state=state, return_state=True)
    assert hybrid(idx, state=state, return_state=True)[1].offset == 12
