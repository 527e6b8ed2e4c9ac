"""The lm recipe: every config, the paper settings, training lowers perplexity, the evaluation at several lengths
and streamed, and LAVO's reading in saved checkpoints."""

import pytest
import torch
import yaml
from torch.utils.data import DataLoader

from lavo_zoo.attention import AttentionSpec
from lavo_zoo.engine.checkpoint_io import load_model, read_config, save_checkpoint
from lavo_zoo.engine.configs import available_configs, resolve_config
from lavo_zoo.errors import UsageError
from tests.recipes.lm.helpers import tiny_config


@pytest.mark.parametrize("name", [n for n in available_configs() if n.startswith("lm/")])
def test_configs_resolve_and_build(name):
    recipe, cfg = resolve_config(name)
    assert recipe.name == "lm" and cfg.data.block_size > 0
    if name.startswith("lm/tiny"):
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


def test_tiny_model_perplexity_falls_during_training():
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
    recipe, cfg = tiny_config("longshort", {"window_size": 4, "num_landmarks": 4},
                              eval={"stream": True, "max_tokens": 64})
    from lavo_zoo.errors import UsageError
    with pytest.raises(UsageError, match="streaming attention"):
        recipe.evaluate(recipe.build_model(cfg), cfg, "test", "cpu")


def test_max_batches_caps_the_stream_at_that_many_chunks():
    recipe, cfg = tiny_config("local", {"window_size": 8}, eval={"length_factors": [], "stream": True,
                                                                  "stream_chunk": 16})
    model = recipe.build_model(cfg).eval()
    table = recipe.evaluate(model, cfg, "validation", torch.device("cpu"), max_batches=3)
    assert table.num_samples == 3 * 16


# -------------------------------------------------------------------------------- LAVO's reading in saved checkpoints
OPTIONS = {"num_bases": 8, "window_size": 4}


@pytest.fixture
def checkpoint(tmp_path):
    recipe, cfg = tiny_config("lavo", OPTIONS)
    torch.manual_seed(0)
    model = recipe.build_model(cfg).eval()
    return save_checkpoint(tmp_path / "checkpoints", 1, model, cfg, "lm")


def test_eval_may_switch_the_global_read_off_but_not_change_the_weights(checkpoint):
    on = load_model(checkpoint)[2]
    off = load_model(checkpoint, overrides=["model.attention.global_read=false"])[2]
    assert all(b.attn.global_read for b in on.blocks) and not any(b.attn.global_read for b in off.blocks)
    x = torch.randint(1, 256, (1, 24))
    with torch.no_grad():
        assert not torch.allclose(on(x), off(x))
    with pytest.raises(UsageError, match="fixed by its weights"):
        load_model(checkpoint, overrides=["model.attention.num_bases=4"])


def test_a_config_saved_before_the_default_changed_keeps_its_reading(checkpoint, tmp_path):
    saved = yaml.safe_load((checkpoint / "config.yaml").read_text())
    former = {"combine": "half", "read_temperature": 0.0, "memory_norm": "mean"}
    assert all(saved["model"]["attention"][k] is None for k in former)  # recorded: today's (causal) defaults
    attn = load_model(checkpoint)[2].blocks[0].attn
    assert (attn.combine, attn.memory_norm, attn.log_read_temperature is not None) == ("sum", "rms", True)
    for k in former:                                                     # as written before the options existed
        del saved["model"]["attention"][k]
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.yaml").write_text(yaml.safe_dump(saved))
    recipe, cfg = read_config(old)
    assert {k: cfg.model.attention.options[k] for k in former} == former
    attn = recipe.build_model(cfg).blocks[0].attn
    assert (attn.combine, attn.memory_norm, attn.log_read_temperature) == ("half", "mean", None)
    assert read_config(old, ["model.attention.global_read=false"])[1].model.attention.options["combine"] == "half"


def test_eval_plot_is_checked_before_the_work_and_never_replaces_a_file(checkpoint, tmp_path, capsys):
    from lavo_zoo.cli import main

    mine = tmp_path / "mine.png"
    mine.write_bytes(b"the user's picture")
    args = ["eval", str(checkpoint), "--max-batches", "1", "--device", "cpu", "eval.length_factors=[1]"]
    assert main([*args, f"eval.plot={mine}"]) == 2
    assert f"eval.plot {mine} already exists" in capsys.readouterr().err and mine.read_bytes() == b"the user's picture"
    assert main([*args, f"eval.plot={tmp_path / 'ppl.xyz'}"]) == 2
    assert f"eval.plot {tmp_path / 'ppl.xyz'}: .xyz names no image format" in capsys.readouterr().err
    assert main([*args, f"eval.plot={tmp_path / 'ppl.svg'}"]) == 0
    assert b"<svg" in (tmp_path / "ppl.svg").read_bytes()
