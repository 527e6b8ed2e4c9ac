import math

import numpy as np
import pytest
import torch

from lavo_zoo.evaluators.perplexity import PerplexityTable
from lavo_zoo.recipes.lm.infer import generate_ids
from lavo_zoo.recipes.lm.recipe import stream_perplexity
from tests.recipes.lm.helpers import CAUSAL_ATTENTIONS, require_attention, tiny_config

IDS = ["-".join([name, *(f"{k}={v}" for k, v in opts.items())]) for name, opts in CAUSAL_ATTENTIONS]


def tiny_model(attention, options):
    require_attention(attention)
    torch.manual_seed(0)
    recipe, cfg = tiny_config(attention, options)
    return recipe, cfg, recipe.build_model(cfg).eval()


def test_gpt2_small_width_and_tied_embeddings():
    require_attention("lavo")
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


@pytest.mark.parametrize("attention,options", CAUSAL_ATTENTIONS[:2], ids=IDS[:2])
def test_streaming_evaluation_equals_parallel_evaluation(attention, options):
    _, _, model = tiny_model(attention, options)
    tokens = np.random.default_rng(0).integers(0, 256, 301).astype(np.uint8)
    table = PerplexityTable()
    stream_perplexity(model, tokens, table, chunk=37, bucket_start=32)
    ids = torch.from_numpy(tokens.astype(np.int64))[None]  # [1, 301]
    with torch.no_grad():
        nll = model(ids[:, :-1], ids[:, 1:])[0]  # [300]
    metrics = table.compute()
    assert table.num_samples == 300
    assert metrics["ppl@stream"] == pytest.approx(math.exp(nll.double().mean()), rel=1e-5)
    for lo, hi in [(0, 32), (32, 64), (64, 128), (128, 256), (256, 512)]:
        assert metrics[f"ppl@ctx:{lo + 1}-{hi}"] == pytest.approx(math.exp(nll[lo:hi].double().mean()), rel=1e-5)


@pytest.mark.parametrize("attention,options", CAUSAL_ATTENTIONS, ids=IDS)
def test_generation_with_state_equals_greedy_full_reruns(attention, options):
    _, _, model = tiny_model(attention, options)
    prompt = list(b"Once upon a time")
    with_state = generate_ids(model, prompt, 24, temperature=0, use_state=True)
    reruns = generate_ids(model, prompt, 24, temperature=0, use_state=False)
    assert with_state == reruns and len(with_state) == 24


def test_sampling_is_reproducible_with_a_seed():
    _, _, model = tiny_model("vanilla", {})
    a = generate_ids(model, [1, 2, 3], 10, temperature=1.0, top_k=20, top_p=0.9, seed=7)
    b = generate_ids(model, [1, 2, 3], 10, temperature=1.0, top_k=20, top_p=0.9, seed=7)
    assert a == b


def test_max_batches_caps_the_stream_at_that_many_chunks():
    recipe, cfg = tiny_config("local", {"window_size": 8}, eval={"length_factors": [], "stream": True,
                                                                  "stream_chunk": 16})
    model = recipe.build_model(cfg).eval()
    table = recipe.evaluate(model, cfg, "validation", torch.device("cpu"), max_batches=3)
    assert table.num_samples == 3 * 16
