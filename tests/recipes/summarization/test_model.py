"""The model: cached greedy decoding equals re-running the full model (a hybrid's too), tied embeddings, learned
positions."""
import pytest
import torch

from lavo_zoo.engine.configs import resolve_config
from lavo_zoo.errors import InputError
from lavo_zoo.nn.search import generate
from lavo_zoo.recipes.summarization.data import Example, SummarizationDataset, Vocabulary

SMALL = ["model.embed_dim=32", "model.num_heads=2", "model.ffn_dim=64", "model.encoder_layers=2",
         "model.decoder_layers=2", "model.dropout=0", "model.attention_dropout=0", "model.max_target_positions=32",
         "model.max_source_positions=128", "data.max_source_tokens=64", "data.max_target_tokens=16",
         "eval.max_len_b=16"]
SITES = {"sdpa": [], "lavo-noncausal": ["model.attention.encoder_self.num_bases=8"],
         "lavo-causal": ["model.attention.decoder_self.num_bases=8"], "local-noncausal": []}


def small_model(config: str, extra=()):
    recipe, cfg = resolve_config(f"summarization/tiny-{config}", [*SMALL, *SITES.get(config, []), *extra])
    torch.manual_seed(0)
    model = recipe.build_model(cfg).double().eval()
    with torch.no_grad():  # spread the tied embeddings so that greedy picks vary from step to step
        model.embed_tokens.weight.normal_(std=1.0)
    return recipe, cfg, model


def batch_of(recipe, n=3):
    vocab = Vocabulary()
    examples = [Example(str(i), [f"def add(x):\n    return x + {i}" * (i + 1), "class Box:\n    pass"][: 1 + i % 2],
                        f"Add {i} to x." + " Then return it." * i) for i in range(n)]
    return recipe.collate([SummarizationDataset(examples, vocab, 64, 16)[i] for i in range(n)])  # uneven lengths


# a hybrid at every site: each layer of a stack its own mechanism, each decoder layer its own state and cross cache
HYBRID = ["model.attention_schedule.encoder_self=[{name: lavo, num_bases: 8}, sdpa]",
          ("model.attention_schedule.decoder_self=[{name: gated_deltanet, chunk_size: 4}, "
          "{name: local, window_size: 3, num_sinks: 2}]"),
          "model.attention_schedule.cross=[sdpa, {name: lavo, num_bases: 8}]"]


@pytest.mark.parametrize("config, extra", [*((c, []) for c in SITES), ("sdpa", HYBRID)],
                         ids=[*SITES, "hybrid"])
def test_cached_greedy_equals_rerunning_the_full_model(config, extra):
    recipe, _, model = small_model(config, extra)
    if extra:  # the hybrid: the scheduled mechanism in each layer of each stack
        assert [(type(layer.self_attn).__name__, type(layer.cross_attn).__name__) for layer in model.decoder.layers] \
            == [("GatedDeltaNetAttention", "SDPAttention"), ("LocalAttention", "LavoAttention")]
        assert [type(layer.attn).__name__ for layer in model.encoder.layers] == ["LavoAttention", "SDPAttention"]
    batch = batch_of(recipe)
    assert not batch["source_mask"].all()  # a padded batch
    steps = []

    class Recording(torch.nn.Module):  # the model, recording the logits of every cached decoding step
        def encode(self, *a):
            return model.encode(*a)

        def init_cache(self, *a):
            return model.init_cache(*a)

        def decode_step(self, tokens, cache):
            logits, cache = model.decode_step(tokens, cache)
            steps.append(logits)
            return logits, cache

    vocab = Vocabulary()
    out = generate(Recording(), batch["source"], batch["source_mask"], bos_id=vocab.bos, eos_id=vocab.eos,
                   pad_id=vocab.pad, max_len_b=12)
    assert out.tokens.shape == (3, 12)
    # the full model over BOS + the generated prefix, re-run from scratch
    prefix = torch.cat([torch.full((3, 1), vocab.bos), out.tokens[:, :-1]], 1)  # [3, 12]
    full = model.logits(model(batch["source"], batch["source_mask"], prefix))  # [3, 12, V]
    full[..., model.cfg.never_generate] = float("-inf")
    cached = torch.stack(steps, 1)  # [3, 12, V] (no row finished early: every row runs to max_len)
    finite = torch.isfinite(full)
    assert torch.equal(finite, torch.isfinite(cached))
    torch.testing.assert_close(cached[finite], full[finite], rtol=1e-9, atol=1e-9)
    assert torch.equal(full[:, :-1].argmax(-1), out.tokens[:, :-1])  # greedy = argmax of the full model
    # teacher-forced random targets fed in uneven chunks through the cache = the full model at each chunk's end
    target = torch.randint(0, 50000, (3, 9))
    full = model.logits(model(batch["source"], batch["source_mask"], target))  # [3, 9, V]
    cache = model.init_cache(model.encode(batch["source"], batch["source_mask"]), batch["source_mask"])
    start = 0
    for size in (1, 3, 2, 3):
        logits, cache = model.decode_step(target[:, start:start + size], cache)
        start += size
        expected = full[:, start - 1].clone()
        expected[:, model.cfg.never_generate] = float("-inf")
        torch.testing.assert_close(logits, expected, rtol=1e-9, atol=1e-9)


def test_tied_embeddings_and_learned_positions():
    _, cfg, model = small_model("sdpa")
    assert cfg.model.vocab_size == Vocabulary().size == 50261
    hidden = torch.randn(2, 3, 32, dtype=torch.float64)
    torch.testing.assert_close(model.logits(hidden), hidden @ model.embed_tokens.weight.t())
    names = [n for n, _ in model.named_parameters()]
    assert "embed_tokens.weight" in names and not any("output" in n or "lm_head" in n for n in names)
    assert model.source_positions.weight.shape == (cfg.model.max_source_positions, 32)
    source = torch.tensor([[5, 6, 7]])
    x = model.embed_source(source)
    expected = torch.nn.functional.layer_norm(model.embed_tokens(source) + model.source_positions.weight[:3], (32,),
                                              model.source_norm.weight, model.source_norm.bias)
    torch.testing.assert_close(x, expected)
    with pytest.raises(InputError, match="max_target_positions"):
        model.embed_target(torch.zeros(1, 33, dtype=torch.long))


def test_every_site_takes_the_configured_attention():
    _, _, model = small_model("lavo-noncausal", ["model.attention.cross.name=lavo",
                                                 "model.attention.cross.num_bases=8"])
    assert type(model.encoder.layers[0].attn).__name__ == "LavoAttention"
    assert type(model.decoder.layers[0].self_attn).__name__ == "SDPAttention"
    assert type(model.decoder.layers[0].cross_attn).__name__ == "LavoAttention"


def test_training_loss_is_label_smoothed_cross_entropy_over_real_tokens():
    recipe, cfg, model = small_model("sdpa")
    batch = batch_of(recipe)
    loss, logs = recipe.training_loss(model, batch)
    target_in, target_out = batch["target"][:, :-1], batch["target"][:, 1:]
    logp = model.logits(model(batch["source"], batch["source_mask"], target_in, target_in != cfg.model.pad_id))
    logp = logp.log_softmax(-1)  # [B, T, V]
    eps, V = cfg.model.label_smoothing, logp.shape[-1]
    q = torch.full_like(logp, eps / (V - 1)).scatter(-1, target_out[..., None], 1 - eps)  # smoothed targets
    real = target_out != cfg.model.pad_id
    assert not real.all()  # padding present, and ignored below
    expected = -(q * logp).sum(-1)[real].mean()
    torch.testing.assert_close(loss, expected)
    assert logs["nll"] == pytest.approx(float(-logp.detach().gather(-1, target_out[..., None])[..., 0][real].mean()))
