"""Attention selection in configs: the flat YAML form, name switches on the command line, config-time checks."""
import pytest
import torch

from lavo_zoo.attention import SITE_PATTERNS, AttentionSpec, SiteAttention, build_attention
from lavo_zoo.config import apply_overrides, to_dict
from lavo_zoo.engine.configs import config_from_dict, resolve_config
from lavo_zoo.errors import ConfigError


def test_flat_yaml_form_round_trips_through_the_saved_config():
    _, cfg = resolve_config("lm/tiny-lavo")
    assert cfg.model.attention == AttentionSpec("lavo", {"num_bases": 32, "window_size": 16})
    saved = to_dict(cfg)
    # options whose default changed are always recorded (here at today's default: None, the pattern's own)
    assert saved["model"]["attention"] == {"name": "lavo", "combine": None, "read_temperature": None,
                                           "memory_norm": None, "num_bases": 32, "window_size": 16}
    assert config_from_dict(saved)[1] == cfg


def test_bare_name_is_a_spec_without_options():
    _, cfg = resolve_config("lm/tiny-lavo", ["model.attention=sdpa"])
    assert cfg.model.attention == AttentionSpec("sdpa")
    _, cfg = resolve_config("lm/tiny-lavo", ["model.attention=sdpa", "model.attention.rope=true"])
    assert cfg.model.attention == AttentionSpec("sdpa", {"rope": True})


def test_changing_the_name_drops_the_old_options_and_later_overrides_add_new_ones():
    _, cfg = resolve_config("lm/tiny-lavo", ["model.attention.name=sdpa"])
    assert cfg.model.attention == AttentionSpec("sdpa")
    _, cfg = resolve_config("lm/tiny-lavo", ["model.attention.name=performer", "model.attention.num_features=16"])
    assert cfg.model.attention == AttentionSpec("performer", {"num_features": 16})
    _, cfg = resolve_config("lm/tiny-lavo", ["model.attention.name=lavo", "model.attention.num_bases=8"])
    assert cfg.model.attention == AttentionSpec("lavo", {"num_bases": 8, "window_size": 16})  # same name: kept
    assert apply_overrides({"a": {"name": "x", "k": 1}}, ["a.name=x"]) == {"a": {"name": "x", "k": 1}}


def test_pattern_the_mechanism_cannot_do_is_refused_at_config_time():
    with pytest.raises(ConfigError) as e:
        resolve_config("time_series/tiny-lavo", ["model.attention.cross.name=local"])
    msg = str(e.value)
    assert "model.attention.cross" in msg and "'cross'" in msg and "'local'" in msg
    able = msg.split("mechanisms with 'cross': ")[1].split(" (in ")[0].split(", ")
    assert "lavo" in able and "sdpa" in able and "local" not in able
    with pytest.raises(ConfigError, match="'model.attention': attention 'lara' does not support pattern 'causal'"):
        resolve_config("lm/tiny-lavo", ["model.attention.name=lara"])


def test_unknown_names_options_and_sites_are_config_errors():
    with pytest.raises(ConfigError, match=r"model.attention.num_base'.*did you mean 'num_bases'"):
        resolve_config("lm/tiny-lavo", ["model.attention.num_base=3"])
    with pytest.raises(ConfigError, match=r"unknown attention 'lavoo'.*did you mean 'lavo'"):
        resolve_config("lm/tiny-lavo", ["model.attention.name=lavoo"])
    with pytest.raises(ConfigError, match=r"site 'model.attention.crosss'.*did you mean 'cross'"):
        resolve_config("time_series/tiny-lavo", ["model.attention.crosss.name=lavo"])
    with pytest.raises(ConfigError, match="needs 'name:'"):
        AttentionSpec.from_config({"num_bases": 3}, "model.attention", "test")


def test_a_partial_site_mapping_keeps_the_recipe_defaults_for_the_other_sites():
    _, cfg = config_from_dict({"recipe": "time_series", "model": {"attention": {"cross": {"name": "lavo"}}}})
    assert cfg.model.attention.encoder_self == AttentionSpec("probsparse", {"factor": 5})
    assert cfg.model.attention.cross == AttentionSpec("lavo")  # another mechanism: the default's options dropped


def test_spec_builds_what_build_attention_builds():
    spec = AttentionSpec("lavo", {"num_bases": 4, "window_size": 4})
    torch.manual_seed(0)
    a = spec.build(32, 4, "causal")
    torch.manual_seed(0)
    b = build_attention("lavo", 32, 4, "causal", num_bases=4, window_size=4)
    x = torch.randn(2, 10, 32)
    torch.testing.assert_close(a(x), b(x))
    sites = SiteAttention(cross=AttentionSpec("vanilla"))
    assert {s: sites.build(s, 16, 2).pattern for s in SITE_PATTERNS} == SITE_PATTERNS


def test_an_option_out_of_range_names_the_site_key_and_file():
    """A value the mechanism refuses when built (a range, not a type) named neither the config key nor the file: with
    one mechanism at two sites the user could not tell which was wrong."""
    from lavo_zoo.errors import OptionError

    _, cfg = resolve_config("summarization/tiny-sdpa", ["model.attention.decoder_self.name=lavo",
                                                        "model.attention.cross.name=lavo",
                                                        "model.attention.cross.num_bases=1000"])
    cfg.model.attention.decoder_self.build(32, 4, "causal")  # the other site builds
    with pytest.raises(OptionError, match=r"config key 'model.attention.cross' in .*tiny-sdpa.yaml with overrides "
                                          r".*num_bases \(1000\) must be between 1 and the head dim 8.*"
                                          r"model.attention.cross.<option>=VALUE"):
        cfg.model.attention.cross.build(32, 4, "cross")
    with pytest.raises(OptionError, match=r"^attention 'lavo': num_bases \(1000\)"):  # not from a config: as before
        AttentionSpec("lavo", {"num_bases": 1000}).build(32, 4, "cross")
