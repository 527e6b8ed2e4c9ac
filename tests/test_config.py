"""Configs (zoo/config.py): overrides, inheritance and every validation error path; the mistakes a new user makes get
an error naming the key or file, and a child config can delete an inherited key."""
from dataclasses import dataclass, field
from typing import Literal

import pytest
from toy_recipe import ToyConfig

from lavo_zoo.cli import main
from lavo_zoo.config import apply_overrides, from_dict, load_yaml, parse_override
from lavo_zoo.engine.configs import resolve_config
from lavo_zoo.engine.run_config import RunConfig
from lavo_zoo.errors import ConfigError


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


def test_a_time_of_day_is_text_not_a_base_60_number(tmp_path):
    """YAML 1.1 reads 4:00:00 as 14400 (base 60), so a config's Slurm time limit `time: 4:00:00` became 14400
    minutes (ten days) with exit 0; the configs' YAML reads it as the text it is (YAML 1.2), numbers unchanged."""
    path = tmp_path / "c.yaml"
    path.write_text("launcher: {time: 4:00:00, at: 1:30.5, minutes: 240, neg: -1:00}\nlr: 1.5\n")
    data = load_yaml(path)
    assert data["launcher"] == {"time": "4:00:00", "at": "1:30.5", "minutes": 240, "neg": "-1:00"}
    assert data["lr"] == 1.5
    assert parse_override("launcher.time=12:00:00") == (["launcher", "time"], "12:00:00")


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
    with pytest.raises(ConfigError, match=r"'inner' in .* must be a mapping of its keys \(.*kind, .*tags.*\), got"):
        from_dict(Outer, {"inner": "x"})  # found by the sweep: the message named no key the section takes
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


def test_bad_files(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_yaml(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(tmp_path / "broken.yaml")


def test_scientific_notation_without_dot_is_a_float_in_files_too(tmp_path):
    (tmp_path / "c.yaml").write_text("recipe: toy\ntrain:\n  lr: 5e-4\n  eps: 1.0e-8\n")
    _, cfg = resolve_config(tmp_path / "c.yaml")
    assert cfg.train.lr == 5e-4 and cfg.train.eps == 1e-8


# ------------------------------------------------------------------------------------------ mistakes a new user makes
TOY = "tests/engine/data/toy.yaml"


@dataclass
class Opts:
    options: dict = field(default_factory=dict)


@dataclass
class WithOpts(RunConfig):
    inner: Opts = field(default_factory=Opts)


def test_did_you_mean_finds_the_key_by_meaning():
    with pytest.raises(ConfigError, match=r"'train.learning_rate'.*did you mean 'train.lr'\?"):
        resolve_config(TOY, ["train.learning_rate=0.1"])
    with pytest.raises(ConfigError, match=r"did you mean 'train.clip_grad_norm'\?"):
        resolve_config(TOY, ["train.grad_clip_norm=1"])  # same words, another order
    with pytest.raises(ConfigError, match=r"did you mean 'train.save_every'\?"):
        resolve_config(TOY, ["train.sav_every=1"])  # a typo still goes by spelling


def test_missing_parent_names_the_child_and_where_it_looked(tmp_path):
    (tmp_path / "child.yaml").write_text("extends: nosuch.yaml\nrecipe: toy\n")
    with pytest.raises(ConfigError) as e:
        load_yaml(tmp_path / "child.yaml")
    text = str(e.value)
    assert str(tmp_path / "child.yaml") in text and str(tmp_path / "nosuch.yaml") in text and "built-in" in text


def test_delete_drops_an_inherited_key_and_the_default_applies(tmp_path):
    (tmp_path / "base.yaml").write_text("recipe: toy\ntrain:\n  lr: 0.5\n  batch_size: 3\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\ntrain:\n  lr: !delete\n")
    assert load_yaml(tmp_path / "child.yaml") == {"recipe": "toy", "train": {"batch_size": 3}}
    _, cfg = resolve_config(tmp_path / "child.yaml")
    assert cfg.train.lr == 5e-4 and cfg.train.batch_size == 3
    _, cfg = resolve_config(tmp_path / "base.yaml", ["train.batch_size=!delete"])
    assert cfg.train.batch_size == 8 and cfg.train.lr == 0.5
    # the mapping case: mechanism options that the child's mechanism does not take
    data = {"inner": {"options": {"window": 16, "bases": 8}}}
    assert from_dict(WithOpts, apply_overrides(data, ["inner.options.window=!delete"])).inner.options == {"bases": 8}


def test_delete_of_a_key_that_is_not_inherited_is_refused(tmp_path):
    (tmp_path / "base.yaml").write_text("recipe: toy\ntrain:\n  lr: 0.5\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\ntrain:\n  lrr: !delete\n")
    with pytest.raises(ConfigError, match=r"deletes 'train.lrr'.*inherits no such key.*did you mean 'lr'"):
        load_yaml(tmp_path / "child.yaml")
    (tmp_path / "alone.yaml").write_text("recipe: toy\ntrain:\n  lr: !delete\n")
    with pytest.raises(ConfigError, match="extends no config"):
        load_yaml(tmp_path / "alone.yaml")
    with pytest.raises(ConfigError, match="no key 'train.nope' to delete"):
        apply_overrides({"train": {}}, ["train.nope=!delete"])
    for absent in ({}, {"model": None}):  # below a section that is not there: nothing to delete either
        with pytest.raises(ConfigError, match="no key 'model.attention.x' to delete"):
            apply_overrides(absent, ["model.attention.x=!delete"])
    with pytest.raises(ConfigError, match="'lr' is a value, not a section"):
        apply_overrides({"train": {"lr": 0.5}}, ["train.lr.x=1"])


def test_duplicate_keys_and_non_utf8_files_are_refused_naming_the_file(tmp_path):
    (tmp_path / "dup.yaml").write_text("recipe: toy\ntrain: {lr: 1, lr: 2}\n")
    with pytest.raises(ConfigError, match=r"dup.yaml.*duplicate key 'lr' on line 2"):
        load_yaml(tmp_path / "dup.yaml")
    (tmp_path / "anchors.yaml").write_text("a: &x {p: 1, q: 2}\nb:\n  <<: *x\n  q: 3\n")  # a merge key is no duplicate
    assert load_yaml(tmp_path / "anchors.yaml")["b"] == {"p": 1, "q": 3}
    (tmp_path / "latin1.yaml").write_bytes("recipe: toy\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1.yaml is not UTF-8 text \(byte 17"):
        load_yaml(tmp_path / "latin1.yaml")


@pytest.mark.parametrize("override, message", [
    ("train.lr=-1", "'train.lr' .* must be > 0, got -1"),
    ("train.betas=[2,3]", r"'train.betas\[0\]' .* must be >= 0 and < 1, got 2"),
    ("train.save_every=0", "'train.save_every' .* must be >= 1, got 0"),
    ("train.log_every=0", "'train.log_every' .* must be >= 1, got 0"),
    ("train.batch_size=0", "'train.batch_size' .* must be >= 1"),
    ("train.max_epochs=0", "'train.max_epochs' .* must be >= 1"),
    # found by the sweep: one beta (or three) passed the check and failed at the first step (IndexError)
    ("train.betas=[0.9]", r"'train.betas' must hold two numbers \(Adam's beta1 and beta2\), e.g. \[0.9, 0.98\], got 1"),
    ("train.betas=[0.9,0.98,0.99]", r"'train.betas' must hold two numbers .* got 3"),
    ("train.min_lr=2", r"'train.min_lr' \(2\) is above train.lr \(0.01\): the cosine schedule decays"),  # rose to it
])
def test_out_of_range_values_exit_2_naming_the_key_before_anything_is_written(override, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", TOY, override, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert __import__("re").search(message, err) and "Traceback" not in err
    assert not out.exists()


def test_lm_block_size_range_is_in_the_schema():
    with pytest.raises(ConfigError, match="'data.block_size' .* must be >= 1, got 0"):
        resolve_config("lm/tiny-lavo", ["data.block_size=0"])
    _, cfg = resolve_config(TOY, ["train.max_epochs=null"])
    assert cfg.train.max_epochs is None


# ------------------------------------------------------------------------------ one merge rule for every path
def test_extends_with_another_attention_name_drops_the_parents_options(tmp_path):
    """`extends:` applies the rule `model.attention.name=...` applies: another mechanism starts from no options
    (the parent's sdpa `rope` would be refused by lavo), the same mechanism keeps them."""
    from lavo_zoo.attention import AttentionSpec, SiteAttention

    (tmp_path / "lavo.yaml").write_text("extends: lm/tiny-sdpa-rope\nmodel:\n  attention: {name: lavo}\n")
    _, by_extends = resolve_config(tmp_path / "lavo.yaml")
    _, by_override = resolve_config("lm/tiny-sdpa-rope", ["model.attention.name=lavo"])
    assert by_extends.model.attention == by_override.model.attention == AttentionSpec("lavo")
    (tmp_path / "same.yaml").write_text("extends: lm/tiny-sdpa-rope\nmodel:\n  attention: {name: sdpa, bias: false}\n")
    _, same = resolve_config(tmp_path / "same.yaml")
    assert same.model.attention == AttentionSpec("sdpa", {"rope": True, "bias": False})
    (tmp_path / "more.yaml").write_text("extends: lm/tiny-sdpa-rope\nmodel:\n  attention: {bias: false}\n")
    assert resolve_config(tmp_path / "more.yaml")[1].model.attention == same.model.attention  # no name: merged
    (tmp_path / "cross.yaml").write_text("extends: time_series/etth1-sdpa\nmodel:\n  attention:\n"
                                         "    cross: {name: lavo, num_bases: 8}\n")
    _, cfg = resolve_config(tmp_path / "cross.yaml")
    assert isinstance(cfg.model.attention, SiteAttention)
    assert cfg.model.attention.cross == AttentionSpec("lavo", {"num_bases": 8})  # the parent's dropout 0.05 dropped
    assert cfg.model.attention.encoder_self == AttentionSpec("probsparse", {"factor": 5})  # other sites inherited


def test_the_attention_merge_rule_is_the_one_every_path_calls():
    """merge_attention on its own, and through the three paths (extends:, a section over a default, an override)
    against it."""
    from lavo_zoo.attention.spec import merge_attention
    from lavo_zoo.config import merge

    def plain(base, over):
        return {**base, **over}

    assert merge_attention({"name": "sdpa", "rope": True}, {"name": "lavo"}, plain) == {"name": "lavo"}
    assert merge_attention({"name": "sdpa", "rope": True}, {"bias": False}, plain) == {
        "name": "sdpa", "rope": True, "bias": False}
    assert merge_attention("sdpa", {"rope": True}, plain) == {"name": "sdpa", "rope": True}  # a bare name
    assert merge_attention({"name": "lavo", "num_bases": 8}, "lavo", plain) == "lavo"  # a bare name replaces
    from lavo_zoo.recipes.lm.recipe import LMConfig

    base, over = {"model": {"attention": {"name": "sdpa", "rope": True}}}, {"model": {"attention": {"name": "lavo"}}}
    assert merge(base, over, schema=LMConfig) == {"model": {"attention": {"name": "lavo"}}}
    assert merge(base, over) == {"model": {"attention": {"name": "lavo", "rope": True}}}  # no schema: key by key
    assert apply_overrides(base, ["model.attention.name=lavo"], LMConfig) == over
