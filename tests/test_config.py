"""Configs: overrides, inheritance and every validation error path."""
from dataclasses import dataclass, field
from typing import Literal

import pytest
from toy_recipe import ToyConfig

from lavo_zoo.config import RunConfig, apply_overrides, from_dict, load_yaml, parse_override
from lavo_zoo.engine.recipe import config_from_dict, find_config, resolve_config
from lavo_zoo.errors import ConfigError, UsageError


@dataclass
class Inner:
    size: int = 2
    kind: Literal["a", "b"] = "a"
    ratio: float = 0.5
    tags: list[str] = field(default_factory=list)
    limit: int | None = None


@dataclass
class Outer(RunConfig):
    inner: Inner = field(default_factory=Inner)


def test_override_values_are_yaml_typed():
    assert parse_override("train.lr=3e-4") == (["train", "lr"], 3e-4)
    assert parse_override("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_override("flag=true") == (["flag"], True)
    assert parse_override("name=lavo") == (["name"], "lavo")
    assert parse_override("x=null") == (["x"], None)


@pytest.mark.parametrize("bad", ["novalue", "=3", "a..b=1", "a.=1", "a=[1,"])
def test_malformed_override_is_refused(bad):
    with pytest.raises(ConfigError, match="override"):
        parse_override(bad)


def test_overrides_set_nested_keys_without_touching_siblings():
    data = {"inner": {"size": 3, "ratio": 0.1}}
    out = apply_overrides(data, ["inner.size=7", "inner.tags=[x, y]", "train.lr=0.1"])
    assert out == {"inner": {"size": 7, "ratio": 0.1, "tags": ["x", "y"]}, "train": {"lr": 0.1}}
    assert data == {"inner": {"size": 3, "ratio": 0.1}}  # input untouched
    cfg = from_dict(Outer, out)
    assert cfg.inner.size == 7 and cfg.inner.tags == ["x", "y"] and cfg.train.lr == 0.1


def test_int_is_accepted_for_float_but_not_bool_for_int():
    assert from_dict(Outer, {"inner": {"ratio": 1}}).inner.ratio == 1.0
    with pytest.raises(ConfigError, match="'inner.size' .* must be int, got bool"):
        from_dict(Outer, {"inner": {"size": True}})


def test_unknown_key_names_key_source_and_closest_match():
    with pytest.raises(ConfigError) as e:
        from_dict(Outer, {"inner": {"sise": 3}}, source="my.yaml")
    assert "'inner.sise'" in str(e.value) and "my.yaml" in str(e.value) and "did you mean 'inner.size'" in str(e.value)


def test_unknown_section_and_wrong_types():
    with pytest.raises(ConfigError, match="did you mean 'inner'"):
        from_dict(Outer, {"iner": {}})
    with pytest.raises(ConfigError, match="must be float, got str 'fast'"):
        from_dict(Outer, {"train": {"lr": "fast"}})
    with pytest.raises(ConfigError, match="must be one of 'a', 'b'"):
        from_dict(Outer, {"inner": {"kind": "c"}})
    with pytest.raises(ConfigError, match="must be a list"):
        from_dict(Outer, {"inner": {"tags": "x"}})
    with pytest.raises(ConfigError, match="must be a mapping"):
        from_dict(Outer, {"inner": 3})
    assert from_dict(Outer, {"inner": {"limit": None}}).inner.limit is None
    assert from_dict(Outer, {"inner": {"limit": 4}}).inner.limit == 4


def test_extends_merges_parent_and_detects_cycles(tmp_path):
    (tmp_path / "base.yaml").write_text("recipe: toy\ntrain:\n  lr: 0.5\n  batch_size: 3\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\ntrain:\n  lr: 0.25\n")
    recipe, cfg = resolve_config(tmp_path / "child.yaml", ["model.hidden=5"])
    assert recipe.name == "toy" and isinstance(cfg, ToyConfig)
    assert (cfg.train.lr, cfg.train.batch_size, cfg.model.hidden) == (0.25, 3, 5)
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_yaml(tmp_path / "a.yaml")


def test_bad_files_and_names(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_yaml(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(tmp_path / "broken.yaml")
    with pytest.raises(ConfigError, match="does not exist"):
        find_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="no config named 'nodomain/none'"):
        find_config("nodomain/none")
    with pytest.raises(ConfigError, match="no 'recipe:' key"):
        config_from_dict({"train": {}})
    with pytest.raises(UsageError, match="unknown recipe 'tyo'.*did you mean 'toy'"):
        config_from_dict({"recipe": "tyo"})


def test_every_builtin_config_validates():
    from lavo_zoo.engine.recipe import available_configs
    for name in available_configs():
        recipe, cfg = resolve_config(name)
        assert cfg.recipe == recipe.name, name


def test_scientific_notation_without_dot_is_a_float_in_files_too(tmp_path):
    (tmp_path / "c.yaml").write_text("recipe: toy\ntrain:\n  lr: 5e-4\n  eps: 1.0e-8\n")
    _, cfg = resolve_config(tmp_path / "c.yaml")
    assert cfg.train.lr == 5e-4 and cfg.train.eps == 1e-8
