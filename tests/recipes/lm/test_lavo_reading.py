"""LAVO's reading in saved LM checkpoints: the global read switched off at evaluation (the same weights), and a
config saved before a default changed keeps the reading it was trained with."""
import pytest
import torch
import yaml

from lavo_zoo.engine.checkpoint import load_model, read_config, save_checkpoint
from lavo_zoo.errors import UsageError
from tests.recipes.lm.helpers import require_attention, tiny_config

OPTIONS = {"num_bases": 8, "window_size": 4}


@pytest.fixture
def checkpoint(tmp_path):
    require_attention("lavo")
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
