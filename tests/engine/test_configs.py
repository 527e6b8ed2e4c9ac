"""Named configs (zoo/engine/configs.py): every built-in config validates; a missing file, an unknown name or recipe
and a directory given as the config are refused, naming what was wrong."""
import dataclasses
from pathlib import Path

import pytest

from lavo_zoo.cli import main
from lavo_zoo.engine.configs import config_from_dict, find_config, resolve_config
from lavo_zoo.errors import ConfigError, UsageError

REPO = Path(__file__).resolve().parents[2]


def test_every_builtin_config_validates():
    from lavo_zoo.engine.configs import available_configs
    files = {f"{p.parent.parent.name}/{p.stem}" for p in REPO.glob("recipes/*/configs/*.yaml")}
    names = available_configs()
    assert len(files) > 7 and files <= set(names)  # every built-in config file is found by its name
    for name in names:
        recipe, cfg = resolve_config(name)
        assert cfg.recipe == recipe.name, name


def test_a_directory_as_the_config_is_called_a_directory(tmp_path, capsys):
    assert main(["train", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "is a directory, not a config file" in capsys.readouterr().err


def test_missing_files_unknown_names_and_recipes_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        find_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="no config named 'nodomain/none'"):
        find_config("nodomain/none")
    with pytest.raises(ConfigError, match="no 'recipe:' key"):
        config_from_dict({"train": {}})
    with pytest.raises(UsageError, match="unknown recipe 'tyo'.*did you mean 'toy'"):
        config_from_dict({"recipe": "tyo"})


def test_a_section_another_command_reads_is_left_out_of_the_runs_config(tmp_path):
    """A top-level section declared in the config-sections group (another command's, e.g. where a study runs its
    cells) is kept apart when a config is read: `train` and the runs' config.yaml never see it, so it cannot make a
    kept cell look trained otherwise; an undeclared one is still refused."""
    from lavo_zoo.config import to_dict
    from lavo_zoo.engine.configs import CONFIG_SECTIONS, load_config

    path = tmp_path / "sweep.yaml"
    path.write_text("extends: time_series/tiny-lavo\nsweep: {trials: 8}\n")
    with pytest.raises(ConfigError, match="unknown config key 'sweep'"):
        resolve_config(str(path))
    CONFIG_SECTIONS.register("sweep", Sweep)
    try:
        _, cfg = resolve_config(str(path))
        loaded = load_config(str(path))
        assert to_dict(cfg) == to_dict(resolve_config("time_series/tiny-lavo")[1])
        assert loaded.sections == {"sweep": {"trials": 8}} and "sweep" not in loaded.data
        assert to_dict(loaded.validated(["train.seed=3"])) == to_dict(resolve_config(str(path), ["train.seed=3"])[1])
        assert "sweep" not in to_dict(config_from_dict({**loaded.data, **loaded.sections})[1])
        assert loaded.settings == {"sweep": Sweep(trials=8)}  # validated against its declared schema
        path.write_text("extends: time_series/tiny-lavo\nsweep: {trails: 8}\n")
        with pytest.raises(ConfigError, match=rf"unknown config key 'sweep.trails' in {path}, section 'sweep'.*"
                                              "sweep.trials"):
            load_config(str(path))
    finally:
        CONFIG_SECTIONS._entries.pop("sweep")


@dataclasses.dataclass
class Sweep:
    """A section another command reads (the tests' own, declared as a plugin's would be)."""

    trials: int = 1


def test_a_section_declared_with_no_schema_is_named(tmp_path):
    """A section's declaration is the dataclass it is read into: anything else is refused when a config holding the
    section is read, naming the section and who declared it."""
    from lavo_zoo.engine.configs import CONFIG_SECTIONS, load_config

    path = tmp_path / "sweep.yaml"
    path.write_text("extends: time_series/tiny-lavo\nsweep: {trials: 8}\n")
    CONFIG_SECTIONS.register("sweep", print, source="my-plugin")
    try:
        with pytest.raises(UsageError, match=r"config section 'sweep' \(my-plugin\) .* not a dataclass"):
            load_config(str(path))
    finally:
        CONFIG_SECTIONS._entries.pop("sweep")