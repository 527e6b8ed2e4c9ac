"""The recall models: logits at the selected positions equal the full [B, T, V] logits there, the decoder's causality
for every kind of mechanism, the encoder reading the whole sequence, the encoder-decoder's source reaching the target
only through the cross attention, positions only where the attention does not encode them, and each pattern's state
size against the size its state object's fields give by hand (KV cache, window, LAVO's sums and memory, SSM state,
feature-map sums, a cross cache, the tokens kept where a mechanism keeps no state)."""
import pytest
import torch

from lavo_zoo.attention import AttentionSpec, SiteAttention
from lavo_zoo.recipes.recall.model import ModelConfig, RecallEncoder, RecallEncoderDecoder, RecallModel, state_bytes
from lavo_zoo.testing import randomise_zero_parameters

D, H, T, V = 16, 2, 24, 20


def _model(attention: dict, layers: int = 2) -> RecallModel:
    torch.manual_seed(0)
    spec = AttentionSpec.from_config(attention, "model.attention", "test")
    return RecallModel(ModelConfig(num_layers=layers, embed_dim=D, num_heads=H, ffn_dim=32, embed_dropout=0.0,
                                   attention=spec, vocab_size=V)).eval()


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



# ----------------------------------------------------------------------------------- noncausal and cross recall
BINDING = AttentionSpec("local", {"window_size": 2, "relative_bias": True})


def _encoder(attention: dict, layers: int = 2, binding: AttentionSpec | None = None) -> RecallEncoder:
    torch.manual_seed(0)
    spec = AttentionSpec.from_config(attention, "model.attention", "test")
    model = RecallEncoder(ModelConfig(num_layers=layers, embed_dim=D, num_heads=H, ffn_dim=32, embed_dropout=0.0,
                                      attention=spec, vocab_size=V, binding=binding)).eval()
    randomise_zero_parameters(model)
    return model


def _encoder_decoder(cross: dict, layers: int = 1, **sites) -> RecallEncoderDecoder:
    torch.manual_seed(0)
    spec = SiteAttention.from_config({"cross": cross, **sites}, "model.attention", "test")
    model = RecallEncoderDecoder(ModelConfig(num_layers=layers, embed_dim=D, num_heads=H, ffn_dim=32,
                                             embed_dropout=0.0, attention=spec, vocab_size=V)).eval()
    randomise_zero_parameters(model)
    return model


@pytest.mark.parametrize("attention, reach", [
    ({"name": "sdpa"}, T - 1), ({"name": "lavo", "num_bases": 4, "window_size": 4}, T - 1), ({"name": "gla"}, T - 1),
    ({"name": "mean"}, T - 1), ({"name": "local", "window_size": 4}, 3)])  # local: its window, 3 tokens each way
def test_the_encoder_reads_the_whole_sequence(attention, reach):
    """Noncausal recall's encoder: a position's output depends on tokens after it as well as before it (the first
    on the last, the last on the first; `local` on the tokens within its window), and the selected logits are the
    full logits there."""
    model = _encoder(attention)
    tokens = torch.randint(0, V, (3, T))
    h = model.hidden(tokens)  # [B, T, D]
    select = torch.rand(3, T) < 0.3
    torch.testing.assert_close(model(tokens, select), model.logits(h)[select])
    for changed_at, read_at in ((reach, 0), (T - 1 - reach, T - 1)):
        changed = tokens.clone()
        changed[:, changed_at] = (tokens[:, changed_at] + 1) % V
        moved = (model.hidden(changed) - h).abs().amax(-1)  # [B, T]
        assert (moved[:, read_at] > 1e-4).all(), (attention, changed_at, moved[:, read_at])


def test_the_cross_sites_source_reaches_the_target_only_through_the_cross_attention():
    """Cross recall's encoder-decoder: the cross attention's context is the encoded source (nothing of the target);
    the decoder's self attention is causal over the target; and with the cross attention's output zeroed, no
    target position depends on the source any more: the cross site is the answer's only way to the target."""
    model = _encoder_decoder({"name": "sdpa"}, layers=2)
    source, target = torch.randint(0, V, (3, T)), torch.randint(0, V, (3, 6))
    seen = []
    hooks = [layer.cross_attn.register_forward_hook(lambda m, args, kwargs, out: seen.append(kwargs["context"]),
                                                    with_kwargs=True) for layer in model.decoder.layers]
    h = model.hidden(target, source)
    for hook in hooks:
        hook.remove()
    memory = model.encode(source)
    assert len(seen) == 2 and all(torch.equal(c, memory) for c in seen)  # the encoded source, nothing else
    other = source.clone()
    other[:, 5] = (source[:, 5] + 1) % V
    assert (model.hidden(target, other) - h).abs().amax() > 1e-4  # the source matters ...
    later = target.clone()
    later[:, 4:] = (target[:, 4:] + 1) % V
    torch.testing.assert_close(model.hidden(later, source)[:, :4], h[:, :4])  # ... the target's future does not
    zeroed = [layer.cross_attn.register_forward_hook(lambda m, args, out: torch.zeros_like(out))
              for layer in model.decoder.layers]
    torch.testing.assert_close(model.hidden(target, other), model.hidden(target, source))  # ... but through cross
    for hook in zeroed:
        hook.remove()
    select = torch.rand(3, 6) < 0.5
    torch.testing.assert_close(model(target, select, context=source), model.logits(h)[select])
    with pytest.raises(ValueError, match="give context"):
        model(target, select)


@pytest.mark.parametrize("cross, per_layer, grows", [
    ({"name": "sdpa"}, 2 * T * D * FLOAT, True),  # the projected keys and values of every source token
    ({"name": "performer"}, T * D * FLOAT, True),  # no cache of its own: the source itself
    ({"name": "lavo", "num_bases": 4}, D * FLOAT, False),  # the [H, d] mean memory
    ({"name": "mean"}, D * FLOAT, False),  # the mean value
    ({"name": "deltanet"}, H * (D // H) ** 2 * FLOAT, False),  # a d x d state per head after the source
    ({"name": "gla"}, H * (D // H // 2) * (D // H) * FLOAT, False),  # keys of half the width (expand_k 0.5)
])
def test_a_cross_sites_state_is_its_cache_of_the_source(cross, per_layer, grows):
    """The cross site's state per source: each decoder layer's cross cache, constant or growing with the source."""
    assert state_bytes(_encoder_decoder(cross, layers=2), T) == (2 * per_layer, grows)


@pytest.mark.parametrize("attention, per_layer, grows", [
    ({"name": "sdpa"}, 2 * T * D * FLOAT, True),  # keys and values of every token
    ({"name": "local", "window_size": 4}, T * D * FLOAT, True),  # no state of the sequence: every token kept
    ({"name": "s4d", "state_size": 8}, T * D * FLOAT, True),
    ({"name": "lavo", "num_bases": 4, "window_size": 4}, D * FLOAT, False),  # its memory
    ({"name": "lavo", "num_bases": 4, "window_size": 4, "global_read": False}, T * D * FLOAT, True),  # the window
    ({"name": "lavo", "num_bases": 4, "memory_source": "local_out"}, D * FLOAT, False),  # a mean of other vectors
    ({"name": "mean"}, D * FLOAT, False),
    ({"name": "deltanet"}, T * (2 * D + H) * FLOAT, True),  # both scans read every token's key, value and beta
    ({"name": "deltanet", "noncausal_form": "final_state"}, H * (D // H) ** 2 * FLOAT, False),  # the state after it
    ({"name": "based", "feature_dim": 4}, H * (1 + 4 + 10) * (D // H + 1) * FLOAT, False),  # sums: no decay
])
def test_a_noncausal_layers_state_is_what_it_keeps_of_the_sequence(attention, per_layer, grows):
    assert state_bytes(_encoder(attention, layers=2), T) == (2 * per_layer, grows)


def test_model_attention_reads_one_attention_or_sites_and_refuses_neither():
    from lavo_zoo.errors import ConfigError
    from lavo_zoo.recipes.recall.model import RecallAttention

    assert RecallAttention.from_config("lavo", "model.attention", "f") == AttentionSpec("lavo")
    sites = RecallAttention.from_config({"cross": {"name": "mean"}}, "model.attention", "f")
    assert isinstance(sites, SiteAttention) and sites.cross == AttentionSpec("mean")
    assert sites.encoder_self.name == "sdpa"  # a site left out keeps the default
    with pytest.raises(ConfigError, match="needs 'name:' .* or, for the cross task, a mapping of sites"):
        RecallAttention.from_config({"num_bases": 4}, "model.attention", "f")


def test_the_binding_layer_comes_first_and_is_not_the_state_under_test():
    """model.binding: one encoder block of its own attention before the layers under test, whose state alone is
    measured; positions follow the layers under test (sdpa: sinusoidal, though the binding layer has a relative
    bias)."""
    model = _encoder({"name": "sdpa"}, layers=1, binding=BINDING)
    assert [b.attn.pattern for b in model.binding.layers] == ["noncausal"] and model.binding.norm is None
    assert type(model.binding.layers[0].attn).__name__ == "LocalAttention" and model.use_positions
    tokens = torch.randint(0, V, (2, T))
    x = model.embed(tokens, True)
    torch.testing.assert_close(model.hidden(tokens), model.encoder(model.binding(x)))
    assert state_bytes(model, T) == state_bytes(_encoder({"name": "sdpa"}, layers=1), T) == (2 * T * D * FLOAT, True)
    assert not _encoder({"name": "lavo", "num_bases": 4}, layers=1, binding=BINDING).use_positions  # EPE
