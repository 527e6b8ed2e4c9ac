"""Config mistakes a new user makes get an error naming the key or file, and a
child config can delete an inherited key."""
from dataclasses import dataclass, field

import pytest

from lavo_zoo.cli import main
from lavo_zoo.config import RunConfig, apply_overrides, from_dict, load_yaml
from lavo_zoo.engine.recipe import resolve_config
from lavo_zoo.errors import ConfigError

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


def test_duplicate_keys_and_non_utf8_files_are_refused_naming_the_file(tmp_path):
    (tmp_path / "dup.yaml").write_text("recipe: toy\ntrain: {lr: 1, lr: 2}\n")
    with pytest.raises(ConfigError, match=r"dup.yaml.*duplicate key 'lr' on line 2"):
        load_yaml(tmp_path / "dup.yaml")
    (tmp_path / "anchors.yaml").write_text("a: &x {p: 1, q: 2}\nb:\n  <<: *x\n  q: 3\n")  # a merge key is no duplicate
    assert load_yaml(tmp_path / "anchors.yaml")["b"] == {"p": 1, "q": 3}
    (tmp_path / "latin1.yaml").write_bytes("recipe: toy\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1.yaml is not UTF-8 text \(byte 17"):
        load_yaml(tmp_path / "latin1.yaml")


def test_a_directory_as_the_config_is_called_a_directory(tmp_path, capsys):
    assert main(["train", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "is a directory, not a config file" in capsys.readouterr().err


@pytest.mark.parametrize("override, message", [
    ("train.lr=-1", "'train.lr' .* must be > 0, got -1"),
    ("train.betas=[2,3]", r"'train.betas\[0\]' .* must be >= 0 and < 1, got 2"),
    ("train.save_every=0", "'train.save_every' .* must be >= 1, got 0"),
    ("train.log_every=0", "'train.log_every' .* must be >= 1, got 0"),
    ("train.batch_size=0", "'train.batch_size' .* must be >= 1"),
    ("train.max_epochs=0", "'train.max_epochs' .* must be >= 1"),
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

