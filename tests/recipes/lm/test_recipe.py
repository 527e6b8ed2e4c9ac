import math

import pytest
import torch
from torch.utils.data import DataLoader

from lavo_zoo.attention import AttentionSpec
from lavo_zoo.engine.recipe import available_configs, resolve_config
from lavo_zoo.evaluators import build_evaluator
from lavo_zoo.recipes.lm.recipe import bucket_edges
from tests.recipes.lm.helpers import require_attention, tiny_config


@pytest.mark.parametrize("name", [n for n in available_configs() if n.startswith("lm/")])
def test_configs_resolve_and_build(name):
    recipe, cfg = resolve_config(name)
    assert recipe.name == "lm" and cfg.data.block_size > 0
    if name.startswith("lm/tiny"):
        require_attention(cfg.model.attention.name)
        model = recipe.build_model(recipe.resolve(cfg))
        attention = cfg.model.attention
        encodes = attention.name == "lavo" or attention.options.get("rope") or attention.options.get("relative_bias")
        assert model.use_positions == (not encodes)


def test_paper_settings():
    _, cfg = resolve_config("lm/pg19-lavo")
    assert cfg.model.attention.name == "lavo"
    assert cfg.model.attention == AttentionSpec("lavo", {"dropout": 0.1, "num_bases": 64, "window_size": 16})
    assert cfg.train.batch_size * cfg.train.grad_accum * cfg.data.block_size == 2 ** 17
    assert (cfg.train.lr, cfg.train.schedule, cfg.train.warmup_steps) == (5e-4, "inverse_sqrt", 10000)


def test_perplexity_evaluator_counts_tokens():
    ev = build_evaluator("perplexity")
    nll, scored = torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([[True, True], [True, False]])
    ev.update(nll[scored], None)
    assert ev.num_samples == 3 and ev.compute()["ppl"] == pytest.approx(math.exp(2.0))
    assert ev.results()["ppl"]["higher_is_better"] is False


def test_bucket_edges_double():
    assert bucket_edges(32, 300) == [0, 32, 64, 128, 256, 512]


def test_tiny_model_perplexity_falls_during_training():
    require_attention("lavo")
    torch.manual_seed(0)
    recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 8}, eval={"max_tokens": 1024})
    model = recipe.build_model(cfg)
    before = recipe.evaluate(model, cfg, "validation", "cpu").compute()["ppl@32"]
    loader = DataLoader(recipe.build_dataset(cfg, "train"), batch_size=8, shuffle=True, collate_fn=recipe.collate,
                        generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step, batch in zip(range(40), loader):
        loss, _ = recipe.training_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = recipe.evaluate(model, cfg, "validation", "cpu").compute()["ppl@32"]
    assert after < 0.3 * before  # from ~280 (random init) to ~40 in 40 steps


def test_evaluate_scores_the_same_tokens_at_every_length_and_plots(tmp_path):
    require_attention("lavo")
    recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 4},
                              eval={"length_factors": [1, 2, 4], "max_tokens": 600, "stream": True,
                                    "stream_tokens": 500, "plot": str(tmp_path / "ppl.png")})
    model = recipe.build_model(cfg)
    ev = recipe.evaluate(model, cfg, "test", "cpu")
    results = ev.results()
    assert {"ppl@32", "ppl@64", "ppl@128", "ppl@stream", "ppl@ctx:1-32", "ppl@ctx:257-512"} <= set(results)
    assert all(ev.groups[str(n)].num_samples == 512 for n in (32, 64, 128))  # 600 -> 4 blocks of 128
    assert ev.groups["stream"].num_samples == 500 and ev.num_samples == 512
    assert (tmp_path / "ppl.png").stat().st_size > 1000


def test_stream_refuses_non_streaming_attention():
    require_attention("longshort")
    recipe, cfg = tiny_config("longshort", {"window_size": 4, "num_landmarks": 4},
                              eval={"stream": True, "max_tokens": 64})
    from lavo_zoo.errors import UsageError
    with pytest.raises(UsageError, match="streaming attention"):
        recipe.evaluate(recipe.build_model(cfg), cfg, "test", "cpu")
